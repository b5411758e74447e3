//! Communicator settings shared by the GPU and CPU communicators.

use crate::algorithm::{Algo, ALGO_ENV, DEFAULT_DIRECT_HALF_BYTES};
use crate::error::Result;
use ringreduce_kernels::abi::GPU_THREADS;
use ringreduce_kernels::plan::DEFAULT_BUFFER_BYTES;
use std::time::Duration;

/// Staging shared by every block resident on one GPU when the config does
/// not size it. Staging that stays within about the L2 cache is written and
/// read there instead of in HBM: on an H200 (50 MiB of L2), at k = 8 with
/// 16 channels, 512 KiB per channel (64 MiB in all) gave the best ratio to
/// the device copy, 0.63 for reduce-scatter against 0.53 with 2 MiB
/// (`bench/NOTES.md`).
pub const GPU_STAGING_BUDGET: u64 = 64 << 20;

/// Overrides the default wait timeout, in (fractional) seconds; `0` waits
/// forever.
pub const TIMEOUT_ENV: &str = "RINGREDUCE_TIMEOUT_SECS";

/// The prefetch distance when neither the config nor [`PREFETCH_ENV`] sets
/// one: off, because with all of a round's loads already in flight the
/// prefetches only add traffic (`bench/NOTES.md`).
pub const DEFAULT_PREFETCH_ROUNDS: u8 = 0;

/// Overrides [`CommConfig::prefetch_rounds`] when the config leaves it unset.
pub const PREFETCH_ENV: &str = "RINGREDUCE_PREFETCH_ROUNDS";

/// The wait timeout when neither the config nor [`TIMEOUT_ENV`] sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How a communicator is set up.
///
/// ```
/// use ringreduce::CommConfig;
/// use std::time::Duration;
/// let cfg = CommConfig::default()
///     .buffer_bytes(4 << 20)
///     .ring_order(vec![1, 2, 0, 3])
///     .timeout(Duration::from_secs(5));
/// assert_eq!(cfg.buffer_bytes, Some(4 << 20));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommConfig {
    /// Staging buffer per channel, in bytes. `None` chooses: on a GPU, an
    /// equal share of [`GPU_STAGING_BUDGET`] for every block that can be
    /// resident on the device (at most [`DEFAULT_BUFFER_BYTES`], 2 MiB as in
    /// NCCL 1.x); on the CPU execution, 2 MiB.
    pub buffer_bytes: Option<u64>,
    /// User ranks in ring order (default `0..k`).
    pub ring_order: Option<Vec<u32>>,
    /// Longest any single wait may spin without progress before the rank
    /// gives up with [`Error::Timeout`](crate::Error::Timeout). `None` takes
    /// [`TIMEOUT_ENV`] or else [`DEFAULT_TIMEOUT`]; `Some(ZERO)` waits forever.
    pub timeout: Option<Duration>,
    /// Whether waits poll the abort word and the clock (default on). Off
    /// gives NCCL 1.x's unbounded spins: only for measuring what the
    /// watchdog costs.
    pub watchdog: bool,
    /// How many unrolled rounds (of `8 × 256 × 16` bytes) ahead each
    /// producer thread prefetches its own input into L2. `None` takes
    /// [`PREFETCH_ENV`] or else [`DEFAULT_PREFETCH_ROUNDS`]; 0 turns it off.
    /// A knob rather than a constant so that the bench's `--prefetch` can
    /// show its effect on other GPUs.
    pub prefetch_rounds: Option<u8>,
    /// Channels (blocks) per rank, each moving its own share of every
    /// block with its own staging. `None` chooses by message size, up to
    /// what stays co-resident (see [`CommConfig::channels`]). Results do not
    /// depend on it.
    pub channels: Option<u32>,
    /// The algorithm of every call. `None` takes
    /// [`ALGO_ENV`] or else
    /// [`Algo::Auto`]: local where one launch runs every rank; otherwise
    /// direct for small messages, the ring beyond. A forced direct
    /// algorithm refuses calls too large for its staging, a forced local one
    /// a communicator it cannot run on.
    pub algorithm: Option<Algo>,
    /// Bytes of each of the two halves of every rank's direct staging
    /// (rounded down to a multiple of 256). `None`:
    /// [`DEFAULT_DIRECT_HALF_BYTES`]; below 256 allocates none (the ring
    /// only).
    pub direct_bytes: Option<u64>,
    /// Whether the local algorithm may run where one launch runs every
    /// rank (default on). Off keeps such a communicator on the ring and
    /// direct algorithms, as if its ranks spanned devices: their fold
    /// orders and their code, to compare with or to test.
    pub local: bool,
    /// The GPU of each rank, for [`Comm::create`](crate::Comm::create)
    /// (`None`: every rank on device 0). The CPU execution has no devices
    /// and ignores it.
    pub devices: Option<Vec<usize>>,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            buffer_bytes: None,
            ring_order: None,
            timeout: None,
            watchdog: true,
            prefetch_rounds: None,
            channels: None,
            algorithm: None,
            direct_bytes: None,
            local: true,
            devices: None,
        }
    }
}

