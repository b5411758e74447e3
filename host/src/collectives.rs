//! One interface over every backend: the [`Collectives`] trait, which the
//! GPU communicator and the CPU execution both implement, so that tests,
//! benches and layers above (gradient synchronisation) are written once.

use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::Result;
use crate::front::{Backend, Comm};
use crate::region::{check_range, Region};
use crate::ring::RingOrder;
use ringreduce_kernels::{Algorithm, Collective, Op};
use std::ops::Range;

/// The collectives of a communicator, over its own buffer type and on its
/// own per-rank queues (the GPU communicator's [`streams`], the CPU
/// execution's worker threads). Calls are asynchronous: they return once
/// every rank's work is queued.
///
/// [`streams`]: crate::Communicator::streams
pub trait Collectives: Sized {
    /// A buffer of `T` on one rank.
    type Buf<T: RsElement>;

    /// `k` ranks set up by `config`: the one constructor generic code
    /// calls (see [`Comm::create`]).
    fn create(k: usize, config: CommConfig) -> Result<Self>;

    /// Ranks.
    fn k(&self) -> usize;
    /// The ranks whose buffers this process passes, in this order: all
    /// of `0..k`, or its own as one process of a job.
    fn local_ranks(&self) -> Range<usize>;
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
    /// [`Error::Aborted`](crate::Error::Aborted).
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

impl<B: Backend> Collectives for Comm<B> {
    type Buf<T: RsElement> = B::Buf<T>;

    fn create(k: usize, config: CommConfig) -> Result<Self> {
        Comm::create(k, config)
    }
    fn k(&self) -> usize {
        Comm::k(self)
    }
    fn local_ranks(&self) -> Range<usize> {
        Comm::local_ranks(self)
    }
    fn ring_order(&self) -> &RingOrder {
        Comm::ring_order(self)
    }
    fn config(&self) -> &CommConfig {
        Comm::config(self)
    }
    fn max_channels(&self) -> usize {
        Comm::max_channels(self)
    }
    fn algorithm_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<Algorithm> {
        Comm::algorithm_for::<T>(self, c, n)
    }
    fn channels_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<usize> {
        Comm::channels_for::<T>(self, c, n)
    }
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<B::Buf<T>> {
        let here = self.check_rank(rank)?;
        self.b.upload(here, data)
    }
    fn len_of<T: RsElement>(buf: &B::Buf<T>) -> usize {
        B::len_of(buf)
    }
    fn read<T: RsElement>(&self, rank: usize, buf: &B::Buf<T>, at: Range<usize>) -> Result<Vec<T>> {
        let here = self.check_rank(rank)?;
        check_range(rank, "buffer", &at, B::len_of(buf))?;
        self.b.read(here, buf, at)
    }
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut B::Buf<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let here = self.check_rank(rank)?;
        let r = at..at.saturating_add(data.len());
        check_range(rank, "buffer", &r, B::len_of(buf))?;
        self.b.write(here, buf, at, data)
    }
    fn collective<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, B::Buf<T>>],
        op: Op,
    ) -> Result<()> {
        B::regions(self, c, regions, op)
    }
    fn synchronize(&self) -> Result<()> {
        Comm::synchronize(self)
    }
    fn abort(&self) {
        Comm::abort(self)
    }
}
