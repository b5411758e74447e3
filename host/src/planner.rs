//! The planner: wires the ranks' channels into a ring once, and turns each
//! collective's buffers into per-rank work. Pure functions over addresses,
//! no GPU, shared by the GPU and the CPU communicators.

use crate::algorithm::{choose, direct_layout, Algo, Paths};
use crate::error::{Error, Result};
use crate::ring::RingOrder;
use ringreduce_kernels::abi::{ChannelConn, RankConn, RankInfo, Work, MAX_CHANNELS};
use ringreduce_kernels::plan::PACK_BYTES;
use ringreduce_kernels::plan::{common_residue, needs_padding, Geometry, PlanError, Sizing};
use ringreduce_kernels::types::{Algorithm, Collective};
use ringreduce_kernels::DataType;

/// One rank's buffers, as addresses and element counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSpan {
    /// Address of the input.
    pub send: u64,
    /// Elements of the input.
    pub send_len: u64,
    /// Address of the output.
    pub recv: u64,
    /// Elements of the output.
    pub recv_len: u64,
}

impl BufferSpan {
    /// Rank `rank`'s in-place buffer at `addr`, `len` elements of `size`
    /// bytes. A reduce-scatter sends all of it and receives its block
    /// `rank`; an all-gather sends block `rank` and receives all of it (so
    /// `len` must be `k` equal blocks); an all-reduce sends and receives all.
    pub fn in_place(
        collective: Collective,
        addr: u64,
        len: u64,
        k: usize,
        rank: usize,
        size: u64,
    ) -> Result<Self> {
        let k64 = k as u64;
        let n = if collective == Collective::AllReduce {
            len
        } else if k > 0 && len.is_multiple_of(k64) {
            len / k64
        } else {
            return Err(Error::InPlaceLength { rank, len, k });
        };
        let (send_len, recv_len) = collective.lengths(k64, n);
        let (send_at, recv_at) = collective.in_place_offsets(rank as u64, n);
        Ok(BufferSpan {
            send: addr + send_at * size,
            send_len,
            recv: addr + recv_at * size,
            recv_len,
        })
    }
}

/// Where one channel of one rank lives (device or host addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelWiring {
    /// The channel's staging ring.
    pub staging: u64,
    /// Its tail word (written by the predecessor).
    pub tail: u64,
    /// Its head word (written by the successor).
    pub head: u64,
    /// Where the channel records how its last wait ended.
    pub status: u64,
}

/// Where one rank's communicator state lives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankWiring {
    /// The ring table as the rank's kernel reads it.
    pub user_from_ring: u64,
    /// Each channel's state; every rank has the same number.
    pub channels: Vec<ChannelWiring>,
    /// The table of every rank's direct staging and ready words
    /// ([`ringreduce_kernels::DirectPeer`], user-rank order) as this rank's
    /// kernel reads it; 0 without direct staging.
    pub direct_peers: u64,
}

/// Communicator-wide settings that go into every rank's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Static {
    /// The abort word's address, or 0 with the watchdog off.
    pub abort_flag: u64,
    /// The wait timeout; 0 waits forever.
    pub timeout_ns: u64,
    /// Some rank runs on another device than the others: flags need
    /// system-scope fences (see [`ringreduce_kernels::Scope`]).
    pub system_scope: bool,
    /// Staging bytes per channel.
    pub staging_bytes: u64,
    /// Bytes of each half of every rank's direct staging (0: none).
    pub direct_half_bytes: u64,
}

/// Each user rank's connection: its ring neighbours' staging and flags,
/// channel by channel. Written to memory once, at creation.
pub fn connect(ring: &RingOrder, wiring: &[RankWiring], st: Static) -> Vec<RankConn> {
    let k = ring.len();
    let ufr = ring.user_from_ring();
    let mut conns = vec![RankConn::default(); k];
    for (pos, &user) in ufr.iter().enumerate() {
        let user = user as usize;
        let succ = &wiring[ufr[(pos + 1) % k] as usize];
        let pred = &wiring[ufr[(pos + k - 1) % k] as usize];
        let me = &wiring[user];
        let c = &mut conns[user];
        c.rank = RankInfo {
            k: k as u64,
            ring_pos: pos as u64,
            user_rank: user as u64,
            user_from_ring: me.user_from_ring,
            abort_flag: st.abort_flag,
            timeout_ns: st.timeout_ns,
            system_scope: st.system_scope as u64,
            staging_bytes: st.staging_bytes,
            direct_peers: me.direct_peers,
            direct_half_bytes: st.direct_half_bytes,
        };
        for (ch, w) in me.channels.iter().enumerate().take(MAX_CHANNELS) {
            c.channels[ch] = ChannelConn {
                this_staging: w.staging,
                next_staging: succ.channels[ch].staging,
                this_tail: w.tail,
                next_tail: succ.channels[ch].tail,
                this_head: w.head,
                prev_head: pred.channels[ch].head,
                seq: 0,
                status: w.status,
                epoch: 0,
            };
        }
    }
    conns
}

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
    /// Channels of every direct call ([`crate::algorithm::direct_channels`]).
    pub direct_channels: u64,
    /// Blocks a local call's grid may have, as many as run at once on the
    /// device; 0 when one launch cannot run every rank (no local call).
    pub local_blocks: u64,
}

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

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// The count of a collective (the elements each rank contributes per
/// block): the `recv` length of a reduce-scatter, the `send` length of the
/// others.
fn count_of(c: Collective, b: &BufferSpan) -> u64 {
    match c {
        Collective::ReduceScatter => b.recv_len,
        _ => b.send_len,
    }
}

