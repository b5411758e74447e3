//! The hierarchical all-reduce's schedule: the node's reduce-scatter, the
//! step between nodes (dense, or compressed for the gradient layer), the
//! node's all-gather. The dense form is also split into begin, end and
//! settle, so that one bucket's step between nodes may run while the next
//! bucket is reduced inside its node.

use super::steps::{room, Staging};
use super::wire::{self, Step};
use super::{HierComm, HERE};
use crate::across::Ticket;
use crate::collectives::Collectives;
use crate::element::{DataType, RsElement};
use crate::error::{Error, Result};
use crate::front::{Backend, Comm};
use crate::grad::{SparseSent, Wire};
use crate::region::Region;
use ringreduce_kernels::Op;
use std::ops::Range;

/// A dense all-reduce whose step between nodes was queued by
/// `HierComm::begin_all_reduce_at` and may still be running;
/// `HierComm::end_all_reduce_at` finishes it.
pub struct Begun<'a, B: Backend> {
    /// Keeps the step's staging slot this all-reduce's.
    _staging: Option<Staging<'a, B>>,
    /// The step between nodes, to fold in once it has landed.
    crossing: Option<Crossing>,
    /// The node's whole shards, to all-gather after the fold.
    shards: Range<usize>,
}

/// A dense step between nodes, queued: where the rank's owned elements
/// are, where every node's landed, and what to fold them with.
struct Crossing {
    /// The shard's and the tail's first elements in the rank's buffer.
    out: u64,
    out_tail: u64,
    /// Their lengths, in elements.
    c: usize,
    t: usize,
    /// Every node's `shard ++ tail`, in node order, `bytes` each.
    all: u64,
    bytes: usize,
    op: Op,
    ticket: Ticket,
}

impl<B: Backend> HierComm<B> {
    /// In place, `op` over every rank's `buf` (the same length on every
    /// rank), and waits for it. On one host, the host's all-reduce; across
    /// hosts, a reduce-scatter inside the node, the rank's shard across
    /// nodes folded in node order, an all-gather inside the node. The
    /// elements past the last whole shard (fewer than a node's ranks) are
    /// all-reduced inside the node and folded across nodes the same way.
    /// `Avg` sums throughout and divides once, by the job's size.
    pub fn all_reduce<T: RsElement>(&self, buf: &mut B::Buf<T>, op: Op) -> Result<()> {
        let n = <Comm<B> as Collectives>::len_of(buf);
        self.all_reduce_at(buf, 0..n, Step::Full(op), None)
            .map(|_| ())
    }

