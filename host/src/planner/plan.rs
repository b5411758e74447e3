//! One call's plan: the algorithm, the channels and the slots, and every
//! rank's [`Work`].

use super::validate::{addresses, sizing, BufferSpan, Part};
use crate::algorithm::{choose, direct_layout, Algo, Paths};
use crate::channels::{channels_for, local_channels};
use crate::error::{Error, Result};
use ringreduce_kernels::abi::Work;
use ringreduce_kernels::plan::{needs_padding, Geometry, Sizing, PACK_BYTES};
use ringreduce_kernels::types::{Algorithm, Collective};
use ringreduce_kernels::DataType;

/// Per-call settings besides the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOpts {
    /// Staging bytes per channel.
    pub buffer_bytes: u64,
    /// Producer lanes per block.
    pub threads: u64,
    /// Channels asked for (`None`: chosen by size).
    pub channels: Option<u64>,
    /// Channels every rank has.
    pub max_channels: u64,
    /// See [`crate::CommConfig::prefetch_rounds`].
    pub prefetch_rounds: u64,
    /// Test hook: (rank, chunk, step) from which that rank drops signals.
    pub fault: Option<(usize, u64, u64)>,
    /// The algorithm asked for.
    pub algorithm: Algo,
    /// Bytes of each direct staging half (0: the ring only).
    pub direct_half_bytes: u64,
    /// Channels of every direct call ([`crate::channels::direct_channels`]).
    pub direct_channels: u64,
    /// Blocks a local call's grid may have, as many as run at once on the
    /// device; 0 when one launch cannot run every rank (no local call).
    pub local_blocks: u64,
    /// The ranks a call's buffers and connections are, when other
    /// processes hold the rest; `None`: every rank is here.
    pub part: Option<Part>,
}

impl CallOpts {
    /// Which ranks `here` buffers (and connections) are.
    pub fn part_of(&self, here: usize) -> Part {
        self.part.unwrap_or(Part::whole(here))
    }
}

/// Blocks per rank a call of `c` runs with `algorithm`: what [`plan`]
/// launches.
pub fn call_channels(
    c: Collective,
    algorithm: Algorithm,
    k: u64,
    n: u64,
    size: u64,
    opts: &CallOpts,
) -> u64 {
    match algorithm {
        Algorithm::Ring => channels_for(c, k, n, size, opts.channels, opts.max_channels),
        Algorithm::Local => local_channels(c, k, n, size, opts.channels, opts.local_blocks),
        Algorithm::OneShot | Algorithm::TwoShot => {
            opts.direct_channels.clamp(1, opts.max_channels.max(1))
        }
    }
}

/// What a collective turns into.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to move (a count of 0, or one rank in place).
    Nothing,
    /// One rank, out of place: copy `bytes` from `send` to `recv`.
    Copy {
        /// From here.
        send: u64,
        /// To here.
        recv: u64,
        /// This many bytes.
        bytes: u64,
    },
    /// Launch `channels` blocks per rank; `works[u]` is user rank `u`'s.
    Launch {
        /// The ring or a direct algorithm.
        algorithm: Algorithm,
        /// Blocks per rank.
        channels: u64,
        /// The staging slots of the call.
        sizing: Sizing,
        /// Whether every rank's blocks start on a pack boundary (no padding).
        aligned: bool,
        /// Each user rank's work.
        works: Vec<Work>,
    },
}

impl Clone for Plan {
    fn clone(&self) -> Self {
        let mut p = Plan::Nothing;
        p.clone_from(self);
        p
    }

    /// Into the works' own allocation when `self` is a launch: the memo
    /// recycles its oldest plan this way instead of allocating.
    fn clone_from(&mut self, source: &Self) {
        *self = match source {
            Plan::Nothing => Plan::Nothing,
            &Plan::Copy { send, recv, bytes } => Plan::Copy { send, recv, bytes },
            Plan::Launch {
                algorithm,
                channels,
                sizing,
                aligned,
                works,
            } => {
                let mut own = match self {
                    Plan::Launch { works, .. } => std::mem::take(works),
                    _ => Vec::new(),
                };
                own.clone_from(works);
                Plan::Launch {
                    algorithm: *algorithm,
                    channels: *channels,
                    sizing: *sizing,
                    aligned: *aligned,
                    works: own,
                }
            }
        };
    }
}

