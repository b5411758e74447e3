//! The direct engine, for messages too small for the ring to pay: one
//! block runs one channel of one rank through the phases of its schedule
//! (`crate::schedule::direct`), with at most two rounds of flags instead
//! of the ring's `k - 1` steps.
//!
//! Each rank first copies its input into its own direct staging, which
//! every peer can read, and raises its channel's ready word. Once every
//! peer's word says the same, it reads what it needs straight from the
//! peers' staging and folds it in user-rank order `0, 1, ..., k - 1`, so
//! every rank's all-reduce has the same bits, whatever the algorithm's
//! timing. The two-shot all-reduce folds only its own block, puts it in a
//! result region of its staging, raises the word again, and copies the
//! other blocks from their owners' result regions.
//!
//! Reuse: the staging has two halves, and call number `e` (the channel's
//! `epoch`, which only the kernel advances) uses half `e mod 2`. A rank
//! that starts call `e + 2` has finished call `e + 1`, in which it saw
//! every peer start call `e + 1`; a peer's kernel for call `e + 1` starts
//! only once its kernel for call `e` has ended, so no peer still reads
//! the half being overwritten. Every direct call runs all of the
//! communicator's direct channels, so their epochs stay equal and all
//! channels of a call use one half. The ready words only grow (`2e + 1`
//! after staging, `2e + 2` after the two-shot's reduce), so nothing is
//! ever reset.
//!
//! Failure handling is the ring's: a wait that gives up reports, and the
//! block's barrier spreads a `failed` bit that skips the remaining work.

use crate::abi::{DirectPeer, RankConn, WaitKind, Work};
use crate::abi::{DIRECT_FLAG_STRIDE, MAX_CHANNELS};
use crate::device::Device;
use crate::element::Element;
use crate::flags::{signal, wait_all_at_least, WaitCtx, WaitSite};
use crate::groups::Groups;
use crate::op::ReduceOp;
use crate::plan::{block_residue, PACK_BYTES};
use crate::primitives::{copy, reduce};
use crate::schedule::direct::{self as schedule, Blocks, Fold};
use crate::types::{Algorithm, Collective};
use core::mem::size_of;
use core::ptr::addr_of;

/// What every lane of a channel's block knows about a direct call.
struct Call<'a> {
    w: &'a Work,
    collective: Collective,
    peers: *const DirectPeer,
    k: u64,
    me: u64,
    channel: u64,
    /// Byte offset of this call's half in every rank's staging.
    half: u64,
    sz: u64,
    aligned: bool,
}

impl Call<'_> {
    /// Where element `i` of user `u`'s input sits in `u`'s staging: at
    /// the input's own residue, so staged and user data stay congruent
    /// modulo a pack.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    unsafe fn staged<T>(&self, u: u64, i: u64) -> *mut T {
        let g = &self.w.geometry;
        let residue = match (self.aligned, self.collective) {
            (false, _) => 0,
            (true, Collective::AllGather) => {
                block_residue(self.w.residue, u, g.block_elems, self.sz)
            }
            (true, _) => self.w.residue % PACK_BYTES,
        };
        let area = (*self.peers.add(u as usize)).area;
        (area + self.half + residue + i * self.sz) as *mut T
    }

    /// Where element `i` of user `u`'s reduced block sits in `u`'s result
    /// region (two-shot all-reduce).
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    unsafe fn result<T>(&self, u: u64, i: u64) -> *mut T {
        let g = &self.w.geometry;
        let residue = if self.aligned {
            block_residue(self.w.residue, u, g.block_elems, self.sz)
        } else {
            0
        };
        let area = (*self.peers.add(u as usize)).area;
        (area + self.half + self.w.direct_result + residue + i * self.sz) as *mut T
    }

    /// Every user's ready word for this channel, as a closure over
    /// copies, so that the out-of-line wait that takes it does not force
    /// this call's state into local memory.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn ready_words(&self) -> impl Fn(u64) -> u64 + Copy {
        let (peers, channel) = (self.peers, self.channel);
        // SAFETY: `peers` holds `k` entries (the planner's contract).
        move |u: u64| unsafe { (*peers.add(u as usize)).ready + channel * DIRECT_FLAG_STRIDE }
    }

    /// The first block and the count of `blocks`.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn blocks(&self, blocks: Blocks) -> (u64, u64) {
        match blocks {
            Blocks::Own => (self.me, 1),
            Blocks::Every => (0, self.k),
        }
    }

    /// This channel's share of block `b`: (offset in the block, length).
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn part(&self, b: u64) -> (u64, u64) {
        let g = &self.w.geometry;
        g.channel_part(self.channel, g.block_len(b))
    }
}

