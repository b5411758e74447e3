//! What the gradient layer needs from a backend beyond its collectives:
//! queues ordered by events, scratch buffers, raw addresses, and launches
//! of the kernel crate's tasks. The GPU communicator maps a queue to a CUDA
//! stream; the CPU execution has one queue per rank, its worker thread.

use crate::collectives::Collectives;
use crate::cpu::{CpuCommunicator, HostBuffer};
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::gpu::Communicator;
use crate::grad::{Precision, SparseSent, Sparsity};
use crate::region::Region;
use cudarc::driver::{sys, CudaEvent, CudaSlice, CudaStream, DevicePtr};
use ringreduce_kernels::grad::abi::Task;
use ringreduce_kernels::{Collective, Op};
use std::sync::Arc;

/// How many all-reduces the gradient layer keeps begun at once
/// ([`GradBackend::begin_all_reduce`]): one bucket on the wire while the
/// next is reduced inside its node, each in one of the layer's two bucket
/// slots and of the backend's staging slots.
pub(crate) const BEGUN_AT_ONCE: usize = 2;

/// A [`Collectives`] backend the gradient layer can run on.
pub trait GradBackend: Collectives {
    /// An ordered queue of work on one rank (a CUDA stream).
    type Queue: Clone;
    /// Keeps a buffer alive, and its host accessors waiting, while a task
    /// that uses it is queued.
    type Hold: Send + 'static;

    /// New queues, one per local rank (ranks of one launch may share one).
    /// Here and below, a `rank` argument counts the local ranks
    /// ([`Collectives::local_ranks`]).
    fn new_queues(&self) -> Result<Vec<Self::Queue>>;
    /// The queues the communicator's own calls use.
    fn own_queues(&self) -> Vec<Self::Queue>;
    /// An identity of `queue`: equal for queues that are one.
    fn queue_id(&self, queue: &Self::Queue) -> u64;
    /// Makes each `waiters[u]` wait, on the device, for the work queued on
    /// `ons[u]` so far (one pair per rank).
    fn order(&self, waiters: &[Self::Queue], ons: &[Self::Queue]) -> Result<()>;
    /// A zeroed buffer of `n` elements on rank `rank`, ready in order on
    /// `queue` (and freed in order on it when dropped).
    fn alloc<T: RsElement>(
        &self,
        rank: usize,
        queue: &Self::Queue,
        n: usize,
    ) -> Result<Self::Buf<T>>;
    /// The address of a buffer's first element.
    fn addr<T: RsElement>(&self, rank: usize, buf: &Self::Buf<T>) -> u64;
    /// An error if the buffer is not on rank `rank`'s device.
    fn check_placement<T: RsElement>(&self, rank: usize, buf: &Self::Buf<T>) -> Result<()>;
    /// See [`Hold`](Self::Hold).
    fn hold<T: RsElement>(buf: &Self::Buf<T>) -> Self::Hold;
    /// Copies `data` into the start of `buf`, in order on `queue`.
    fn write_on<T: RsElement>(
        &self,
        rank: usize,
        queue: &Self::Queue,
        buf: &mut Self::Buf<T>,
        data: &[T],
    ) -> Result<()>;
    /// Enqueues `task` on rank `rank`'s `queue`.
    ///
    /// # Safety
    /// Every address in `task` must be valid on that rank for what the task
    /// does, until it has run; `holds` keep the backend's buffers alive.
    unsafe fn run_task(
        &self,
        rank: usize,
        queue: &Self::Queue,
        task: Task,
        holds: Vec<Self::Hold>,
    ) -> Result<()>;
    /// [`Collectives::collective`] on the given queues (one per rank).
    fn collective_on<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, Self::Buf<T>>],
        op: Op,
        queues: &[Self::Queue],
    ) -> Result<()>;

    /// For a backend whose ranks span nodes, the all-reduce (a sum) of the
    /// first `n` elements of this process's one rank's `buf`, in place and
    /// ordered on `queue`, with only the step between nodes compressed as
    /// `wire` says (and `residual`, as long as `buf`, keeping what a
    /// sparse step did not send of the elements this rank carries across):
    /// `Some` with what it sent. `None`, the default: the backend has no
    /// such step, so the layer compresses the whole all-reduce itself.
    fn reduce_across<T: RsElement>(
        &self,
        buf: &mut Self::Buf<T>,
        n: usize,
        wire: Wire,
        residual: Option<&mut Self::Buf<f32>>,
        queue: &Self::Queue,
    ) -> Option<Result<SparseSent>> {
        let _ = (buf, n, wire, residual, queue);
        None
    }

    /// A dense all-reduce [`begin_all_reduce`](Self::begin_all_reduce)
    /// began.
    type Begun<'a>
    where
        Self: 'a;

    /// For a backend whose ranks span nodes, begins the in-place
    /// all-reduce (`op`) of the first `n` elements of this process's one
    /// rank's `buf`, ordered after `queue`, and returns once its step
    /// between nodes is queued: the caller queues the next bucket's node
    /// steps while the bytes move. `slot` (below `BEGUN_AT_ONCE`, 2)
    /// names the step's staging, one begun all-reduce per slot.
    /// [`end_all_reduce`](Self::end_all_reduce) finishes it and
    /// [`settle`](Self::settle) waits. `None`, the default: the backend
    /// has no such step, and the caller all-reduces as usual.
    fn begin_all_reduce<'a>(
        &'a self,
        buf: &mut Self::Buf<f32>,
        n: usize,
        op: Op,
        queue: &Self::Queue,
        slot: usize,
    ) -> Option<Result<Self::Begun<'a>>> {
        let _ = (buf, n, op, queue, slot);
        None
    }

    /// Queues the rest of an all-reduce of `buf` that
    /// [`begin_all_reduce`](Self::begin_all_reduce) began, once its step
    /// between nodes has landed, with `queue` ordered after it.
    fn end_all_reduce(
        &self,
        buf: &mut Self::Buf<f32>,
        begun: Self::Begun<'_>,
        queue: &Self::Queue,
    ) -> Result<()> {
        let _ = (buf, begun, queue);
        Ok(())
    }

    /// Waits for every all-reduce begun and ended.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

