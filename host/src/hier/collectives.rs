//! A hierarchical rank as a [`Collectives`] backend and a [`GradBackend`],
//! so that code written once over them (the gradient layer, tests, the
//! bench) runs across nodes unchanged. Buffers, queues and tasks are the
//! rank's node communicator's; the collectives are the hierarchical ones,
//! which wait for their result.

use super::all_reduce::Begun;
use super::{HierComm, Step, HERE};
use crate::collectives::Collectives;
use crate::config::CommConfig;
use crate::cpu::CpuBackend;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::front::{rank_here, Backend, Comm, Engine};
use crate::gpu::GpuBackend;
use crate::grad::{GradBackend, SparseSent, Wire};
use crate::region::{one_region, ranges_of, Region};
use crate::ring::RingOrder;
use ringreduce_kernels::grad::abi::Task;
use ringreduce_kernels::{Algorithm, Collective, Op};
use std::ops::Range;

impl<B: Backend> HierComm<B> {
    /// The node communicator's rank for `rank`, which must be this one.
    fn here(&self, rank: usize) -> Result<usize> {
        rank_here(rank, self.nodes.world(), self.rank..self.rank + 1)?;
        Ok(self.intra.local_ranks().start)
    }

    /// Any collective on one region, in the rank's memory: the all-reduce
    /// (out of place, the input copied to the output first), the
    /// all-gather and the reduce-scatter (in place, the input copied to
    /// device scratch first, then as with input apart from output).
    fn region<T: RsElement>(
        &self,
        c: Collective,
        region: &mut Region<'_, B::Buf<T>>,
        op: Op,
    ) -> Result<()> {
        let world = self.nodes.world();
        let (send_at, recv_at) = ranges_of(c, region, self.rank, world)?;
        let apart = matches!(region, Region::OutOfPlace { .. })
            || send_at.end <= recv_at.start
            || recv_at.end <= send_at.start;
        if c == Collective::AllReduce {
            // In the rank's memory: the input copied to the output first
            // where they differ, then the all-reduce in place there.
            let step = Step::Full(op);
            let out = match region {
                Region::InPlace { buf, .. } => buf,
                Region::OutOfPlace { send, recv, .. } => {
                    self.copy_into(recv, recv_at.start, send, send_at.clone())?;
                    recv
                }
                Region::Split { buf, .. } if send_at != recv_at => {
                    if !apart {
                        return Err(Error::InPlaceMisplaced {
                            rank: self.rank,
                            collective: c.name(),
                        });
                    }
                    self.copy_into(buf, recv_at.start, buf, send_at.clone())?;
                    buf
                }
                Region::Split { buf, .. } => buf,
            };
            // Unguarded: the caller's guard names and handles its error.
            return self.all_reduce_steps(out, recv_at, step, None).map(|_| ());
        }
        if !apart {
            return self.in_place_via_scratch(c, region, send_at, recv_at, op);
        }
        if c == Collective::AllGather {
            return self.all_gather_apart(region, send_at, recv_at);
        }
        self.reduce_scatter_apart(region, send_at, recv_at, op)
    }
}

impl<B: Backend> HierComm<B> {
    /// An all-gather or reduce-scatter whose input overlaps its output:
    /// the input copied to device scratch, then the path for input apart
    /// from output, which waits for its result before the scratch goes.
    fn in_place_via_scratch<T: RsElement>(
        &self,
        c: Collective,
        region: &mut Region<'_, B::Buf<T>>,
        send_at: Range<usize>,
        recv_at: Range<usize>,
        op: Op,
    ) -> Result<()> {
        let n = send_at.len();
        let scratch = self.intra.b.zeroed::<T>(HERE, n)?;
        self.copy_into(&scratch, 0, region.input(), send_at)?;
        let mut apart = region.with_input(&scratch, 0..n, recv_at.clone());
        if c == Collective::AllGather {
            self.all_gather_apart(&mut apart, 0..n, recv_at)
        } else {
            self.reduce_scatter_apart(&mut apart, 0..n, recv_at, op)
        }
    }
}