/// Runs one rank's part of a direct collective: this block runs channel
/// `d.channel()`. Every lane of every block of the rank calls it with the
/// same `w`.
///
/// # Safety
/// `w` must come from the host planner: valid pointers, a staging half that
/// holds the call, and peers running the same collective.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn run<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    w: &Work,
    collective: Collective,
    algorithm: Algorithm,
) {
    let conn = w.conn as *const RankConn;
    let channel = d.channel();
    if channel >= w.channels || channel >= MAX_CHANNELS as u64 {
        return;
    }
    let rank = addr_of!((*conn).rank).read();
    if rank.k < 2 || rank.direct_peers == 0 {
        return;
    }
    let chan_at = addr_of!((*conn).channels[channel as usize]);
    let epoch_at = addr_of!((*chan_at).epoch) as *mut u64;
    // Every lane reads it before the first barrier; the control lane
    // advances it only after the last.
    let e = d.load_volatile(epoch_at);
    let call = Call {
        w,
        collective,
        peers: rank.direct_peers as *const DirectPeer,
        k: rank.k,
        me: rank.user_rank,
        channel,
        half: (e % 2) * rank.direct_half_bytes,
        sz: size_of::<T>() as u64,
        aligned: w.aligned != 0,
    };
    let tid = d.thread_idx();
    // Asked anew after every barrier (see `Device::thread_idx_fresh`).
    let control = || d.thread_idx_fresh() == THREADS;
    let ctx = WaitCtx::of(&rank, &chan_at.read(), channel);
    // The control lane publishes a phase and waits for every peer's; the
    // barrier after it spreads whether a wait gave up.
    let (words, me) = (call.ready_words(), call.me);
    let exchange = |phase: u64| {
        let mut failed = false;
        if control() {
            let value = 2 * e + 1 + phase;
            if !drop_ready(w, phase) {
                signal(d, rank.scope(), [(words(me), value)]);
            }
            let site = WaitSite {
                kind: WaitKind::PeerReady,
                chunk: 0,
                step: phase,
                sub: 0,
                expected: value,
            };
            // Every peer's word; the own is skipped (address 0).
            let peers = move |u: u64| if u == me { 0 } else { words(u) };
            failed = !wait_all_at_least(d, ctx, call.k, peers, site);
        }
        d.block_barrier_or(failed)
    };
    let phases = schedule::direct(collective, algorithm);
    if tid != THREADS {
        stage::<D, T, O, THREADS>(d, &call, tid, phases.stage);
    }
    d.block_barrier_or(false);
    if exchange(0) {
        return;
    }
    if !control() {
        match phases.fold {
            Fold::Reduce { blocks, keep } => {
                reduce_staged::<D, T, O, THREADS>(d, &call, tid, blocks, keep)
            }
            Fold::Gather => gather::<D, T, O, THREADS>(d, &call, tid, From::Staged),
        }
    }
    if phases.gather_results {
        d.block_barrier_or(false);
        if exchange(1) {
            return;
        }
        if !control() {
            gather::<D, T, O, THREADS>(d, &call, tid, From::Results);
        }
    }
    if control() {
        d.store_volatile(epoch_at, e + 1);
    }
}

/// Copies this channel's share of `blocks` of the own input into the own
/// staging (an all-gather's input is its own block alone).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn stage<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    c: &Call,
    tid: u64,
    blocks: Blocks,
) {
    let g = &c.w.geometry;
    let (first, count) = c.blocks(blocks);
    let grp = Groups::of(tid, THREADS, count);
    let mut i = grp.first;
    while i < count {
        let b = first + i;
        let (off, len) = c.part(b);
        let at = b * g.in_stride + off;
        let src = (c.w.send + at * c.sz) as *const T;
        let dst = c.staged::<T>(c.me, at);
        copy::<D, T, O>(d, grp.lanes, |_| dst, 1, src, len, c.aligned);
        i += grp.groups;
    }
}

/// `blocks` of the output, each folded from every peer's staging in
/// user-rank order; with `keep`, the own block also into the own result
/// region (the two-shot all-reduce's first shot).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn reduce_staged<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    c: &Call,
    tid: u64,
    blocks: Blocks,
    keep: bool,
) {
    let g = &c.w.geometry;
    let (first, count) = c.blocks(blocks);
    let grp = Groups::of(tid, THREADS, count);
    let mut i = grp.first;
    while i < count {
        let b = first + i;
        let (off, len) = c.part(b);
        let at = b * g.in_stride + off;
        let dst = (c.w.recv + (b * g.out_stride + off) * c.sz) as *mut T;
        // The result region is looked up only for a shot that keeps.
        let kept = if keep { c.result::<T>(c.me, off) } else { dst };
        let dsts = |j: u64| if j == 0 { dst } else { kept };
        let src = |u: u64| c.staged::<T>(u, at) as *const T;
        let (k, dests) = (c.k as u32, 1 + keep as u64);
        reduce::<D, T, O>(d, grp.lanes, dsts, dests, src, c.k, len, c.aligned, k);
        i += grp.groups;
    }
}

/// Where a gather reads a peer's block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum From {
    /// Its staged input (all-gather): every block, the own too.
    Staged,
    /// Its result region (two-shot all-reduce): every block but the own,
    /// which the first shot wrote.
    Results,
}

/// Every peer's block, from where `from` says, into its block of the
/// output.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn gather<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    c: &Call,
    tid: u64,
    from: From,
) {
    let g = &c.w.geometry;
    let count = if from == From::Results { c.k - 1 } else { c.k };
    let grp = Groups::of(tid, THREADS, count);
    let mut i = grp.first;
    while i < count {
        // The blocks in order; the own skipped when it is not gathered.
        let p = if from == From::Results && i >= c.me {
            i + 1
        } else {
            i
        };
        let (off, len) = c.part(p);
        let dst = (c.w.recv + (p * g.out_stride + off) * c.sz) as *mut T;
        let src = match from {
            From::Staged => c.staged::<T>(p, off),
            From::Results => c.result::<T>(p, off),
        } as *const T;
        copy::<D, T, O>(d, grp.lanes, |_| dst, 1, src, len, c.aligned);
        i += grp.groups;
    }
}

/// The fault-injection hook: from phase `fault_step` on (`fault_chunk`
/// set), this rank never raises its ready word, as a rank whose signals
/// are lost would.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn drop_ready(w: &Work, phase: u64) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        w.fault_chunk != u64::MAX && phase >= w.fault_step
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (w, phase);
        false
    }
}
