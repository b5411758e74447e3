//! One interface over every backend: the [`Collectives`] trait, which the
//! GPU communicator and the CPU execution both implement, so that tests,
//! benches and layers above (gradient synchronisation) are written once.

use crate::config::CommConfig;
use crate::cpu::{CpuBuffers, CpuCommunicator, HostBuffer};
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::gpu::{Buffers, Communicator};
use crate::ring::RingOrder;
use cudarc::driver::CudaSlice;
use ringreduce_kernels::{Algorithm, Collective, Op};
use std::ops::Range;

/// One rank's part of a collective: element ranges of its buffers, with
/// the shapes of [`Buffers`].
pub enum Region<'a, B> {
    /// Input and output in separate buffers.
    OutOfPlace {
        /// The input's buffer.
        send: &'a B,
        /// Its elements.
        send_at: Range<usize>,
        /// The output's buffer.
        recv: &'a mut B,
        /// Its elements.
        recv_at: Range<usize>,
    },
    /// One buffer, input and output.
    InPlace {
        /// The buffer.
        buf: &'a mut B,
        /// Its elements.
        at: Range<usize>,
    },
}

/// The collectives of a communicator, over its own buffer type and on its
/// own per-rank queues (the GPU communicator's [`streams`], the CPU
/// execution's worker threads). Calls are asynchronous: they return once
/// every rank's work is queued.
///
/// [`streams`]: Communicator::streams
pub trait Collectives {
    /// A buffer of `T` on one rank.
    type Buf<T: RsElement>;

    /// Ranks.
    fn k(&self) -> usize;
    /// The ring the collectives run on.
    fn ring_order(&self) -> &RingOrder;
    /// The configuration it was created with.
    fn config(&self) -> &CommConfig;
    /// Channels each rank has; a call runs at most this many.
    fn max_channels(&self) -> usize;
    /// The algorithm a call of `c` with count `n` of `T` runs (see
    /// [`CommConfig::algorithm`]); an error for a forced direct algorithm
    /// the call does not fit.
    fn algorithm_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<Algorithm>;
    /// A new buffer on rank `rank` holding `data`.
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<Self::Buf<T>>;
    /// Elements of a buffer.
    fn len_of<T: RsElement>(buf: &Self::Buf<T>) -> usize;
    /// Elements `at` of a rank's buffer, once the work queued on it is done.
    fn read<T: RsElement>(
        &self,
        rank: usize,
        buf: &Self::Buf<T>,
        at: Range<usize>,
    ) -> Result<Vec<T>>;
    /// Overwrites a rank's buffer from element `at` on, after the work
    /// queued on it.
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut Self::Buf<T>,
        at: usize,
        data: &[T],
    ) -> Result<()>;
    /// Enqueues collective `c` (`op` is ignored by an all-gather).
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, Self::Buf<T>>],
        op: Op,
    ) -> Result<()>;
    /// Waits for everything queued, then reports the first error any rank
    /// recorded.
    fn synchronize(&self) -> Result<()>;
    /// Makes every rank give up; every later call returns
    /// [`Error::Aborted`].
    fn abort(&self);

    /// Blocks per rank a call of `c` with count `n` of `T` runs: the
    /// configured number, or one chosen by algorithm and size.
    fn channels_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<usize>;

    /// All of a rank's buffer, once the work queued on it is done.
    fn download<T: RsElement>(&self, rank: usize, buf: &Self::Buf<T>) -> Result<Vec<T>> {
        self.read(rank, buf, 0..Self::len_of(buf))
    }

    /// Each rank gets `op` over its block of everyone's input.
    fn reduce_scatter<T: RsElement>(
        &self,
        regions: &mut [Region<'_, Self::Buf<T>>],
        op: Op,
    ) -> Result<()> {
        self.collective(Collective::ReduceScatter, regions, op)
    }
    /// Each rank gets everyone's input, in user-rank order.
    fn all_gather<T: RsElement>(&self, regions: &mut [Region<'_, Self::Buf<T>>]) -> Result<()> {
        self.collective(Collective::AllGather, regions, Op::Sum)
    }
    /// Each rank gets `op` over everyone's input.
    fn all_reduce<T: RsElement>(
        &self,
        regions: &mut [Region<'_, Self::Buf<T>>],
        op: Op,
    ) -> Result<()> {
        self.collective(Collective::AllReduce, regions, op)
    }
}

/// A range past a buffer's end, as the library's error.
fn check_range(rank: usize, which: &'static str, r: &Range<usize>, len: usize) -> Result<()> {
    if r.start > r.end || r.end > len {
        return Err(Error::BufferOutOfBounds {
            rank,
            which,
            addr: r.start as u64,
            bytes: r.end.saturating_sub(r.start) as u64,
        });
    }
    Ok(())
}

/// Every region's ranges within its buffers (`len` gives a buffer's
/// elements), before any is sliced.
fn check_regions<B>(regions: &[Region<'_, B>], len: impl Fn(&B) -> usize) -> Result<()> {
    for (u, r) in regions.iter().enumerate() {
        match r {
            Region::OutOfPlace {
                send,
                send_at,
                recv,
                recv_at,
            } => {
                check_range(u, "send", send_at, len(send))?;
                check_range(u, "recv", recv_at, len(recv))?;
            }
            Region::InPlace { buf, at } => check_range(u, "send", at, len(buf))?,
        }
    }
    Ok(())
}

impl Collectives for Communicator {
    type Buf<T: RsElement> = CudaSlice<T>;

    fn k(&self) -> usize {
        Communicator::k(self)
    }
    fn ring_order(&self) -> &RingOrder {
        Communicator::ring_order(self)
    }
    fn config(&self) -> &CommConfig {
        Communicator::config(self)
    }
    fn max_channels(&self) -> usize {
        Communicator::max_channels(self)
    }
    fn algorithm_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<Algorithm> {
        Communicator::algorithm_for::<T>(self, c, n)
    }
    fn channels_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<usize> {
        Communicator::channels_for::<T>(self, c, n)
    }
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.streams()[rank].clone_htod(data)?)
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
        check_range(rank, "buffer", &at, buf.len())?;
        Ok(self.streams()[rank].clone_dtoh(&buf.slice(at))?)
    }
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut CudaSlice<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let r = at..at.saturating_add(data.len());
        check_range(rank, "buffer", &r, buf.len())?;
        Ok(self.streams()[rank].memcpy_htod(data, &mut buf.slice_mut(r))?)
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, CudaSlice<T>>],
        op: Op,
    ) -> Result<()> {
        gpu_collective(self, c, regions, op, self.streams())
    }
    fn synchronize(&self) -> Result<()> {
        Communicator::synchronize(self)
    }
    fn abort(&self) {
        Communicator::abort(self)
    }
}

