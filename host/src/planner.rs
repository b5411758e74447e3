//! The planner: validates one reduce-scatter's buffers and turns them into
//! per-rank kernel arguments. Pure functions over addresses, no GPU, shared
//! by the GPU and the CPU communicators.

use crate::error::{Error, Result};
use crate::ring::RingOrder;
use ringreduce_kernels::plan::{common_residue, needs_padding, PlanError, Sizing};
use ringreduce_kernels::{DataType, KernelArgs};

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
    /// bytes: send is all of it and recv its block `rank`, so `len` must be
    /// `k` equal blocks.
    pub fn in_place(addr: u64, len: u64, k: usize, rank: usize, size: u64) -> Result<Self> {
        if k == 0 || !len.is_multiple_of(k as u64) {
            return Err(Error::InPlaceLength { rank, len, k });
        }
        let n = len / k as u64;
        Ok(BufferSpan {
            send: addr,
            send_len: len,
            recv: addr + rank as u64 * n * size,
            recv_len: n,
        })
    }
}

/// Where one rank's communicator state lives (device or host addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankWiring {
    /// The rank's staging buffer.
    pub staging: u64,
    /// Its "new data" flag.
    pub new_data: u64,
    /// Its "chunk done" flag.
    pub chunk_done: u64,
    /// Its slot word of the pointer handshake.
    pub slot: u64,
    /// The ring table as the rank's kernel reads it.
    pub user_from_ring: u64,
    /// Where the rank records how its last wait ended.
    pub status: u64,
}

/// Communicator-wide settings that go into every rank's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Control {
    /// The abort word's address, or 0 with the watchdog off.
    pub abort_flag: u64,
    /// The wait timeout; 0 waits forever.
    pub timeout_ns: u64,
    /// Test hook: (chunk, step) from which rank `fault_rank` drops signals.
    pub fault: Option<(usize, u64, u64)>,
    /// See [`crate::CommConfig::prefetch_rounds`].
    pub prefetch_rounds: u64,
    /// Some rank runs on another device than the others: flags need
    /// system-scope fences (see [`ringreduce_kernels::Scope`]).
    pub system_scope: bool,
}

