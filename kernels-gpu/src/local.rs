//! The local collectives: every rank on one device, run by one launch.
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
//! Local calls have their own entries (`ringreduce_local_<type>_<op>`),
//! with their own launch bounds ([`crate::abi::LOCAL_THREADS`]) and a
//! 304-byte argument ([`LocalArgs`]): they share no code with the ring's
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

use crate::abi::{Collective, LocalArgs, BATCH_RANKS};
use crate::device::Device;
use crate::element::Element;
use crate::groups::Groups;
use crate::op::ReduceOp;
use crate::plan::PACK_BYTES;
use crate::transfer::fold;
use core::mem::size_of;

/// Every rank's input and output addresses, in user-rank order, copied
/// with constant indices from the by-value argument, so that the folds'
/// dynamic indices go to this copy.
struct Ends {
    send: [u64; BATCH_RANKS],
    recv: [u64; BATCH_RANKS],
}

impl Ends {
    #[inline(always)]
    fn of(a: &LocalArgs) -> Ends {
        macro_rules! each {
            ($f:ident: $($u:literal)*) => {[$(a.$f[$u]),*]};
        }
        Ends {
            send: each!(send: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15),
            recv: each!(recv: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15),
        }
    }
}

/// Runs block `block` of a local collective's grid of `a.blocks` blocks,
/// `THREADS` lanes each; lanes past them have nothing to do.
///
/// # Safety
/// `a` must come from the host planner with every rank of the collective,
/// in user-rank order, and the launch must be ordered as the module says.
#[inline(always)]
pub unsafe fn run<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    a: &LocalArgs,
    block: u64,
) {
    let tid = d.thread_idx();
    let (k, blocks, total, seg) = (a.ranks, a.blocks, a.total, a.segment);
    if tid >= THREADS || k == 0 || k > BATCH_RANKS as u64 || block >= blocks || seg == 0 {
        return;
    }
    let Some(c) = Collective::from_u64(a.collective) else {
        return;
    };
    let sz = size_of::<T>() as u64;
    // Runs of whole rows of packs, so that each keeps the buffers'
    // alignment.
    let row = (THREADS * PACK_BYTES / sz).max(1);
    let run = total.div_ceil(row).div_ceil(blocks) * row;
    let lo = block.saturating_mul(run).min(total);
    let hi = lo.saturating_add(run).min(total);
    if lo >= hi {
        return;
    }
    // The segments this block's run touches. Shorter than a run, each is a
    // piece of its own group of lanes, so that short segments move at
    // once; longer, a run touches at most two, one of them perhaps a few
    // rows, and all lanes take each in turn, since a group of half the
    // lanes would take twice as long over the larger one.
    let first = lo / seg;
    let pieces = (hi - 1) / seg - first + 1;
    let grp = Groups::of(tid, THREADS, if seg < run { pieces } else { 1 });
    let ends = Ends::of(a);
    let (aligned, kk) = (a.aligned != 0, k as u32);
    let at = |base: u64, i: u64| (base + i * sz) as *mut T;
    let mut p = grp.first;
    while p < pieces {
        let s = first + p;
        let i = lo.max(s * seg);
        let (e, len) = (i - s * seg, hi.min((s + 1) * seg) - i);
        match c {
            // Segment `s` is rank `s`'s output, folded from block `s` of
            // every input.
            Collective::ReduceScatter => {
                let dst = |_| at(ends.recv[s as usize], e);
                let src = |u: u64| at(ends.send[u as usize], i) as *const T;
                fold::<D, T, O, true>(d, grp.lanes, dst, 1, src, k, len, aligned, kk);
            }
            // Segment `s` is rank `s`'s input, copied to block `s` of every
            // output.
            Collective::AllGather => {
                let dst = |u: u64| at(ends.recv[u as usize], i);
                let src = |_| at(ends.send[s as usize], e) as *const T;
                fold::<D, T, O, false>(d, grp.lanes, dst, k, src, 1, len, aligned, 1);
            }
            Collective::AllReduce => {
                let dst = |u: u64| at(ends.recv[u as usize], e);
                let src = |u: u64| at(ends.send[u as usize], e) as *const T;
                fold::<D, T, O, true>(d, grp.lanes, dst, k, src, k, len, aligned, kk);
            }
        }
        p += grp.groups;
    }
}