/// One backend's buffer views of `regions`: `out_of_place(send, send_at,
/// recv, recv_at)` or `in_place(buf, at)` for each.
fn views<'r, B, V>(
    regions: &'r mut [Region<'_, B>],
    mut out_of_place: impl FnMut(&'r B, Range<usize>, &'r mut B, Range<usize>) -> V,
    mut in_place: impl FnMut(&'r mut B, Range<usize>) -> V,
) -> Vec<V> {
    regions
        .iter_mut()
        .map(|r| match r {
            Region::OutOfPlace {
                send,
                send_at,
                recv,
                recv_at,
            } => out_of_place(*send, send_at.clone(), &mut **recv, recv_at.clone()),
            Region::InPlace { buf, at } => in_place(&mut **buf, at.clone()),
        })
        .collect()
}

/// A GPU collective over regions, on `streams`.
pub(crate) fn gpu_collective<T: RsElement>(
    comm: &Communicator,
    c: Collective,
    regions: &mut [Region<'_, CudaSlice<T>>],
    op: Op,
    streams: &[std::sync::Arc<cudarc::driver::CudaStream>],
) -> Result<()> {
    check_regions(regions, |b| b.len())?;
    let mut bufs = views(
        regions,
        |send, send_at, recv, recv_at| {
            Buffers::out_of_place(send.slice(send_at), recv.slice_mut(recv_at))
        },
        |buf, at| Buffers::in_place(buf.slice_mut(at)),
    );
    Communicator::collective(comm, c, &mut bufs, op, streams)
}

impl Collectives for CpuCommunicator {
    type Buf<T: RsElement> = HostBuffer<T>;

    fn k(&self) -> usize {
        CpuCommunicator::k(self)
    }
    fn ring_order(&self) -> &RingOrder {
        CpuCommunicator::ring_order(self)
    }
    fn config(&self) -> &CommConfig {
        CpuCommunicator::config(self)
    }
    fn max_channels(&self) -> usize {
        CpuCommunicator::max_channels(self)
    }
    fn algorithm_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<Algorithm> {
        CpuCommunicator::algorithm_for::<T>(self, c, n)
    }
    fn channels_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<usize> {
        CpuCommunicator::channels_for::<T>(self, c, n)
    }
    fn upload<T: RsElement>(&self, _rank: usize, data: &[T]) -> Result<HostBuffer<T>> {
        Ok(HostBuffer::from_slice(data))
    }
    fn len_of<T: RsElement>(buf: &HostBuffer<T>) -> usize {
        buf.len()
    }
    fn read<T: RsElement>(
        &self,
        rank: usize,
        buf: &HostBuffer<T>,
        at: Range<usize>,
    ) -> Result<Vec<T>> {
        check_range(rank, "buffer", &at, buf.len())?;
        buf.read(at)
    }
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut HostBuffer<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let r = at..at.saturating_add(data.len());
        check_range(rank, "buffer", &r, buf.len())?;
        buf.write(at, data)
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, HostBuffer<T>>],
        op: Op,
    ) -> Result<()> {
        check_regions(regions, |b| b.len())?;
        let bufs = views(
            regions,
            |send, send_at, recv, recv_at| {
                CpuBuffers::out_of_place(send.view_within(send_at), recv.view_within(recv_at))
            },
            |buf, at| CpuBuffers::in_place(buf.view_within(at)),
        );
        CpuCommunicator::collective(self, c, &bufs, op)
    }
    fn synchronize(&self) -> Result<()> {
        CpuCommunicator::synchronize(self)
    }
    fn abort(&self) {
        CpuCommunicator::abort(self)
    }
}