/// The whole job's ranks, of which this process holds its own; buffers,
/// the algorithm and channels are its node communicator's. Calls wait
/// for their result (a later [`synchronize`](Collectives::synchronize)
/// has nothing left to wait for).
impl<B: Backend> Collectives for HierComm<B> {
    type Buf<T: RsElement> = B::Buf<T>;

    /// A hierarchical rank is one process of a job: it is made by
    /// [`HierComm::init_rank`], never `k` at once.
    fn create(_k: usize, _config: CommConfig) -> Result<Self> {
        Err(Error::JobOnly("HierComm::init_rank"))
    }
    fn k(&self) -> usize {
        self.nodes.world()
    }
    fn local_ranks(&self) -> Range<usize> {
        self.rank..self.rank + 1
    }
    /// The ring inside this rank's node (over its local ranks): across
    /// nodes, the fold is in node order.
    fn ring_order(&self) -> &RingOrder {
        self.intra.ring_order()
    }
    fn config(&self) -> &CommConfig {
        self.intra.config()
    }
    fn max_channels(&self) -> usize {
        self.intra.max_channels()
    }
    /// The algorithm inside the node.
    fn algorithm_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<Algorithm> {
        self.intra.algorithm_for::<T>(c, n)
    }
    fn channels_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<usize> {
        self.intra.channels_for::<T>(c, n)
    }
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<B::Buf<T>> {
        let here = self.here(rank)?;
        self.intra.upload(here, data)
    }
    fn len_of<T: RsElement>(buf: &B::Buf<T>) -> usize {
        <Comm<B> as Collectives>::len_of(buf)
    }
    fn read<T: RsElement>(&self, rank: usize, buf: &B::Buf<T>, at: Range<usize>) -> Result<Vec<T>> {
        let here = self.here(rank)?;
        self.intra.read(here, buf, at)
    }
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut B::Buf<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let here = self.here(rank)?;
        self.intra.write(here, buf, at, data)
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, B::Buf<T>>],
        op: Op,
    ) -> Result<()> {
        let region = one_region(regions, |b| <Comm<B> as Collectives>::len_of(b))?;
        self.guarded(|| self.region(c, region, op))
    }
    fn synchronize(&self) -> Result<()> {
        self.intra.synchronize()
    }
    fn abort(&self) {
        HierComm::abort(self)
    }
}