/// What a collective turns into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// `recvcount == 0`, or one rank in place: nothing to do.
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
    /// Launch one block per rank; `args[u]` is user rank `u`'s.
    Launch {
        /// The slices and chunks of the collective.
        sizing: Sizing,
        /// Whether every rank's blocks start on a pack boundary (no padding).
        aligned: bool,
        /// Each user rank's kernel arguments.
        args: Vec<KernelArgs>,
    },
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// Checks the buffers of a reduce-scatter: counts, sizes, alignment, the
/// in-place layout and overlaps. Returns `recvcount`.
pub fn validate(bufs: &[BufferSpan], k: usize, dtype: DataType) -> Result<u64> {
    let sz = dtype.size();
    if bufs.len() != k {
        return Err(Error::WrongBufferCount { got: bufs.len(), k });
    }
    let n = bufs[0].recv_len;
    let overflow = Error::Overflow {
        k,
        recvcount: n,
        size: sz,
    };
    let block_bytes = n.checked_mul(sz).ok_or(overflow.clone())?;
    let send_bytes = block_bytes.checked_mul(k as u64).ok_or(overflow.clone())?;
    let mut ranges = Vec::with_capacity(2 * k);
    for (rank, b) in bufs.iter().enumerate() {
        if b.recv_len != n {
            return Err(Error::CountMismatch {
                rank,
                got: b.recv_len,
                want: n,
            });
        }
        let expected = n * k as u64;
        if b.send_len != expected {
            return Err(Error::SendLength {
                rank,
                send_len: b.send_len,
                expected,
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
        let send = (b.send, send_bytes);
        let recv = (b.recv, block_bytes);
        if send.0.checked_add(send.1).is_none() || recv.0.checked_add(recv.1).is_none() {
            return Err(overflow);
        }
        if overlaps(send, recv) && b.recv != b.send + rank as u64 * block_bytes {
            return Err(Error::InPlaceMisplaced { rank });
        }
        ranges.push((rank, "send", send));
        ranges.push((rank, "recv", recv));
    }
    // Between ranks, only two sends may overlap: nobody writes them.
    for (i, &(a, a_which, ra)) in ranges.iter().enumerate() {
        for &(b, b_which, rb) in &ranges[i + 1..] {
            let both_read_only = a_which == "send" && b_which == "send";
            if a != b && !both_read_only && overlaps(ra, rb) {
                return Err(Error::Overlap {
                    a,
                    a_which,
                    b,
                    b_which,
                });
            }
        }
    }
    Ok(n)
}

/// Maps a sizing error to the library's error. `padded`: see
/// [`needs_padding`]; whether the buffer is big enough does not depend on it.
pub fn sizing(
    k: usize,
    n: u64,
    dtype: DataType,
    buffer_bytes: u64,
    threads: u64,
    padded: bool,
) -> Result<Sizing> {
    Sizing::new(k as u64, n, dtype.size(), buffer_bytes, threads, padded).map_err(|e| match e {
        PlanError::ZeroRanks => Error::ZeroRanks,
        PlanError::BufferTooSmall { need, have } => Error::BufferTooSmall { k, need, have },
        PlanError::Overflow | PlanError::BadElementSize(_) => Error::Overflow {
            k,
            recvcount: n,
            size: dtype.size(),
        },
    })
}

/// Plans one reduce-scatter: validates, sizes, picks the wide or scalar path
/// and wires every rank to its ring neighbours.
pub fn plan_reduce_scatter(
    ring: &RingOrder,
    wiring: &[RankWiring],
    bufs: &[BufferSpan],
    dtype: DataType,
    buffer_bytes: u64,
    threads: u64,
    control: Control,
) -> Result<Plan> {
    let k = ring.len();
    if k == 0 {
        return Err(Error::ZeroRanks);
    }
    let n = validate(bufs, k, dtype)?;
    let residue = common_residue(
        bufs.iter()
            .enumerate()
            .map(|(u, b)| (u as u64, b.send, b.recv)),
        n,
        dtype.size(),
    );
    // Reject a too-small staging buffer even for sizes that would not use it,
    // so that a communicator's validity does not depend on the message size.
    let padded = needs_padding(residue, n, dtype.size());
    let sizing = sizing(k, n, dtype, buffer_bytes, threads, padded)?;
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
                bytes: n * dtype.size(),
            }
        });
    }
    let ufr = ring.user_from_ring();
    let mut args = vec![KernelArgs::default(); k];
    for (pos, &user) in ufr.iter().enumerate() {
        let user = user as usize;
        let succ = ufr[(pos + 1) % k] as usize;
        let pred = ufr[(pos + k - 1) % k] as usize;
        let (me, next, prev) = (&wiring[user], &wiring[succ], &wiring[pred]);
        let (fault_chunk, fault_step) = match control.fault {
            Some((r, c, s)) if r == user => (c, s),
            _ => (u64::MAX, u64::MAX),
        };
        args[user] = KernelArgs {
            k: k as u64,
            ring_pos: pos as u64,
            user_rank: user as u64,
            user_from_ring: me.user_from_ring,
            sizing,
            aligned: residue.is_some() as u64,
            send_residue: residue.unwrap_or(0),
            send: bufs[user].send,
            recv: bufs[user].recv,
            this_buffer: me.staging,
            next_buffer: next.staging,
            this_new_data: me.new_data,
            next_new_data: next.new_data,
            this_chunk_done: me.chunk_done,
            prev_chunk_done: prev.chunk_done,
            this_slot: me.slot,
            prev_slot: prev.slot,
            abort_flag: control.abort_flag,
            status: me.status,
            timeout_ns: control.timeout_ns,
            fault_chunk,
            fault_step,
            prefetch_rounds: control.prefetch_rounds,
            system_scope: control.system_scope as u64,
        };
    }
    Ok(Plan::Launch {
        sizing,
        aligned: residue.is_some(),
        args,
    })
}
