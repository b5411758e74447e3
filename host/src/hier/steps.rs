//! What the hierarchical collectives are made of in the rank's own
//! memory: the staging of the step between nodes, folds in a given order
//! by the node's engine, and the gathers across nodes.

use super::{HierComm, HERE};
use crate::collectives::Collectives;
use crate::element::RsElement;
use crate::error::Result;
use crate::front::{Backend, Comm, Engine};
use ringreduce_kernels::abi::{LocalArgs, BATCH_RANKS};
use ringreduce_kernels::plan::PACK_BYTES;
use ringreduce_kernels::Collective;
use ringreduce_kernels::Op;
use std::ops::Range;
use std::sync::MutexGuard;

/// Where each part of the step's staging starts: a multiple of the wide
/// packs, so that the folds over it may take the wide path.
const STAGING_ALIGN: usize = 256;

/// The step's staging, held for one call.
pub(super) type Staging<'a, B> = MutexGuard<'a, Option<<B as Engine>::Buf<u8>>>;

/// `bytes` rounded up to where the next part of the staging may start.
pub(super) fn room(bytes: usize) -> usize {
    bytes.next_multiple_of(STAGING_ALIGN)
}

impl<B: Backend> HierComm<B> {
    /// The step's staging, at least `bytes` of it, and its address: the
    /// guard keeps it this call's.
    pub(super) fn staging(&self, bytes: usize) -> Result<(Staging<'_, B>, u64)> {
        self.staging_in(0, bytes)
    }

    /// Slot `slot` of the step's staging, at least `bytes` of it, and its
    /// address. Growing it first waits for every step queued, which may
    /// still read or write the old one.
    pub(super) fn staging_in(&self, slot: usize, bytes: usize) -> Result<(Staging<'_, B>, u64)> {
        let mut staging = self.staging[slot].lock().unwrap_or_else(|e| e.into_inner());
        let have = staging.as_ref().map_or(0, <Comm<B> as Collectives>::len_of);
        if have < bytes {
            self.settle_steps()?;
            let me = self.intra.local_ranks().start;
            *staging = Some(self.intra.upload(me, &vec![0u8; bytes])?);
        }
        let base = self
            .intra
            .b
            .addr_at(HERE, staging.as_ref().expect("just made"), 0);
        Ok((staging, base))
    }

    /// Once the rank's queue has run what it holds, every node's `bytes`
    /// at `send` into `all`, in node order; what the watch heard if the
    /// step was cut short.
    pub(super) fn gather_in_place(&self, send: u64, bytes: usize, all: u64) -> Result<()> {
        self.intra.synchronize()?;
        // SAFETY: `send` holds `bytes` of the rank's owned elements, `all`
        // room for every node's: the caller's buffer and the staging it
        // holds, with nothing else queued on them.
        let moved = unsafe { self.across.all_gather_at(send, bytes, all) };
        moved.map_err(|e| self.cause_of(e))
    }

    /// Queues a copy of `src` of `from` into `dst` from element `at`, in
    /// this rank's memory (a fold of one source); the ranges must not
    /// overlap.
    pub(crate) fn copy_into<T: RsElement>(
        &self,
        dst: &B::Buf<T>,
        at: usize,
        from: &B::Buf<T>,
        src: Range<usize>,
    ) -> Result<()> {
        let b = &self.intra.b;
        let (to, from) = (b.addr_at(HERE, dst, at), b.addr_at(HERE, from, src.start));
        self.fold_chain::<T>(to, &[from], src.len(), Op::Sum)
    }

    /// Queues `op` over `sources` (each `n` elements of `T` in this rank's
    /// memory) folded in the order given into `dst`, `Avg` dividing by the
    /// job's size: one local fold per [`BATCH_RANKS`] sources, each after
    /// the first taking the running result as its first source, so the
    /// fold stays a left fold in source order whatever their number.
    pub(super) fn fold_chain<T: RsElement>(
        &self,
        dst: u64,
        sources: &[u64],
        n: usize,
        op: Op,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let world = self.nodes.world() as u64;
        let mut rest = sources;
        let mut first = true;
        while !rest.is_empty() {
            let take = rest.len().min(BATCH_RANKS - usize::from(!first));
            let (now, later) = rest.split_at(take);
            let inputs: Vec<u64> = (!first)
                .then_some(dst)
                .into_iter()
                .chain(now.iter().copied())
                .collect();
            let step_op = if op == Op::Avg && !later.is_empty() {
                Op::Sum
            } else {
                op
            };
            let size = std::mem::size_of::<T>() as u64;
            let aligned = inputs.iter().chain([&dst]).all(|&a| a % PACK_BYTES == 0);
            let mut args = LocalArgs {
                collective: Collective::AllReduce as u64,
                ranks: inputs.len() as u64,
                blocks: 0,
                total: n as u64,
                segment: n as u64,
                aligned: u64::from(aligned && size <= PACK_BYTES),
                send: [0; BATCH_RANKS],
                recv: [0; BATCH_RANKS],
                divisor: world,
            };
            args.send[..inputs.len()].copy_from_slice(&inputs);
            args.recv[..inputs.len()].fill(dst);
            // SAFETY: every source and `dst` hold `n` elements of `T` in
            // this rank's memory (the caller's buffer or the staging it
            // holds), until the synchronize that ends the step.
            unsafe { self.intra.b.fold(HERE, T::DTYPE, step_op, args)? };
            rest = later;
            first = false;
        }
        Ok(())
    }

    /// Every node's `mine` (as long on every node), in node order: the
    /// step between nodes, reporting what the watch heard if it cut the
    /// step short.
    pub(super) fn gather_across<T: bytemuck::Pod>(&self, mine: &[T]) -> Result<Vec<T>> {
        let mut all = vec![T::zeroed(); mine.len() * self.across.members()];
        let moved = self.across.all_gather(
            bytemuck::cast_slice(mine),
            bytemuck::cast_slice_mut(&mut all),
        );
        moved.map_err(|e| self.cause_of(e))?;
        Ok(all)
    }

    /// Waits for every step between nodes queued (polled for errors, an
    /// abort and the timeout), then for the rank's queue.
    pub(super) fn settle_steps(&self) -> Result<()> {
        self.across.settle().map_err(|e| self.cause_of(e))?;
        self.intra.synchronize()
    }
}