/// Queues, scratch buffers and tasks are the node communicator's; a task,
/// a queued write or a collective is refused once something stopped the
/// rank (`HierComm::guarded`), so a gradient call reports that, while
/// queues are still ordered. The collectives are ordered after the queues
/// they are given, and those queues after them. Half precision and sparse
/// selection compress only the step between nodes
/// ([`reduce_across`](GradBackend::reduce_across)).
///
/// One impl per backend (a generic one would need `Comm<B>: GradBackend`,
/// under which Rust no longer sees the two buffer types as one).
macro_rules! grad_backend {
    ($b:ty) => {
        impl GradBackend for HierComm<$b> {
            type Queue = <Comm<$b> as GradBackend>::Queue;
            type Hold = <Comm<$b> as GradBackend>::Hold;

            fn new_queues(&self) -> Result<Vec<Self::Queue>> {
                self.intra.new_queues()
            }
            fn own_queues(&self) -> Vec<Self::Queue> {
                self.intra.own_queues()
            }
            fn queue_id(&self, queue: &Self::Queue) -> u64 {
                self.intra.queue_id(queue)
            }
            fn order(&self, waiters: &[Self::Queue], ons: &[Self::Queue]) -> Result<()> {
                // Never refused: ordering queues is what keeps a caller's
                // work after whatever is still in flight, after an error too.
                self.intra.order(waiters, ons)
            }
            fn alloc<T: RsElement>(
                &self,
                rank: usize,
                queue: &Self::Queue,
                n: usize,
            ) -> Result<<$b as Engine>::Buf<T>> {
                self.intra.alloc(rank, queue, n)
            }
            fn addr<T: RsElement>(&self, rank: usize, buf: &<$b as Engine>::Buf<T>) -> u64 {
                self.intra.addr(rank, buf)
            }
            fn check_placement<T: RsElement>(
                &self,
                rank: usize,
                buf: &<$b as Engine>::Buf<T>,
            ) -> Result<()> {
                self.intra.check_placement(rank, buf)
            }
            fn hold<T: RsElement>(buf: &<$b as Engine>::Buf<T>) -> Self::Hold {
                <Comm<$b> as GradBackend>::hold(buf)
            }
            fn write_on<T: RsElement>(
                &self,
                rank: usize,
                queue: &Self::Queue,
                buf: &mut <$b as Engine>::Buf<T>,
                data: &[T],
            ) -> Result<()> {
                self.guarded(|| self.intra.write_on(rank, queue, buf, data))
            }
            unsafe fn run_task(
                &self,
                rank: usize,
                queue: &Self::Queue,
                task: Task,
                holds: Vec<Self::Hold>,
            ) -> Result<()> {
                // SAFETY: the caller's promise, passed on.
                self.guarded(|| unsafe { self.intra.run_task(rank, queue, task, holds) })
            }
            fn collective_on<T: RsElement>(
                &self,
                c: Collective,
                regions: &mut [Region<'_, <$b as Engine>::Buf<T>>],
                op: Op,
                queues: &[Self::Queue],
            ) -> Result<()> {
                self.across_queues(queues, || self.collective(c, regions, op))
            }
            fn reduce_across<T: RsElement>(
                &self,
                buf: &mut <$b as Engine>::Buf<T>,
                n: usize,
                wire: Wire,
                residual: Option<&mut <$b as Engine>::Buf<f32>>,
                queue: &Self::Queue,
            ) -> Option<Result<SparseSent>> {
                let queues = std::slice::from_ref(queue);
                Some(self.across_queues(queues, || {
                    self.all_reduce_at(buf, 0..n, Step::Wire(wire), residual)
                }))
            }
            type Begun<'a> = Begun<'a, $b>;
            fn begin_all_reduce<'a>(
                &'a self,
                buf: &mut <$b as Engine>::Buf<f32>,
                n: usize,
                op: Op,
                queue: &Self::Queue,
                slot: usize,
            ) -> Option<Result<Begun<'a, $b>>> {
                let own = self.intra.own_queues();
                let begun = self
                    .intra
                    .order(&own, std::slice::from_ref(queue))
                    .and_then(|_| self.begin_all_reduce_at(buf, 0..n, op, slot));
                Some(begun)
            }
            fn end_all_reduce(
                &self,
                buf: &mut <$b as Engine>::Buf<f32>,
                begun: Begun<'_, $b>,
                queue: &Self::Queue,
            ) -> Result<()> {
                let queues = std::slice::from_ref(queue);
                self.across_queues(queues, || self.end_all_reduce_at(buf, begun))
            }
            fn settle(&self) -> Result<()> {
                HierComm::settle(self)
            }
        }
    };
}

grad_backend!(CpuBackend);
grad_backend!(GpuBackend);

impl<B: Backend> HierComm<B>
where
    Comm<B>: GradBackend,
{
    /// `f`, which runs on the node communicator's own queues, ordered
    /// after the work on `queues` and before any later.
    fn across_queues<R>(
        &self,
        queues: &[<Comm<B> as GradBackend>::Queue],
        f: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let own = self.intra.own_queues();
        self.intra.order(&own, queues)?;
        let r = f()?;
        self.intra.order(queues, &own)?;
        Ok(r)
    }
}