/// What a backend whose ranks span nodes compresses of the step between
/// them ([`GradBackend::reduce_across`]): the gradient layer's half
/// precision and sparse selection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wire {
    /// Values rounded to `precision` (divided by the job's size first with
    /// `prescale`).
    Half {
        /// The format on the wire.
        precision: Precision,
        /// Divide first, so the result is the average.
        prescale: bool,
    },
    /// A selection of the values, dense above `dense_above` of them.
    Sparse {
        /// Which values.
        sparsity: Sparsity,
        /// See [`GradConfig::dense_above`](super::GradConfig).
        dense_above: f64,
    },
}

impl GradBackend for Communicator {
    type Queue = Arc<CudaStream>;
    type Hold = ();
    type Begun<'a> = ();

    fn new_queues(&self) -> Result<Vec<Arc<CudaStream>>> {
        self.new_group_streams()
    }
    fn own_queues(&self) -> Vec<Arc<CudaStream>> {
        self.streams().to_vec()
    }
    fn queue_id(&self, queue: &Arc<CudaStream>) -> u64 {
        queue.cu_stream() as u64
    }
    /// Each distinct pair of streams once, with one event per distinct
    /// `on` stream: ranks that share their streams (virtual ranks on one
    /// GPU) would otherwise cost the host four driver calls per rank and
    /// pair, which bound the streamed fused form (`bench/NOTES.md`).
    fn order(&self, waiters: &[Arc<CudaStream>], ons: &[Arc<CudaStream>]) -> Result<()> {
        let mut recorded: Vec<(sys::CUstream, CudaEvent)> = Vec::new();
        let mut done: Vec<(sys::CUstream, sys::CUstream)> = Vec::new();
        for (waiter, on) in waiters.iter().zip(ons) {
            let pair = (waiter.cu_stream(), on.cu_stream());
            if pair.0 == pair.1 || done.contains(&pair) {
                continue;
            }
            done.push(pair);
            let at = match recorded.iter().position(|(s, _)| *s == pair.1) {
                Some(i) => i,
                None => {
                    recorded.push((pair.1, on.record_event(None)?));
                    recorded.len() - 1
                }
            };
            waiter.wait(&recorded[at].1)?;
        }
        Ok(())
    }
    fn alloc<T: RsElement>(
        &self,
        _rank: usize,
        queue: &Arc<CudaStream>,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        Ok(queue.alloc_zeros::<T>(n.max(1))?)
    }
    fn addr<T: RsElement>(&self, rank: usize, buf: &CudaSlice<T>) -> u64 {
        let (p, _sync) = buf.device_ptr(&self.streams()[rank]);
        p
    }
    fn check_placement<T: RsElement>(&self, rank: usize, buf: &CudaSlice<T>) -> Result<()> {
        let expected = self.inner().ranks[rank].ctx.ordinal();
        let found = buf.context().ordinal();
        if found != expected {
            return Err(Error::WrongDevice {
                rank: self.local_ranks().start + rank,
                which: "tensor",
                found: found as i64,
                expected,
            });
        }
        Ok(())
    }
    fn hold<T: RsElement>(_buf: &CudaSlice<T>) {}
    fn write_on<T: RsElement>(
        &self,
        _rank: usize,
        queue: &Arc<CudaStream>,
        buf: &mut CudaSlice<T>,
        data: &[T],
    ) -> Result<()> {
        Ok(queue.memcpy_htod(data, &mut buf.slice_mut(0..data.len()))?)
    }
    unsafe fn run_task(
        &self,
        rank: usize,
        queue: &Arc<CudaStream>,
        task: Task,
        _holds: Vec<()>,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { crate::gpu::launch_task(self.inner(), rank, queue, task) }
    }
    fn collective_on<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, CudaSlice<T>>],
        op: Op,
        queues: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.regions_on(c, regions, op, queues)
    }
}

