//! What both communicators keep besides their memory: the ring, the
//! configuration, whether an earlier error broke them, and test hooks.

use crate::algorithm::{choose, Algo, Paths};
use crate::channels::direct_channels;
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::hooks::TestHooks;
use crate::planner::{call_channels, CallOpts, Part, Static};
use crate::ring::RingOrder;
use crate::status::{first_error, rank_errors};
use ringreduce_kernels::abi::{Work, BATCH_RANKS};
use ringreduce_kernels::{Algorithm, Collective, Geometry, StatusRecord};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

pub struct CommState {
    /// The user ranks this process drives: all of them, or its own when
    /// each rank is a process of a job.
    pub local: Range<usize>,
    /// A peer process's death or abort, which ends every call from now on
    /// (see [`CommState::peer_fault`]).
    peer_fault: Mutex<Option<Error>>,
    pub ring: RingOrder,
    pub config: CommConfig,
    /// Channels every rank has (and status records per rank).
    pub max_channels: usize,
    /// Staging bytes per channel.
    pub staging_bytes: u64,
    /// The algorithm asked for, read once at creation.
    pub algorithm: Algo,
    /// The prefetch distance, read once at creation: the environment is
    /// not read on every call's path.
    prefetch_rounds: u64,
    /// Bytes of each direct staging half every rank has (0: none, the
    /// ring only).
    pub direct_half_bytes: u64,
    /// Blocks a local call's grid may have (0: one launch cannot run every
    /// rank, so no local call); see [`CallOpts::local_blocks`].
    local_blocks: u64,
    broken: Mutex<Option<Error>>,
    /// Set by `abort()`: from then on every call reports `Aborted`, so a
    /// collective enqueued after the abort never runs, whatever the kernels
    /// of earlier ones saw.
    aborted: AtomicBool,
    /// The most channels per rank of any launch that can write a status
    /// record (ring or direct: a local call waits for nothing). Records of
    /// later channels are still zero, so a call's check reads only these:
    /// all `k x max_channels` outcome words, one cache line each, were a
    /// tenth of a small local call's host time.
    status_channels: AtomicUsize,
    hooks: Mutex<TestHooks>,
}

impl CommState {
    pub fn new(
        ring: RingOrder,
        config: CommConfig,
        max_channels: usize,
        staging_bytes: u64,
        direct_half_bytes: u64,
        local_blocks: u64,
    ) -> Result<Self> {
        let one_batch = ring.len() <= BATCH_RANKS;
        Ok(CommState {
            local: 0..ring.len(),
            peer_fault: Mutex::new(None),
            ring,
            direct_half_bytes,
            // One launch holds at most `BATCH_RANKS` ranks.
            local_blocks: if config.local && one_batch {
                local_blocks
            } else {
                0
            },
            algorithm: config.effective_algorithm()?,
            prefetch_rounds: config.effective_prefetch_rounds(),
            config,
            max_channels,
            staging_bytes,
            broken: Mutex::new(None),
            aborted: AtomicBool::new(false),
            status_channels: AtomicUsize::new(0),
            hooks: Mutex::new(TestHooks::default()),
        })
    }

    /// The same, as rank `rank` of a job whose other ranks are processes
    /// elsewhere: no local call (one launch cannot run them).
    pub fn in_job(mut self, rank: usize) -> Self {
        self.local = rank..rank + 1;
        self.local_blocks = 0;
        self
    }

    /// Which ranks a call's buffers are, for the planner (`None`: all).
    fn part(&self) -> Option<Part> {
        (self.local.len() != self.ring.len()).then_some(Part {
            first: self.local.start as u64,
            world: self.ring.len() as u64,
        })
    }

    /// Records a peer's death or abort (the first one wins): every call
    /// from now on returns it. The caller raises the abort word, so that
    /// a kernel waiting on the peer gives up.
    pub fn peer_fault(&self, e: Error) {
        let mut f = self.peer_fault.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
    }