/// Whether `b` is the in-place layout of rank `rank` (`n` elements of
/// `size` bytes per block): both buffers at their offsets from one base.
fn is_in_place(c: Collective, b: &BufferSpan, rank: u64, n: u64, size: u64) -> bool {
    let (send_at, recv_at) = c.in_place_offsets(rank, n);
    b.send.wrapping_sub(send_at * size) == b.recv.wrapping_sub(recv_at * size)
}

/// Checks the buffers of a collective: counts, lengths, alignment, the
/// in-place layout and overlaps. Returns the count.
pub fn validate(c: Collective, bufs: &[BufferSpan], k: usize, dtype: DataType) -> Result<u64> {
    let sz = dtype.size();
    if bufs.len() != k {
        return Err(Error::WrongBufferCount { got: bufs.len(), k });
    }
    let n = count_of(c, &bufs[0]);
    let overflow = Error::Overflow {
        k,
        recvcount: n,
        size: sz,
    };
    let block_bytes = n.checked_mul(sz).ok_or(overflow.clone())?;
    block_bytes.checked_mul(k as u64).ok_or(overflow.clone())?;
    let (send_len, recv_len) = c.lengths(k as u64, n);
    for (rank, b) in bufs.iter().enumerate() {
        let got = count_of(c, b);
        if got != n {
            return Err(Error::CountMismatch { rank, got, want: n });
        }
        if b.send_len != send_len {
            return Err(Error::SendLength {
                rank,
                send_len: b.send_len,
                expected: send_len,
                collective: c.name(),
            });
        }
        if b.recv_len != recv_len {
            return Err(Error::RecvLength {
                rank,
                recv_len: b.recv_len,
                expected: recv_len,
                collective: c.name(),
            });
        }
        for (which, addr) in [("send", b.send), ("recv", b.recv)] {
            if addr % sz != 0 {
                return Err(Error::Misaligned {
                    rank,
                    which,
                    addr,
                    size: sz,
                });
            }
            if n > 0 && addr == 0 {
                return Err(Error::BufferOutOfBounds {
                    rank,
                    which,
                    addr,
                    bytes: 0,
                });
            }
        }
        let send = (b.send, send_len * sz);
        let recv = (b.recv, recv_len * sz);
        if send.0.checked_add(send.1).is_none() || recv.0.checked_add(recv.1).is_none() {
            return Err(overflow);
        }
        if overlaps(send, recv) && !is_in_place(c, b, rank as u64, n, sz) {
            return Err(Error::InPlaceMisplaced {
                rank,
                collective: c.name(),
            });
        }
    }
    // Between ranks, only two sends may overlap: nobody writes them. The
    // pairs in the order of rank, then send before recv, without
    // collecting them: this runs on every call that misses the memo.
    let ranges = |b: &BufferSpan| {
        [
            (true, (b.send, send_len * sz)),
            (false, (b.recv, recv_len * sz)),
        ]
    };
    let name = |is_send: bool| if is_send { "send" } else { "recv" };
    for (a, ba) in bufs.iter().enumerate() {
        for (a_send, ra) in ranges(ba) {
            for (b, bb) in bufs.iter().enumerate().skip(a + 1) {
                for (b_send, rb) in ranges(bb) {
                    if !(a_send && b_send) && overlaps(ra, rb) {
                        return Err(Error::Overlap {
                            a,
                            a_which: name(a_send),
                            b,
                            b_which: name(b_send),
                        });
                    }
                }
            }
        }
    }
    Ok(n)
}

/// The staging slots for `dtype`, as the library's error. `padded`: see
/// [`needs_padding`]; whether the buffer is big enough does not depend on it.
pub fn sizing(dtype: DataType, buffer_bytes: u64, threads: u64, padded: bool) -> Result<Sizing> {
    Sizing::new(dtype.size(), buffer_bytes, threads, padded).map_err(|e| match e {
        PlanError::BufferTooSmall { need, have } => Error::BufferTooSmall { need, have },
        PlanError::Overflow | PlanError::BadElementSize(_) => Error::Overflow {
            k: 0,
            recvcount: 0,
            size: dtype.size(),
        },
    })
}