impl CommConfig {
    /// Staging bytes per channel; more means fewer, larger slices. At
    /// least [`Comm::MIN_BUFFER_BYTES`](crate::Comm::MIN_BUFFER_BYTES) of
    /// the backend: 262,272 on a GPU and 4,224 on the CPU execution (a slot holds one unrolled round of every
    /// producer lane, and the GPU has more lanes); creation refuses less
    /// with [`Error::BufferTooSmall`](crate::Error::BufferTooSmall). A config
    /// meant for both uses the larger.
    pub fn buffer_bytes(mut self, bytes: u64) -> Self {
        self.buffer_bytes = Some(bytes);
        self
    }

    /// The staging per channel when `blocks` blocks (every rank's
    /// channels) share one GPU: the configured size, or an equal share of
    /// [`GPU_STAGING_BUDGET`], between the smallest buffer that works and
    /// [`DEFAULT_BUFFER_BYTES`].
    pub fn gpu_staging_bytes(&self, blocks: usize) -> u64 {
        self.buffer_bytes.unwrap_or_else(|| {
            // Whole 4 KiB pages, and at least the smallest buffer that works.
            let floor = ringreduce_kernels::plan::min_buffer_bytes(GPU_THREADS);
            let share = GPU_STAGING_BUDGET / blocks.max(1) as u64 / 4096 * 4096;
            share.clamp(floor, DEFAULT_BUFFER_BYTES)
        })
    }

    /// The ring: user ranks in ring order, a permutation of `0..k`.
    pub fn ring_order(mut self, order: Vec<u32>) -> Self {
        self.ring_order = Some(order);
        self
    }

    /// How long a wait may see no progress before the rank gives up.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// The effective timeout.
    pub fn effective_timeout(&self) -> Duration {
        if let Some(t) = self.timeout {
            return t;
        }
        std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(DEFAULT_TIMEOUT)
    }

    /// Sets [`CommConfig::prefetch_rounds`].
    pub fn prefetch_rounds(mut self, rounds: u8) -> Self {
        self.prefetch_rounds = Some(rounds);
        self
    }

    /// The effective prefetch distance, at most 15 rounds.
    pub fn effective_prefetch_rounds(&self) -> u64 {
        self.prefetch_rounds
            .or_else(|| std::env::var(PREFETCH_ENV).ok()?.trim().parse().ok())
            .unwrap_or(DEFAULT_PREFETCH_ROUNDS)
            .min(15) as u64
    }

    /// Sets [`CommConfig::channels`]: every collective runs this many
    /// channels per rank. One rank per GPU may use up to 32; virtual ranks
    /// share their device's multiprocessors, so `k` times this many blocks
    /// must fit on it at once (checked at creation).
    pub fn channels(mut self, channels: u32) -> Self {
        self.channels = Some(channels);
        self
    }

    /// Sets [`CommConfig::watchdog`].
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// Sets the algorithm of every call (see [`CommConfig::algorithm`]).
    pub fn algorithm(mut self, a: Algo) -> Self {
        self.algorithm = Some(a);
        self
    }