    pub fn hooks(&self) -> TestHooks {
        *self.hooks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_hooks(&self, f: impl FnOnce(&mut TestHooks)) {
        f(&mut self.hooks.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Remembers the first error; every later call reports `Broken`.
    pub fn mark_broken(&self, e: &Error) {
        let mut b = self.broken.lock().unwrap_or_else(|e| e.into_inner());
        if b.is_none() {
            *b = Some(e.clone());
        }
    }

    /// Notes `works` as launched, before the launch: see
    /// [`CommState::status_channels`].
    pub fn note_launch(&self, works: &[Work]) {
        let waits = works
            .iter()
            .filter(|w| w.algorithm != Algorithm::Local as u64)
            .map(|w| w.channels as usize)
            .max();
        if let Some(c) = waits {
            self.status_channels.fetch_max(c, Ordering::AcqRel);
        }
    }

    /// Channels per rank whose status records any launch so far may have
    /// written (at most [`CommState::max_channels`]).
    pub fn status_channels(&self) -> usize {
        self.status_channels
            .load(Ordering::Acquire)
            .min(self.max_channels)
    }

    /// Records an abort (the caller also raises the kernels' abort word).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
    }

    /// `Aborted` after an abort; `Broken` if an earlier error broke the
    /// communicator; otherwise the error the status records hold, which from
    /// now on breaks it.
    pub fn check(&self, recs: &[StatusRecord]) -> Result<()> {
        // A lost or aborting peer explains whatever the records say since.
        if let Some(e) = self
            .peer_fault
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            return Err(e.clone());
        }
        if self.aborted.load(Ordering::SeqCst) {
            return Err(match first_error(recs, self.max_channels, &self.ring) {
                Some(e @ Error::Aborted { .. }) => e,
                _ => Error::Aborted { seen: None },
            });
        }
        if let Some(e) = self
            .broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            return Err(e.broken_by());
        }
        if let Some(e) = first_error(recs, self.max_channels, &self.ring) {
            self.mark_broken(&e);
            return Err(e);
        }
        Ok(())
    }

    pub fn rank_errors(&self, recs: &[StatusRecord]) -> Vec<Option<Error>> {
        rank_errors(recs, self.max_channels, &self.ring)
    }

    /// What every rank's connection holds, given the abort word's address
    /// and whether the ranks span devices.
    pub fn statics(&self, abort_word: u64, system_scope: bool) -> Static {
        Static {
            abort_flag: if self.config.watchdog { abort_word } else { 0 },
            timeout_ns: self.config.timeout_ns(),
            system_scope,
            staging_bytes: self.staging_bytes,
            direct_half_bytes: self.direct_half_bytes,
        }
    }

    /// Blocks the next local call may have: none while a test hook keeps
    /// a rank out of the launch or drops its signals, since those model
    /// ranks that run apart, which a local call's one launch cannot have.
    fn local_blocks(&self) -> u64 {
        let h = self.hooks();
        if h.withhold_rank.is_some() || h.lost_signal.is_some() {
            0
        } else {
            self.local_blocks
        }
    }

    /// The algorithm a call of `c` with count `n` of `size`-byte elements
    /// runs (what the planner will choose).
    pub fn algorithm_for(&self, c: Collective, n: u64, size: u64) -> Result<Algorithm> {
        let k = self.ring.len() as u64;
        let g = Geometry::new(c, k, n, size, 1, 1);
        let paths = Paths {
            direct_half: self.direct_half_bytes,
            local: self.local_blocks() > 0,
        };
        choose(c, self.algorithm, k, n, g.block_elems, size, paths)
    }

    /// Blocks per rank a call of `c` with count `n` of `size`-byte elements
    /// runs (what the planner will launch).
    pub fn channels_for(&self, c: Collective, n: u64, size: u64) -> Result<u64> {
        let algorithm = self.algorithm_for(c, n, size)?;
        let k = self.ring.len() as u64;
        Ok(call_channels(c, algorithm, k, n, size, &self.call_opts(1)))
    }

    /// The settings of the next call, for `threads` producer lanes.
    pub fn call_opts(&self, threads: u64) -> CallOpts {
        CallOpts {
            buffer_bytes: self.staging_bytes,
            threads,
            channels: self.config.channels.map(|c| c as u64),
            max_channels: self.max_channels as u64,
            prefetch_rounds: self.prefetch_rounds,
            fault: self.hooks().lost_signal,
            algorithm: self.algorithm,
            direct_half_bytes: self.direct_half_bytes,
            direct_channels: direct_channels(self.max_channels as u64),
            local_blocks: self.local_blocks(),
            part: self.part(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(algorithm: Algorithm, channels: u64) -> Work {
        Work {
            algorithm: algorithm as u64,
            channels,
            ..Work::default()
        }
    }

    /// Only launches that can wait raise the channels whose records a
    /// call checks, never past the communicator's own.
    #[test]
    fn status_channels_follow_launches_with_waits() {
        let ring = RingOrder::identity(4);
        let s = CommState::new(ring, CommConfig::default(), 8, 1 << 20, 0, 32).unwrap();
        assert_eq!(s.status_channels(), 0);
        s.note_launch(&[work(Algorithm::Local, 33); 4]);
        assert_eq!(s.status_channels(), 0, "a local call writes no record");
        s.note_launch(&[work(Algorithm::OneShot, 2); 4]);
        assert_eq!(s.status_channels(), 2);
        s.note_launch(&[work(Algorithm::Ring, 1); 4]);
        assert_eq!(s.status_channels(), 2, "the most so far");
        s.note_launch(&[work(Algorithm::Ring, 40); 4]);
        assert_eq!(
            s.status_channels(),
            8,
            "at most the communicator's channels"
        );
    }
}