    /// [`all_reduce`](Self::all_reduce) of `at` of `buf`, with the step
    /// between nodes as `step` says; what that step sent.
    pub(crate) fn all_reduce_at<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        step: Step,
        residual: Option<&mut B::Buf<f32>>,
    ) -> Result<SparseSent> {
        self.guarded(|| self.all_reduce_steps(buf, at, step, residual))
    }

    /// [`all_reduce_at`](Self::all_reduce_at) unguarded.
    pub(super) fn all_reduce_steps<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        step: Step,
        mut residual: Option<&mut B::Buf<f32>>,
    ) -> Result<SparseSent> {
        if matches!(step, Step::Wire(_)) && T::DTYPE != DataType::F32 {
            return Err(Error::HalfNeedsF32(T::DTYPE.name()));
        }
        let (op, wire) = match step {
            Step::Full(op) => (op, None),
            Step::Wire(w @ Wire::Half { prescale: true, .. }) => (Op::Avg, Some(w)),
            Step::Wire(w) => (Op::Sum, Some(w)),
        };
        let Some(wire) = wire.filter(|_| !self.nodes.is_one_node()) else {
            // The dense step, or one host (where no step between nodes is
            // compressed: the host's own all-reduce, as a flat job runs
            // it): begun, ended and waited for.
            let begun = self.begin_steps(buf, at, op, 0)?;
            self.end_steps(buf, begun)?;
            self.settle_steps()?;
            return Ok(wire::UNCOMPRESSED);
        };
        let (shards, shard) = self.node_reduce(buf, &at, Op::Sum, residual.as_deref_mut())?;
        let tail = shards.end..at.end;
        let sent = match wire {
            Wire::Half {
                precision,
                prescale,
            } => {
                self.cross_half_in_place(buf, shard, tail, precision, prescale)?;
                wire::UNCOMPRESSED
            }
            Wire::Sparse {
                sparsity,
                dense_above,
            } => {
                let how = (sparsity, dense_above);
                let owned = (shard, tail);
                let (sent, node_done) =
                    self.cross_sparse_in_place(buf, shards.clone(), owned, how, residual)?;
                if node_done {
                    self.intra.synchronize()?;
                    return Ok(sent);
                }
                sent
            }
        };
        self.node_gather(buf, shards)?;
        self.intra.synchronize()?;
        Ok(sent)
    }

    /// The node's first steps over `at` of `buf`, queued: the
    /// reduce-scatter (`inner`) of its whole shards, then the all-reduce of
    /// the tail past them (fewer elements than the node's ranks), which
    /// `residual`, where given, joins first. Returns the node's whole
    /// shards and this rank's own.
    fn node_reduce<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: &Range<usize>,
        inner: Op,
        residual: Option<&mut B::Buf<f32>>,
    ) -> Result<(Range<usize>, Range<usize>)> {
        let per = self.nodes.per_node();
        let c = at.len() / per;
        let (o, main) = (at.start, at.start + c * per);
        let me = self.intra.local_ranks().start;
        if c > 0 {
            let mut r = [Region::InPlace {
                buf: &mut *buf,
                at: o..main,
            }];
            self.intra.reduce_scatter(&mut r, inner)?;
        }
        let t = at.end - main;
        if t > 0 {
            if let Some(r) = residual {
                // Every local rank carries the tail across, so it must be
                // the same on all of them: each rank's residual joins its
                // tail before the node's all-reduce and is all sent.
                let g = self.intra.read(me, buf, main..at.end)?;
                let kept = self.intra.read(me, r, main..at.end)?;
                let sum: Vec<f32> = bytemuck::cast_slice::<T, f32>(&g)
                    .iter()
                    .zip(&kept)
                    .map(|(g, r)| g + r)
                    .collect();
                self.intra
                    .write(me, buf, main, bytemuck::cast_slice::<f32, T>(&sum))?;
                self.intra.write(me, r, main, &vec![0.0; t])?;
            }
            let mut r = [Region::InPlace {
                buf: &mut *buf,
                at: main..at.end,
            }];
            self.intra.all_reduce(&mut r, inner)?;
        }
        let l = self.nodes.local_of(self.rank);
        Ok((o..main, o + l * c..o + (l + 1) * c))
    }

    /// The node's last step, queued: the all-gather of its whole shards.
    fn node_gather<T: RsElement>(&self, buf: &mut B::Buf<T>, shards: Range<usize>) -> Result<()> {
        if shards.is_empty() {
            return Ok(());
        }
        let mut r = [Region::InPlace { buf, at: shards }];
        self.intra.all_gather(&mut r)
    }

    /// Begins the dense all-reduce (`op`) of `at` of `buf`: the node's
    /// reduce-scatter and the step between nodes are queued, with staging
    /// slot `slot`, and the call returns without waiting for the bytes to
    /// move, so that the caller may queue another all-reduce's node steps
    /// while they do. [`end_all_reduce_at`](Self::end_all_reduce_at)
    /// queues the rest; [`settle`](Self::settle) waits. The fold order and
    /// the result are [`all_reduce`](Self::all_reduce)'s.
    pub(crate) fn begin_all_reduce_at<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        op: Op,
        slot: usize,
    ) -> Result<Begun<'_, B>> {
        self.guarded(|| self.begin_steps(buf, at, op, slot))
    }

    /// Ends an all-reduce of `buf` that
    /// [`begin_all_reduce_at`](Self::begin_all_reduce_at) began: once its
    /// step between nodes has landed (the rank's queue waits for it on the
    /// device), the fold in node order and the node's all-gather, queued.
    pub(crate) fn end_all_reduce_at<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        begun: Begun<'_, B>,
    ) -> Result<()> {
        self.guarded(|| self.end_steps(buf, begun))
    }

    /// Waits for every all-reduce begun and ended: the steps between nodes
    /// (polled for errors, an abort and the timeout), then the rank's
    /// queue.
    pub(crate) fn settle(&self) -> Result<()> {
        // Never refused: after an error too, whatever is still queued must
        // end before the caller may reuse its buffers.
        self.settle_steps().map_err(|e| self.failed(e))
    }

    fn begin_steps<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        op: Op,
        slot: usize,
    ) -> Result<Begun<'_, B>> {
        if self.nodes.is_one_node() {
            let mut r = [Region::InPlace { buf, at }];
            self.intra.all_reduce(&mut r, op)?;
            return Ok(Begun {
                _staging: None,
                crossing: None,
                shards: 0..0,
            });
        }
        let inner = if op == Op::Avg { Op::Sum } else { op };
        let (shards, shard) = self.node_reduce(buf, &at, inner, None)?;
        let tail = shards.end..at.end;
        let (staging, crossing) = self.queue_cross(buf, shard, tail, op, slot)?;
        Ok(Begun {
            _staging: staging,
            crossing,
            shards,
        })
    }

    fn end_steps<T: RsElement>(&self, buf: &mut B::Buf<T>, begun: Begun<'_, B>) -> Result<()> {
        if let Some(x) = &begun.crossing {
            self.across.join(&x.ticket)?;
            let node = |at: usize| -> Vec<u64> {
                let m = self.nodes.count();
                (0..m).map(|u| x.all + (u * x.bytes + at) as u64).collect()
            };
            let sz = std::mem::size_of::<T>();
            self.fold_chain::<T>(x.out, &node(0), x.c, x.op)?;
            self.fold_chain::<T>(x.out_tail, &node(x.c * sz), x.t, x.op)?;
        }
        self.node_gather(buf, begun.shards.clone())
    }

    /// The dense step between nodes in the rank's own memory, queued: its
    /// owned elements (`shard`, then `tail`, of `buf`) gathered from every
    /// node into staging slot `slot`, to be folded in node order back into
    /// place by the local engine, every node a rank of it (`Avg` sums and
    /// divides once, by the job's size), once they have landed. Nothing
    /// crosses to the host.
    fn queue_cross<T: RsElement>(
        &self,
        buf: &B::Buf<T>,
        shard: Range<usize>,
        tail: Range<usize>,
        op: Op,
        slot: usize,
    ) -> Result<(Option<Staging<'_, B>>, Option<Crossing>)> {
        let b = &self.intra.b;
        let sz = std::mem::size_of::<T>();
        let (c, t, m) = (shard.len(), tail.len(), self.nodes.count());
        let bytes = (c + t) * sz;
        if bytes == 0 {
            return Ok((None, None));
        }
        let out = b.addr_at(HERE, buf, shard.start);
        let out_tail = b.addr_at(HERE, buf, tail.start);
        // Send straight from the shard; with a tail, the two together from
        // staging, since NCCL sends one range.
        let send_room = if t == 0 { 0 } else { room(bytes) };
        let (staging, base) = self.staging_in(slot, send_room + m * bytes)?;
        let all = base + send_room as u64;
        let send = if t == 0 {
            out
        } else {
            self.fold_chain::<T>(base, &[out], c, Op::Sum)?;
            self.fold_chain::<T>(base + (c * sz) as u64, &[out_tail], t, Op::Sum)?;
            base
        };
        let drain = || self.intra.synchronize();
        // SAFETY: `send` holds `bytes` of the rank's owned elements, `all`
        // room for every node's: the caller's buffer and the staging slot
        // the returned guard holds, which nothing else uses until the
        // step has landed and been folded (`settle` waits for it).
        let queued = unsafe { self.across.queue_all_gather_at(send, bytes, all, &drain) };
        let ticket = queued.map_err(|e| self.cause_of(e))?;
        let crossing = Crossing {
            out,
            out_tail,
            c,
            t,
            all,
            bytes,
            op,
            ticket,
        };
        Ok((Some(staging), Some(crossing)))
    }
}
