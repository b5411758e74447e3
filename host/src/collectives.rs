//! One interface over every backend: the [`Collectives`] trait, which the
//! GPU communicator and the CPU execution both implement, so that tests,
//! benches and layers above (gradient synchronisation) are written once.

use crate::cpu::{CpuBuffers, CpuCommunicator, HostBuffer};
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::gpu::{Buffers, Communicator};
use crate::ring::RingOrder;
use cudarc::driver::CudaSlice;
use ringreduce_kernels::{Collective, Op};
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
    /// A new buffer on rank `rank` holding `data`.
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<Self::Buf<T>>;
    /// The contents of a rank's buffer, once the work queued on it is done.
    fn download<T: RsElement>(&self, rank: usize, buf: &Self::Buf<T>) -> Result<Vec<T>>;
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

impl Collectives for Communicator {
    type Buf<T: RsElement> = CudaSlice<T>;

    fn k(&self) -> usize {
        Communicator::k(self)
    }
    fn ring_order(&self) -> &RingOrder {
        Communicator::ring_order(self)
    }
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.streams()[rank].clone_htod(data)?)
    }
    fn download<T: RsElement>(&self, rank: usize, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.streams()[rank].clone_dtoh(buf)?)
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, CudaSlice<T>>],
        op: Op,
    ) -> Result<()> {
        let mut bufs = Vec::with_capacity(regions.len());
        for (u, r) in regions.iter_mut().enumerate() {
            bufs.push(match r {
                Region::OutOfPlace {
                    send,
                    send_at,
                    recv,
                    recv_at,
                } => {
                    check_range(u, "send", send_at, send.len())?;
                    check_range(u, "recv", recv_at, recv.len())?;
                    Buffers::out_of_place(
                        send.slice(send_at.clone()),
                        recv.slice_mut(recv_at.clone()),
                    )
                }
                Region::InPlace { buf, at } => {
                    check_range(u, "send", at, buf.len())?;
                    Buffers::in_place(buf.slice_mut(at.clone()))
                }
            });
        }
        Communicator::collective(self, c, &mut bufs, op, self.streams())
    }
    fn synchronize(&self) -> Result<()> {
        Communicator::synchronize(self)
    }
    fn abort(&self) {
        Communicator::abort(self)
    }
}

impl Collectives for CpuCommunicator {
    type Buf<T: RsElement> = HostBuffer<T>;

    fn k(&self) -> usize {
        CpuCommunicator::k(self)
    }
    fn ring_order(&self) -> &RingOrder {
        CpuCommunicator::ring_order(self)
    }
    fn upload<T: RsElement>(&self, _rank: usize, data: &[T]) -> Result<HostBuffer<T>> {
        Ok(HostBuffer::from_slice(data))
    }
    fn download<T: RsElement>(&self, _rank: usize, buf: &HostBuffer<T>) -> Result<Vec<T>> {
        Ok(buf.to_vec())
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, HostBuffer<T>>],
        op: Op,
    ) -> Result<()> {
        let mut bufs = Vec::with_capacity(regions.len());
        for (u, r) in regions.iter_mut().enumerate() {
            bufs.push(match r {
                Region::OutOfPlace {
                    send,
                    send_at,
                    recv,
                    recv_at,
                } => {
                    check_range(u, "send", send_at, send.len())?;
                    check_range(u, "recv", recv_at, recv.len())?;
                    CpuBuffers::out_of_place(send.view(send_at.clone()), recv.view(recv_at.clone()))
                }
                Region::InPlace { buf, at } => {
                    check_range(u, "send", at, buf.len())?;
                    CpuBuffers::in_place(buf.view(at.clone()))
                }
            });
        }
        CpuCommunicator::collective(self, c, &bufs, op)
    }
    fn synchronize(&self) -> Result<()> {
        CpuCommunicator::synchronize(self)
    }
    fn abort(&self) {
        CpuCommunicator::abort(self)
    }
}
