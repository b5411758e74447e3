//! Flat NCCL behind the same [`Collectives`] interface as our kernels: one
//! rank per process, joined through our bootstrap (rank 0's NCCL id rides
//! the rendezvous), every type and op NCCL has. It is the baseline the
//! hierarchical backend is measured against, and what a user without a
//! fixed fold order can choose.

use crate::bootstrap::{UniqueId, Watch};
use crate::collectives::Collectives;
use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::front::{meet, peer_error, rank_here};
use crate::nccl::link::{new_id, Link};
use crate::nccl::{nccl_op, nccl_type};
use crate::region::{one_region, ranges_of, Region};
use crate::ring::RingOrder;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use ringreduce_kernels::{Algorithm, Collective, Op};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// One rank of a flat NCCL job.
pub struct NcclCommunicator {
    link: Arc<Link>,
    rank: usize,
    world: usize,
    config: CommConfig,
    ring: RingOrder,
    watch: Option<Watch>,
    /// What the watch heard first: a call cut short by it reports this.
    cause: Arc<OnceLock<Error>>,
}

impl NcclCommunicator {
    /// Rank `rank` of `world` processes sharing `id`, on GPU `device`: the
    /// rendezvous carries rank 0's NCCL id; every rank fails with
    /// [`Error::NcclUnavailable`] where rank 0 cannot load NCCL.
    pub fn init_rank(
        id: &UniqueId,
        rank: usize,
        world: usize,
        device: usize,
        config: CommConfig,
    ) -> Result<Self> {
        let timeout = config.effective_timeout();
        let mut met = meet(id, rank, world, &config)?;
        let mine: std::result::Result<Vec<u8>, String> = if rank == 0 {
            new_id().map_err(|e| e.to_string())
        } else {
            Ok(Vec::new())
        };
        let card = postcard::to_stdvec(&mine)
            .map_err(|e| Error::Bootstrap(format!("encoding the NCCL id: {e}")))?;
        let cards = met.exchange(&card, timeout)?;
        let first: std::result::Result<Vec<u8>, String> = postcard::from_bytes(&cards[0])
            .map_err(|e| Error::Rendezvous(format!("rank 0's NCCL id is unreadable: {e}")))?;
        let nccl_id = first.map_err(|e| Error::NcclUnavailable(format!("on rank 0: {e}")))?;
        let ctx = crate::gpu::driver::open_device(device)?;
        let link = Arc::new(Link::init(ctx, &nccl_id, rank, world, timeout)?);
        let cause = Arc::new(OnceLock::new());
        let (heard, cut) = (cause.clone(), link.clone());
        let watch = Watch::start(met, move |e| {
            let _ = heard.set(peer_error(e));
            cut.abort();
        })?;
        Ok(NcclCommunicator {
            link,
            rank,
            world,
            ring: RingOrder::identity(world),
            config,
            watch: Some(watch),
            cause,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// `e`, or what the watch heard if it cut the call short.
    fn cause_of(&self, e: Error) -> Error {
        match (&e, self.cause.get()) {
            (Error::Aborted { .. }, Some(c)) => c.clone(),
            _ => e,
        }
    }

    /// That `rank` is this process's.
    fn check_rank(&self, rank: usize) -> Result<()> {
        rank_here(rank, self.world, self.rank..self.rank + 1).map(|_| ())
    }
}

/// NCCL's collectives on this process's one rank; calls are queued on the
/// link's stream and [`synchronize`](Collectives::synchronize) waits for
/// them. NCCL chooses its own algorithm and fold order, so floats need
/// not match a reference bit for bit (integers and min/max do).
impl Collectives for NcclCommunicator {
    type Buf<T: RsElement> = CudaSlice<T>;

    /// An NCCL rank is one process of a job: made by
    /// [`NcclCommunicator::init_rank`], never `k` at once.
    fn create(_k: usize, _config: CommConfig) -> Result<Self> {
        Err(Error::JobOnly("NcclCommunicator::init_rank"))
    }
    fn k(&self) -> usize {
        self.world
    }
    fn local_ranks(&self) -> Range<usize> {
        self.rank..self.rank + 1
    }
    /// Rank order: NCCL builds its own rings.
    fn ring_order(&self) -> &RingOrder {
        &self.ring
    }
    fn config(&self) -> &CommConfig {
        &self.config
    }
    fn max_channels(&self) -> usize {
        1
    }
    /// Reported as the ring: NCCL chooses.
    fn algorithm_for<T: RsElement>(&self, _c: Collective, _n: usize) -> Result<Algorithm> {
        Ok(Algorithm::Ring)
    }
    fn channels_for<T: RsElement>(&self, _c: Collective, _n: usize) -> Result<usize> {
        Ok(1)
    }
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<CudaSlice<T>> {
        self.check_rank(rank)?;
        Ok(self.link.stream.clone_htod(data)?)
    }
    fn len_of<T: RsElement>(buf: &CudaSlice<T>) -> usize {
        buf.len()
    }
    fn read<T: RsElement>(
        &self,
        rank: usize,
        buf: &CudaSlice<T>,
        at: Range<usize>,
    ) -> Result<Vec<T>> {
        self.check_rank(rank)?;
        crate::region::check_range(rank, "buffer", &at, buf.len())?;
        self.synchronize()?;
        Ok(self.link.stream.clone_dtoh(&buf.slice(at))?)
    }
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut CudaSlice<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        self.check_rank(rank)?;
        let r = at..at.saturating_add(data.len());
        crate::region::check_range(rank, "buffer", &r, buf.len())?;
        Ok(self.link.stream.memcpy_htod(data, &mut buf.slice_mut(r))?)
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, CudaSlice<T>>],
        op: Op,
    ) -> Result<()> {
        let region = one_region(regions, |b: &CudaSlice<T>| b.len())?;
        let size = std::mem::size_of::<T>() as u64;
        let s = &self.link.stream;
        let (send_at, recv_at) = ranges_of(c, region, self.rank, self.world)?;
        let n = match c {
            Collective::ReduceScatter => recv_at.len(),
            _ => send_at.len(),
        };
        // The addresses of the buffers' starts, in use until the calls
        // are queued.
        let (send_base, recv_base, _in_use) = match region {
            Region::OutOfPlace { send, recv, .. } => {
                let (sp, ss) = send.device_ptr(s);
                let (rp, rs) = recv.device_ptr_mut(s);
                (sp, rp, vec![ss, rs])
            }
            Region::Split { buf, .. } | Region::InPlace { buf, .. } => {
                let (p, sync) = buf.device_ptr_mut(s);
                (p, p, vec![sync])
            }
        };
        if n == 0 {
            return Ok(());
        }
        let send = (send_base + send_at.start as u64 * size) as *const std::ffi::c_void;
        let recv = (recv_base + recv_at.start as u64 * size) as *mut std::ffi::c_void;
        let (t, o, l) = (nccl_type(T::DTYPE), nccl_op(op), &self.link);
        let done = match c {
            Collective::AllReduce => l.enqueue("ncclAllReduce", |cm, st| unsafe {
                // SAFETY: both ranges lie in their buffers (checked), which
                // stay borrowed until the caller synchronises.
                (l.n.all_reduce)(send, recv, n, t, o, cm, st as _)
            }),
            Collective::ReduceScatter => l.enqueue("ncclReduceScatter", |cm, st| unsafe {
                // SAFETY: as above.
                (l.n.reduce_scatter)(send, recv, n, t, o, cm, st as _)
            }),
            Collective::AllGather => l.enqueue("ncclAllGather", |cm, st| unsafe {
                // SAFETY: as above.
                (l.n.all_gather)(send, recv, n, t, cm, st as _)
            }),
        };
        done.map_err(|e| self.cause_of(e))
    }
    fn synchronize(&self) -> Result<()> {
        self.link.wait().map_err(|e| self.cause_of(e))
    }
    fn abort(&self) {
        self.link.abort();
        if let Some(w) = &self.watch {
            w.abort();
        }
    }
}

/// Leaves in order: NCCL's work ends, then the rank waits for every
/// other to leave, so none takes the others' exit for a death.
impl Drop for NcclCommunicator {
    fn drop(&mut self) {
        let _ = self.link.wait();
        if let Some(w) = self.watch.take() {
            let _ = w.leave(self.config.effective_timeout());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_fails_alike_where_rank_0_has_no_nccl() {
        if crate::nccl::version().is_ok() {
            // This machine has NCCL: the GPU tests cover it.
            return;
        }
        let id = UniqueId::new().expect("an id");
        let cfg = CommConfig::default().timeout(std::time::Duration::from_secs(10));
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let (id, cfg) = (id, cfg.clone());
                std::thread::spawn(move || NcclCommunicator::init_rank(&id, r, 2, 0, cfg).err())
            })
            .collect();
        for (r, h) in ranks.into_iter().enumerate() {
            let e = h.join().expect("no panic");
            assert!(
                matches!(&e, Some(Error::NcclUnavailable(t)) if t.starts_with("on rank 0")),
                "rank {r}: {e:?}"
            );
        }
    }
}