impl GradBackend for CpuCommunicator {
    type Queue = ();
    type Hold = crate::cpu::Hold;
    type Begun<'a> = ();

    fn new_queues(&self) -> Result<Vec<()>> {
        Ok(vec![(); self.local_ranks().len()])
    }
    fn own_queues(&self) -> Vec<()> {
        vec![(); self.local_ranks().len()]
    }
    /// A rank's queues are all its worker thread.
    fn queue_id(&self, _queue: &()) -> u64 {
        0
    }
    /// Every queue of a rank is its worker thread, in order already.
    fn order(&self, _waiters: &[()], _ons: &[()]) -> Result<()> {
        Ok(())
    }
    fn alloc<T: RsElement>(&self, _rank: usize, _queue: &(), n: usize) -> Result<HostBuffer<T>> {
        Ok(HostBuffer::zeroed(n))
    }
    fn addr<T: RsElement>(&self, _rank: usize, buf: &HostBuffer<T>) -> u64 {
        buf.as_view().addr()
    }
    fn check_placement<T: RsElement>(&self, _rank: usize, _buf: &HostBuffer<T>) -> Result<()> {
        Ok(())
    }
    fn hold<T: RsElement>(buf: &HostBuffer<T>) -> crate::cpu::Hold {
        crate::cpu::Hold::of(buf)
    }
    fn write_on<T: RsElement>(
        &self,
        _rank: usize,
        _queue: &(),
        buf: &mut HostBuffer<T>,
        data: &[T],
    ) -> Result<()> {
        buf.write(0, data)
    }
    unsafe fn run_task(
        &self,
        rank: usize,
        _queue: &(),
        task: Task,
        holds: Vec<crate::cpu::Hold>,
    ) -> Result<()> {
        self.check_broken()?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.b.run_task_job(rank, task, holds) }
    }
    fn collective_on<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, HostBuffer<T>>],
        op: Op,
        _queues: &[()],
    ) -> Result<()> {
        Collectives::collective(self, c, regions, op)
    }
}
