//! The channel policy, in one place: how many blocks per rank a call runs
//! (by algorithm and size) and how many a communicator has (by what fits
//! on its devices). Pure functions, shared by every backend.

use crate::error::{Error, Result};
use ringreduce_kernels::abi::MAX_CHANNELS;
use ringreduce_kernels::types::Collective;

/// Bytes of a rank's input below which one more channel does not pay: a
/// channel's fixed cost (launching a block, the flag round trips of its
/// first slices) must be spread over at least this much data.
pub const MIN_BYTES_PER_CHANNEL: u64 = 1 << 20;

/// The channels for a call moving `bytes` per rank: one per
/// [`MIN_BYTES_PER_CHANNEL`], between 1 and `max`.
pub fn auto_channels(bytes: u64, max: u64) -> u64 {
    (bytes / MIN_BYTES_PER_CHANNEL).clamp(1, max.max(1))
}

/// The channels a call of collective `c` with count `n` of `size`-byte
/// elements on `k` ranks runs: `requested`, or chosen by the input's size,
/// at most `max`.
pub fn channels_for(
    c: Collective,
    k: u64,
    n: u64,
    size: u64,
    requested: Option<u64>,
    max: u64,
) -> u64 {
    let max = max.clamp(1, MAX_CHANNELS as u64);
    match requested {
        Some(ch) => ch.clamp(1, max),
        None => auto_channels(c.lengths(k, n).0.saturating_mul(size), max),
    }
}

/// Bytes of traffic (inputs read plus outputs written) a block of a local
/// call must have before one more block pays for itself.
pub const LOCAL_BYTES_PER_BLOCK: u64 = 256 << 10;

/// Blocks per rank (its share of the grid) of a local call of collective
/// `c` with count `n` of `size`-byte elements on `k` ranks: `requested`, or
/// one block per [`LOCAL_BYTES_PER_BLOCK`] of traffic, at most `grid`
/// blocks in all, whole multiples of `k` so that a full grid is one wave.
pub fn local_channels(
    c: Collective,
    k: u64,
    n: u64,
    size: u64,
    requested: Option<u64>,
    grid: u64,
) -> u64 {
    if let Some(ch) = requested {
        return ch.clamp(1, MAX_CHANNELS as u64);
    }
    let (send, recv) = c.lengths(k, n);
    let traffic = send
        .saturating_add(recv)
        .saturating_mul(size)
        .saturating_mul(k);
    ((traffic / LOCAL_BYTES_PER_BLOCK).clamp(1, grid.max(1)) / k.max(1)).max(1)
}

/// Channels every direct call runs (fewer when a rank has fewer): all of
/// them take part in every call, so that their epochs, and with them the
/// staging half in use, stay equal (see `ringreduce_kernels::direct`).
pub const DIRECT_CHANNELS: u64 = 4;

/// The channels of every direct call on ranks that have `max_channels`.
pub fn direct_channels(max_channels: u64) -> u64 {
    DIRECT_CHANNELS.clamp(1, max_channels.max(1))
}

/// Channels a CPU rank has when the config leaves the count to the size
/// of each call: enough to exercise the channel split, few enough for a
/// small machine's threads.
pub const CPU_AUTO_CHANNELS: usize = 4;

/// Channels per rank when `here` ranks share a device on which `blocks`
/// fit at once (`device` names it in errors): every block of every rank
/// must be resident at once, since they wait on each other. A configured
/// count must fit; otherwise as many as fit, up to [`MAX_CHANNELS`].
/// `grids` is how many launches can be resident together, each of up to
/// `batch` ranks.
pub fn channels_that_fit(
    blocks: usize,
    here: usize,
    requested: Option<u32>,
    fit: Fit,
) -> Result<usize> {
    let max = (blocks / here.max(1)).min(MAX_CHANNELS);
    if here.div_ceil(fit.batch) > fit.grids || max == 0 {
        return Err(Error::TooManyRanks {
            k: here,
            max: blocks.min(fit.grids * fit.batch),
            device: fit.device,
            threads: fit.threads,
        });
    }
    match requested {
        Some(c) if c == 0 || c as usize > max => Err(Error::TooManyChannels {
            channels: c as usize,
            max,
            device: fit.device,
        }),
        Some(c) => Ok(c as usize),
        None => Ok(max),
    }
}

/// What bounds the ranks of one device besides its resident blocks.
#[derive(Debug, Clone, Copy)]
pub struct Fit {
    /// The device, for errors.
    pub device: usize,
    /// Threads per block, for errors.
    pub threads: usize,
    /// Ranks one launch holds.
    pub batch: usize,
    /// Launches that can be resident at once.
    pub grids: usize,
}

/// Channels per rank of the CPU execution: the configured count (1 to
/// [`MAX_CHANNELS`]) or [`CPU_AUTO_CHANNELS`].
pub fn cpu_channels(requested: Option<u32>) -> Result<usize> {
    match requested {
        Some(c) if c == 0 || c as usize > MAX_CHANNELS => Err(Error::TooManyChannels {
            channels: c as usize,
            max: MAX_CHANNELS,
            device: 0,
        }),
        Some(c) => Ok(c as usize),
        None => Ok(CPU_AUTO_CHANNELS),
    }
}