/// What a call's addresses decide besides the pointers themselves:
/// [`validate`]'s count, and the alignment residue every rank's blocks
/// share (`None`: the call is padded, see [`common_residue`]).
fn addresses(
    c: Collective,
    bufs: &[BufferSpan],
    k: usize,
    dtype: DataType,
) -> Result<(u64, Option<u64>)> {
    let n = validate(c, bufs, k, dtype)?;
    let sz = dtype.size();
    let blocks = Geometry::new(c, k as u64, n, sz, 1, 1);
    // Each rank's buffer that holds every block, and the one that holds
    // its own block.
    let strided_and_own = |b: &BufferSpan| match c {
        Collective::AllGather => (b.recv, b.send),
        _ => (b.send, b.recv),
    };
    let residue = common_residue(
        bufs.iter().enumerate().map(|(u, b)| {
            let (strided, own) = strided_and_own(b);
            (u as u64, strided, own)
        }),
        blocks.block_elems,
        sz,
    );
    Ok((n, residue))
}

/// Whether `kept`, a launch [`plan`] made for buffers of the same lengths
/// with every other input the same, becomes `plan`'s result for `bufs` by
/// [`repoint`] alone: `bufs` pass [`validate`] (its error otherwise, as
/// `plan`'s) and share `kept`'s alignment residue, the one thing besides
/// the pointers that the addresses decide. A loop that moves its buffers
/// (nccl-tests does) then pays a check, not a plan, per call.
pub fn repointable(
    c: Collective,
    kept: &Plan,
    bufs: &[BufferSpan],
    dtype: DataType,
) -> Result<bool> {
    let Plan::Launch { aligned, works, .. } = kept else {
        return Ok(false);
    };
    let (_, residue) = addresses(c, bufs, works.len(), dtype)?;
    Ok(residue == aligned.then(|| works[0].residue))
}

/// Whether `bufs` are `old` (for which `kept`, a launch, was planned)
/// moved together by one offset, a multiple of [`PACK_BYTES`], with no
/// address wrapping and none null: everything [`validate`] and the
/// residue check is unchanged by such a move, so [`repoint`] alone gives
/// `plan`'s result, in a pass over the ranks instead of `validate`'s k^2
/// overlap test. That is how a loop over per-rank buffers laid out alike
/// moves (bucket views at one offset; nccl-tests' shifting).
pub fn moved_whole(kept: &Plan, old: &[BufferSpan], bufs: &[BufferSpan], dtype: DataType) -> bool {
    let (Plan::Launch { .. }, Some(o), Some(b)) = (kept, old.first(), bufs.first()) else {
        return false;
    };
    let d = b.send.wrapping_sub(o.send) as i64;
    let sz = dtype.size();
    let moved = |from: u64, to: u64, len: u64| {
        from.checked_add_signed(d) == Some(to)
            && to != 0
            && to.checked_add(len.saturating_mul(sz)).is_some()
    };
    // A multiple of the pack is one of every element size too.
    d.rem_euclid(PACK_BYTES as i64) == 0
        && old.len() == bufs.len()
        && old.iter().zip(bufs).all(|(o, b)| {
            (o.send_len, o.recv_len) == (b.send_len, b.recv_len)
                && moved(o.send, b.send, b.send_len)
                && moved(o.recv, b.recv, b.recv_len)
        })
}

/// Points a launch plan's works at `bufs` (user-rank order); see
/// [`repointable`].
pub fn repoint(plan: &mut Plan, bufs: &[BufferSpan]) {
    if let Plan::Launch { works, .. } = plan {
        for (w, b) in works.iter_mut().zip(bufs) {
            (w.send, w.recv) = (b.send, b.recv);
        }
    }
}

/// Plans one collective over `k` ranks whose connections sit at `conns`
/// (one address per user rank): validates, picks the channels, the wide or
/// scalar path and the slots, and fills every rank's work.
pub fn plan(
    c: Collective,
    conns: &[u64],
    bufs: &[BufferSpan],
    dtype: DataType,
    opts: CallOpts,
) -> Result<Plan> {
    let k = conns.len();
    if k == 0 {
        return Err(Error::ZeroRanks);
    }
    let (n, residue) = addresses(c, bufs, k, dtype)?;
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
    let works = (0..k)
        .map(|u| {
            let (fault_chunk, fault_step) = match opts.fault {
                Some((r, ch, st)) if r == u => (ch, st),
                _ => (u64::MAX, u64::MAX),
            };
            Work {
                conn: conns[u],
                collective: c as u64,
                channels,
                send: bufs[u].send,
                recv: bufs[u].recv,
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