/// Plans one collective over `k` ranks whose connections sit at `conns`
/// (one address per user rank here, see [`CallOpts::part`]): validates,
/// picks the channels, the wide or scalar path and the slots, and fills
/// the work of every rank here.
pub fn plan(
    c: Collective,
    conns: &[u64],
    bufs: &[BufferSpan],
    dtype: DataType,
    opts: CallOpts,
) -> Result<Plan> {
    let part = opts.part_of(conns.len());
    let k = part.world as usize;
    if k == 0 || conns.is_empty() {
        return Err(Error::ZeroRanks);
    }
    if bufs.len() != conns.len() {
        return Err(Error::WrongBufferCount {
            got: bufs.len(),
            k: conns.len(),
        });
    }
    let (n, residue) = addresses(c, bufs, part, dtype)?;
    let sz = dtype.size();
    let blocks = Geometry::new(c, k as u64, n, sz, 1, 1);
    // Reject a too-small staging buffer even for sizes that would not use it,
    // so that a communicator's validity does not depend on the message size.
    let padded = needs_padding(residue, blocks.block_elems, sz);
    let sizing = sizing(dtype, opts.buffer_bytes, opts.threads, padded)?;
    // The algorithm is chosen, and a forced one checked, even for a call
    // with nothing to move, so that `algorithm_for` and the call agree on
    // every count: a communicator that cannot run its forced algorithm
    // refuses count 0 as it refuses the rest.
    let k64 = k as u64;
    let paths = Paths {
        direct_half: opts.direct_half_bytes,
        local: opts.local_blocks > 0,
    };
    let algorithm = choose(c, opts.algorithm, k64, n, blocks.block_elems, sz, paths)?;
    if n == 0 {
        return Ok(Plan::Nothing);
    }
    if k == 1 {
        let b = bufs[0];
        return Ok(if b.send == b.recv {
            Plan::Nothing
        } else {
            Plan::Copy {
                send: b.send,
                recv: b.recv,
                bytes: n * sz,
            }
        });
    }
    let channels = call_channels(c, algorithm, k64, n, sz, &opts);
    let (geometry, direct_result) = if algorithm == Algorithm::Ring {
        let g = Geometry::new(c, k64, n, sz, sizing.tile_elems, channels);
        (g, 0)
    } else if algorithm == Algorithm::Local {
        // The kernel cuts the whole grid's work itself (`local`); only the
        // blocks' totals matter.
        (blocks, 0)
    } else {
        // Shares of whole rows of packs (one per lane), so that every
        // channel keeps the buffers' alignment.
        let unit = (opts.threads * PACK_BYTES / sz).max(1);
        let g = Geometry::new(c, k64, n, sz, unit, channels);
        let layout =
            direct_layout(c, algorithm, k64, n, g.block_elems, sz).ok_or(Error::Overflow {
                k,
                recvcount: n,
                size: sz,
            })?;
        (g, layout.result)
    };
    let works = (0..conns.len())
        .map(|i| {
            let u = part.first as usize + i;
            let (fault_chunk, fault_step) = match opts.fault {
                Some((r, ch, st)) if r == u => (ch, st),
                _ => (u64::MAX, u64::MAX),
            };
            Work {
                conn: conns[i],
                collective: c as u64,
                channels,
                send: bufs[i].send,
                recv: bufs[i].recv,
                geometry,
                sizing,
                aligned: residue.is_some() as u64,
                residue: residue.unwrap_or(0),
                prefetch_rounds: opts.prefetch_rounds,
                fault_chunk,
                fault_step,
                algorithm: algorithm as u64,
                direct_result,
            }
        })
        .collect();
    Ok(Plan::Launch {
        algorithm,
        channels,
        sizing,
        aligned: residue.is_some(),
        works,
    })
}
