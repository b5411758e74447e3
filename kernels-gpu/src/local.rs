//! The local engine: every rank on one device, run by one launch, each
//! segment folded as its schedule says (`crate::schedule::local`).
//!
//! The launch is ordered after every rank's stream and before it again
//! (events, see the host's launch), so when any block starts, every rank's
//! input is ready, and no rank reads its output before every block has
//! ended. A block can therefore read its share of every rank's input
//! straight from the user's buffer and write every rank's output itself:
//! no staging, no flags, no waits. Each element is read once per input and
//! written once per output, the least traffic a collective needs, which is
//! what a ring through staging cannot reach on one memory.
//!
//! Local calls have entries of their own (see `crate::catalogue`),
//! with their own launch bounds ([`crate::abi::LOCAL_THREADS`]) and a
//! 312-byte argument ([`LocalArgs`]): they share no code with the ring's
//! large entry, so they neither take its register budget nor its
//! instruction cache.
//!
//! Work is cut over the whole grid, not per rank: the collective's
//! elements (`k` segments of `n` for reduce-scatter and all-gather, one of
//! `n` for all-reduce) go to the blocks in equal runs of whole rows of
//! packs; segments shorter than a run go to groups of the block's lanes
//! ([`crate::groups`]), so that they move at once. Every element folds its
//! inputs in user-rank order `0, 1, ..., k - 1`, as the direct algorithms
//! do, so the results have their bits, and an all-reduce writes one value
//! to every rank's output.

use crate::abi::{LocalArgs, BATCH_RANKS};
use crate::device::Device;
use crate::element::Element;
use crate::groups::Groups;
use crate::op::ReduceOp;
use crate::plan::PACK_BYTES;
use crate::primitives::{copy, reduce};
use crate::schedule::local::{self as schedule, At, Ranks};
use crate::types::Collective;
use core::mem::size_of;

/// Every rank's input and output addresses, by a rank index known only at
/// run time.
///
/// On the GPU they are read in place from the entry's by-value argument
/// (`arch::nvptx::ParamEnds`), one register-indexed constant load each.
/// Indexing the argument from Rust makes LLVM copy all of it to local
/// memory first: those stores cost about a quarter of a small call's
/// kernel time (`bench/NOTES.md`, 2026-12-05: where a small local call's kernel time went).
pub trait Ends {
    /// Rank `u`'s input.
    fn send(&self, u: u64) -> u64;
    /// Rank `u`'s output.
    fn recv(&self, u: u64) -> u64;
}

/// The argument itself, where indexing costs nothing (the CPU execution).
impl Ends for LocalArgs {
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn send(&self, u: u64) -> u64 {
        self.send[u as usize]
    }

    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn recv(&self, u: u64) -> u64 {
        self.recv[u as usize]
    }
}

/// Runs block `block` of a local collective's grid of `a.blocks` blocks,
/// `THREADS` lanes each; lanes past them have nothing to do, and so has a
/// collective outside `SET` (a mask of
/// [`Collective::bit`](crate::types::Collective::bit)s).
///
/// # Safety
/// `a` must come from the host planner with every rank of the collective,
/// in user-rank order, `ends` must read `a`'s addresses, and the launch
/// must be ordered as the module says.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn run<D: Device, T: Element, O: ReduceOp, const THREADS: u64, const SET: u64>(
    d: &D,
    a: &LocalArgs,
    ends: &impl Ends,
    block: u64,
) {
    let tid = d.thread_idx();
    let (k, blocks, total, seg) = (a.ranks, a.blocks, a.total, a.segment);
    if tid >= THREADS
        || k == 0
        || k > BATCH_RANKS as u64
        || block >= blocks
        || seg == 0
        || total == 0
    {
        return;
    }
    let Some(c) = Collective::from_u64_in(a.collective, SET) else {
        return;
    };
    // Segment `s` indexes rank `s`'s buffers, read unchecked on the GPU
    // (`Ends`): a space of more than `k` segments (one for an all-reduce)
    // is not a planner's, and runs nothing.
    let segments = if c == Collective::AllReduce { 1 } else { k };
    if total > segments.saturating_mul(seg) {
        return;
    }
    let sz = size_of::<T>() as u64;
    // Runs of whole rows of packs, so that each keeps the buffers'
    // alignment.
    let row = (THREADS * PACK_BYTES / sz).max(1);
    // The segments this block's run touches. Shorter than a run, each is a
    // piece of its own group of lanes, so that short segments move at
    // once; longer, a run touches at most two, one of them perhaps a few
    // rows, and all lanes take each in turn, since a group of half the
    // lanes would take twice as long over the larger one.
    let (run, lo, hi, first, pieces) = if total <= row {
        // One row is block 0's run whatever the grid: said directly, since
        // the general arithmetic (four 64-bit divisions in a chain) took
        // longer than moving a small call's data.
        if block != 0 {
            return;
        }
        (row, 0, total, 0, (total - 1) / seg + 1)
    } else {
        let run = total.div_ceil(row).div_ceil(blocks) * row;
        let lo = block.saturating_mul(run).min(total);
        let hi = lo.saturating_add(run).min(total);
        if lo >= hi {
            return;
        }
        let first = lo / seg;
        (run, lo, hi, first, (hi - 1) / seg - first + 1)
    };
    let grp = Groups::of(tid, THREADS, if seg < run { pieces } else { 1 });
    // `Avg` divides by `divisor` (at least 1: a zero would trap).
    let (aligned, kk) = (a.aligned != 0, a.divisor.max(1) as u32);
    let at = |base: u64, i: u64| (base + i * sz) as *mut T;
    let fold = schedule::local(c);
    let mut p = grp.first;
    while p < pieces {
        let s = first + p;
        let i = lo.max(s * seg);
        let (e, len) = (i - s * seg, hi.min((s + 1) * seg) - i);
        // The segment's fold, by the collective's schedule: whose buffers,
        // and at the segment's place in the block or in the collective.
        let place = |side: At| if side == At::Block { i } else { e };
        let rank = |side: Ranks, u: u64| if side == Ranks::Every { u } else { s };
        let count = |side: Ranks| if side == Ranks::Every { k } else { 1 };
        let dst = |u: u64| at(ends.recv(rank(fold.to, u)), place(fold.to_at));
        let dests = count(fold.to);
        if fold.reduce {
            let src = |u: u64| at(ends.send(rank(fold.from, u)), place(fold.from_at)) as *const T;
            let sources = count(fold.from);
            reduce::<D, T, O>(d, grp.lanes, dst, dests, src, sources, len, aligned, kk);
        } else {
            let src = at(ends.send(rank(fold.from, 0)), place(fold.from_at)) as *const T;
            copy::<D, T, O>(d, grp.lanes, dst, dests, src, len, aligned);
        }
        p += grp.groups;
    }
}
