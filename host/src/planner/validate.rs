//! A call's buffers as addresses, and the checks they must pass before
//! anything is planned: counts, lengths, alignment, the in-place layout,
//! overlaps, and staging that holds one slice.

use crate::error::{Error, Result};
use ringreduce_kernels::plan::{
    common_residue, Geometry, PlanError, Sizing, DEFAULT_BUFFER_BYTES, PACK_BYTES,
};
use ringreduce_kernels::types::Collective;
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

/// Which ranks of how many a call's buffers belong to: every rank of the
/// communicator in one process, or a process's own share of a job's ranks
/// (one process per rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The user rank of the first buffers (and connection) given.
    pub first: u64,
    /// Ranks in the whole communicator.
    pub world: u64,
}

impl Part {
    /// All `k` ranks, here.
    pub fn whole(k: usize) -> Self {
        Part {
            first: 0,
            world: k as u64,
        }
    }

    /// Whether ranks live elsewhere, so that a call's buffers are only
    /// `len` of `world`.
    pub fn is_partial(&self, len: usize) -> bool {
        len as u64 != self.world
    }
}

/// Checks the buffers of a collective over `k` ranks: counts, lengths,
/// alignment, the in-place layout and overlaps. Returns the count.
pub fn validate(c: Collective, bufs: &[BufferSpan], k: usize, dtype: DataType) -> Result<u64> {
    if bufs.len() != k {
        return Err(Error::WrongBufferCount { got: bufs.len(), k });
    }
    validate_part(c, bufs, Part::whole(k), dtype)
}

/// [`validate`] of the buffers of ranks `part.first..` only: a process of
/// a job checks its own; what ranks elsewhere pass is theirs to check.
pub fn validate_part(
    c: Collective,
    bufs: &[BufferSpan],
    part: Part,
    dtype: DataType,
) -> Result<u64> {
    let sz = dtype.size();
    let k = part.world as usize;
    let Some(first) = bufs.first() else {
        return Err(Error::WrongBufferCount { got: 0, k });
    };
    let n = count_of(c, first);
    let overflow = Error::Overflow {
        k,
        recvcount: n,
        size: sz,
    };
    let block_bytes = n.checked_mul(sz).ok_or(overflow.clone())?;
    block_bytes.checked_mul(k as u64).ok_or(overflow.clone())?;
    let (send_len, recv_len) = c.lengths(k as u64, n);
    let rank_of = |i: usize| part.first as usize + i;
    for (i, b) in bufs.iter().enumerate() {
        let rank = rank_of(i);
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
                            a: rank_of(a),
                            a_which: name(a_send),
                            b: rank_of(b),
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
/// [`needs_padding`](ringreduce_kernels::plan::needs_padding); whether the buffer is big enough does not depend on it.
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

/// The staging per channel `requested` (else the library's default),
/// checked to hold one slice of `threads` lanes, so that a communicator
/// too small for any call is refused when it is made.
pub fn staging_bytes(requested: Option<u64>, threads: u64) -> Result<u64> {
    let staging = requested.unwrap_or(DEFAULT_BUFFER_BYTES);
    sizing(DataType::U8, staging, threads, true)?;
    Ok(staging)
}

/// What a call's addresses decide besides the pointers themselves:
/// [`validate`]'s count, and the alignment residue every rank's blocks
/// share (`None`: the call is padded, see [`common_residue`]).
///
/// When other processes hold some of the ranks ([`Part::is_partial`]),
/// their addresses are unknown here, so the staging layout must follow
/// from the size alone: blocks of whole packs stage at residue 0 unpadded,
/// other blocks take the scalar path on every rank. Within the first, a
/// process whose own buffers start on packs runs the wide path and one
/// whose buffers do not runs the scalar path: both stage every block at
/// offset 0 of unpadded slots, so they still meet, and each element's
/// fold is the same either way.
pub(crate) fn addresses(
    c: Collective,
    bufs: &[BufferSpan],
    part: Part,
    dtype: DataType,
) -> Result<(u64, Option<u64>)> {
    let n = if part.is_partial(bufs.len()) {
        validate_part(c, bufs, part, dtype)?
    } else {
        validate(c, bufs, part.world as usize, dtype)?
    };
    let sz = dtype.size();
    let blocks = Geometry::new(c, part.world, n, sz, 1, 1);
    // Each rank's buffer that holds every block, and the one that holds
    // its own block.
    let strided_and_own = |b: &BufferSpan| match c {
        Collective::AllGather => (b.recv, b.send),
        _ => (b.send, b.recv),
    };
    let ranks = bufs.iter().enumerate().map(|(i, b)| {
        let (strided, own) = strided_and_own(b);
        (part.first + i as u64, strided, own)
    });
    if !part.is_partial(bufs.len()) {
        return Ok((n, common_residue(ranks, blocks.block_elems, sz)));
    }
    let whole_packs = (blocks.block_elems * sz).is_multiple_of(PACK_BYTES);
    let on_packs = ranks.into_iter().all(|(_, strided, own)| {
        strided.is_multiple_of(PACK_BYTES) && own.is_multiple_of(PACK_BYTES)
    });
    Ok((n, (n > 0 && whole_packs && on_packs).then_some(0)))
}