    /// Sets the bytes of each direct staging half (0: none).
    pub fn direct_bytes(mut self, bytes: u64) -> Self {
        self.direct_bytes = Some(bytes);
        self
    }

    /// Places rank `u` on GPU `devices[u]` (see [`CommConfig::devices`]).
    pub fn devices(mut self, devices: Vec<usize>) -> Self {
        self.devices = Some(devices);
        self
    }

    /// The device of each of `k` ranks: the configured list, which must
    /// have one per rank, or device 0 for all.
    pub fn devices_for(&self, k: usize) -> Result<Vec<usize>> {
        match &self.devices {
            Some(d) if d.len() != k => Err(crate::error::Error::DeviceListLength {
                devices: d.len(),
                k,
            }),
            Some(d) => Ok(d.clone()),
            None => Ok(vec![0; k]),
        }
    }

    /// Lets the local algorithm run, or not (see [`CommConfig::local`]).
    pub fn local(mut self, on: bool) -> Self {
        self.local = on;
        self
    }

    /// The algorithm in force: the config's, else [`ALGO_ENV`]'s, else
    /// `Auto`. A name the variable cannot hold is an error at creation.
    pub fn effective_algorithm(&self) -> Result<Algo> {
        match (self.algorithm, std::env::var(ALGO_ENV)) {
            (Some(a), _) => Ok(a),
            (None, Ok(s)) => Algo::parse(&s),
            (None, Err(_)) => Ok(Algo::Auto),
        }
    }

    /// Bytes of each direct staging half, rounded down to 256 so that the
    /// second half starts where the first does modulo a pack (the staged
    /// data must stay congruent with the user buffers).
    pub fn effective_direct_bytes(&self) -> u64 {
        self.direct_bytes.unwrap_or(DEFAULT_DIRECT_HALF_BYTES) / 256 * 256
    }

    pub(crate) fn timeout_ns(&self) -> u64 {
        if !self.watchdog {
            return 0;
        }
        self.effective_timeout().as_nanos().min(u64::MAX as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_halves_stay_pack_congruent() {
        let d = |b| {
            CommConfig::default()
                .direct_bytes(b)
                .effective_direct_bytes()
        };
        assert_eq!(d(1000), 768);
        assert_eq!(d(255), 0);
        assert_eq!(d(1 << 20), 1 << 20);
        assert_eq!(
            CommConfig::default().effective_direct_bytes(),
            DEFAULT_DIRECT_HALF_BYTES
        );
    }

    #[test]
    fn staging_shares_the_budget_between_resident_blocks() {
        let c = CommConfig::default();
        assert_eq!(c.gpu_staging_bytes(128), 512 << 10);
        assert_eq!(c.gpu_staging_bytes(8), DEFAULT_BUFFER_BYTES);
        // 96 blocks: 699,050 bytes, rounded down to whole pages.
        assert_eq!(c.gpu_staging_bytes(96), 696_320);
        let floor = ringreduce_kernels::plan::min_buffer_bytes(GPU_THREADS);
        assert_eq!(c.gpu_staging_bytes(4096), floor);
        assert_eq!(
            c.clone().buffer_bytes(3 << 20).gpu_staging_bytes(128),
            3 << 20
        );
    }

    #[test]
    fn prefetch_distance_defaults_and_clamps() {
        // The environment may set RINGREDUCE_PREFETCH_ROUNDS; an explicit
        // value wins over it.
        assert_eq!(
            CommConfig::default()
                .prefetch_rounds(0)
                .effective_prefetch_rounds(),
            0
        );
        assert_eq!(
            CommConfig::default()
                .prefetch_rounds(3)
                .effective_prefetch_rounds(),
            3
        );
        assert_eq!(
            CommConfig::default()
                .prefetch_rounds(200)
                .effective_prefetch_rounds(),
            15
        );
        if std::env::var_os(PREFETCH_ENV).is_none() {
            assert_eq!(
                CommConfig::default().effective_prefetch_rounds(),
                DEFAULT_PREFETCH_ROUNDS as u64
            );
        }
    }
}
