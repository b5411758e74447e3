//! The one front end over every backend: [`Comm<B>`] validates a call,
//! plans it through the memo, keeps the communicator's state (broken,
//! aborted) and its test hooks, and answers every query. A backend
//! ([`Backend`]) only sets up memory, executes a plan, reads its status
//! records and raises its abort word, so a new backend adds those and
//! nothing else.

mod engine;
mod hier;
mod job;

pub use engine::Comm;
pub(crate) use engine::{fold_entry, Alarm, Engine};
pub(crate) use hier::Joined;
pub(crate) use job::{launched, meet, peer_error};

use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::planner::BufferSpan;
use crate::ring::RingOrder;
use ringreduce_kernels::plan::min_buffer_bytes;
use ringreduce_kernels::{Algorithm, Collective, DataType, Op};

/// A backend of [`Comm`]: the GPU ([`GpuBackend`](crate::GpuBackend)) or
/// the CPU execution ([`CpuBackend`](crate::CpuBackend)). Sealed: what a
/// backend must do is internal, so that the front end can change without
/// breaking anyone.
pub trait Backend: Engine {}

impl<B: Engine> Backend for B {}

/// Where rank `rank` of `world` is among the ranks `local` this process
/// holds: its index there; [`Error::RankOutOfRange`] for a rank the job
/// does not have, [`Error::RemoteRank`] for one another process holds.
/// Every communicator's answer, one process's ranks or a single rank's.
pub(crate) fn rank_here(rank: usize, world: usize, local: std::ops::Range<usize>) -> Result<usize> {
    if rank >= world {
        return Err(Error::RankOutOfRange { rank, world });
    }
    if !local.contains(&rank) {
        return Err(Error::RemoteRank { rank, local });
    }
    Ok(rank - local.start)
}

impl<B: Backend> Comm<B> {
    /// The least staging per channel ([`CommConfig::buffer_bytes`]) this
    /// backend takes: a slot holds one unrolled round of its lanes.
    pub const MIN_BUFFER_BYTES: u64 = min_buffer_bytes(B::THREADS);

    /// `k` ranks set up by `config`: the same call for every backend. On a
    /// GPU the ranks go on [`CommConfig::devices`] (default: all on device
    /// 0); the CPU execution has no devices and ignores it.
    pub fn create(k: usize, config: CommConfig) -> Result<Self> {
        Ok(Comm {
            b: B::create(k, config)?,
            job: None,
        })
    }

    /// The user ranks this communicator holds, whose buffers its calls
    /// take (in this order): all of `0..k`, or, as one process of a job
    /// ([`init_rank`](Self::init_rank)), its own rank alone.
    pub fn local_ranks(&self) -> std::ops::Range<usize> {
        self.b.state().local.clone()
    }

    /// Ranks in the communicator.
    pub fn k(&self) -> usize {
        self.b.state().ring.len()
    }

    /// The ring the collectives run on.
    pub fn ring_order(&self) -> &RingOrder {
        &self.b.state().ring
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &CommConfig {
        &self.b.state().config
    }

    /// Channels each rank has; a call uses at most this many.
    pub fn max_channels(&self) -> usize {
        self.b.state().max_channels
    }

    /// Staging bytes per channel (see [`CommConfig::buffer_bytes`]).
    pub fn staging_bytes(&self) -> u64 {
        self.b.state().staging_bytes
    }

    /// The algorithm a call of `c` with count `n` of `T` runs: the
    /// configured one, or the automatic choice by size (see
    /// [`CommConfig::algorithm`]); an error for a forced algorithm the call
    /// cannot run, as the call itself returns, for every count.
    pub fn algorithm_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<Algorithm> {
        let size = std::mem::size_of::<T>() as u64;
        self.b.state().algorithm_for(c, n as u64, size)
    }

    /// Blocks per rank a call of `c` with count `n` of `T` runs: the
    /// configured number, or one chosen by algorithm and size.
    pub fn channels_for<T: RsElement>(&self, c: Collective, n: usize) -> Result<usize> {
        let size = std::mem::size_of::<T>() as u64;
        Ok(self.b.state().channels_for(c, n as u64, size)? as usize)
    }

    /// Waits for everything queued on every rank, then reports the first
    /// error any rank recorded. After an error the communicator is broken:
    /// every later call returns it.
    pub fn synchronize(&self) -> Result<()> {
        self.b.wait_idle()?;
        self.check_broken()
    }

    /// Makes every rank give up its waits and return; safe to call from any
    /// thread while collectives run. They end with [`Error::Aborted`] (one
    /// that had already finished keeps its results), and every later call,
    /// a collective or [`synchronize`](Self::synchronize), returns
    /// `Aborted` with nothing run: the communicator is done.
    pub fn abort(&self) {
        self.b.state().abort();
        self.b.raise_abort();
        if let Some(watch) = &self.job {
            watch.abort();
        }
    }

    /// Each local rank's recorded error, if any (for diagnostics: the error
    /// [`synchronize`](Self::synchronize) returns is the likeliest cause).
    pub fn rank_errors(&self) -> Vec<Option<Error>> {
        self.b.state().rank_errors(&self.b.status_records())
    }

    /// Test hook: from (chunk, step) on, `rank` drops its "new data"
    /// signals. Only effective with the `fault-injection` feature.
    #[doc(hidden)]
    pub fn inject_lost_signal(&self, rank: usize, chunk: u64, step: u64) {
        self.b
            .state()
            .set_hooks(|h| h.lost_signal = Some((rank, chunk, step)));
    }

    /// Test hook: collectives launch every rank but `rank`, as if its
    /// process never arrived.
    #[doc(hidden)]
    pub fn withhold_rank(&self, rank: Option<usize>) {
        self.b.state().set_hooks(|h| h.withhold_rank = rank);
    }

    /// `Aborted` after an abort, `Broken` after an earlier error, or the
    /// error a rank's status record holds. Every call starts here, so a
    /// backend may answer "nothing recorded" without decoding the records.
    pub(crate) fn check_broken(&self) -> Result<()> {
        let recs = if self.b.quiet() {
            Vec::new()
        } else {
            self.b.status_records()
        };
        self.b.state().check(&recs)
    }

    /// Where rank `rank`'s things are among this process's: its index
    /// in [`local_ranks`](Self::local_ranks).
    /// [`Error::RankOutOfRange`] for a rank this communicator does not
    /// have, [`Error::RemoteRank`] for one another process holds.
    pub(crate) fn check_rank(&self, rank: usize) -> Result<usize> {
        rank_here(rank, self.k(), self.local_ranks())
    }

    /// The checks every call makes before it looks at a buffer: the
    /// communicator works, and there is one buffer set per local rank.
    pub(crate) fn begin(&self, buffers: usize) -> Result<()> {
        self.check_broken()?;
        let k = self.local_ranks().len();
        if buffers != k {
            return Err(Error::WrongBufferCount { got: buffers, k });
        }
        Ok(())
    }

    /// Plans collective `c` over `spans` (local ranks' order) through the
    /// memo, and has the backend execute the plan with `call`.
    pub(crate) fn run(
        &self,
        c: Collective,
        spans: &[BufferSpan],
        dtype: DataType,
        op: Op,
        call: B::Call<'_>,
    ) -> Result<()> {
        let state = self.b.state();
        let mut memo = self.b.memo().lock().unwrap_or_else(|e| e.into_inner());
        let plan = memo.plan(c, self.b.conns(), spans, dtype, state.call_opts(B::THREADS))?;
        self.b.execute(plan, dtype, op, call)
    }
}
