//! The ring engine, written once for every collective: one block runs one
//! channel of one rank through a [`Schedule`].
//!
//! The block has two roles. Lanes `0..THREADS` are producers: they only
//! move data, with the step primitives. Lane `THREADS`, alone in its warp,
//! is the control lane: it makes every flag wait and every signal, and works
//! out where every slice lies. For slice `i` the control lane waits for the
//! slice's flags, releases the producers into it with its addresses (on the
//! GPU, an `mbarrier` phase that each producer awaits on its own, so no
//! producer waits for another), then waits until every producer reported
//! slice `i - 1` done and publishes that slice. So the flag round trips
//! overlap data movement (`bench/NOTES.md`).
//!
//! Flow control is NCCL 2's: each channel's staging is a ring of
//! [`STAGING_SLOTS`] slots. Send number `j` (counted over the channel's
//! life, in [`ChannelConn::seq`]) fills slot `j mod STAGING_SLOTS` of the
//! successor once the successor's head says it consumed send
//! `j - STAGING_SLOTS`; receive number `j` reads our slot once our tail
//! says the predecessor delivered it. The counters only grow, so a call
//! never waits for the previous one to reset anything.
//!
//! Deadlock freedom: slice `i` of a chunk step waits only for peers'
//! publications of slices `<= i - 2`: the predecessor's send of the step
//! before (two slices back), or the successor's receive of a send at least
//! `STAGING_SLOTS / NUM_SUBCHUNKS >= 2` steps back. A control lane
//! publishes slice `i - 1` right after its wait for slice `i`, so by
//! induction over `i` every wait ends. The done barriers alternate by
//! slice parity, which is safe because slice `i` is released only after
//! slice `i - 2` is done.
//!
//! Failure handling: a wait that gives up (abort or timeout) makes the
//! control lane report the reason and publish a `failed` bit with every
//! later release; producers skip released slices while it is set, and the
//! control lane signals nothing more, but every barrier is still passed, so
//! nothing deadlocks.

use crate::abi::{ChannelConn, RankConn, RankInfo, WaitKind, Work, MAX_CHANNELS};
use crate::device::{Device, Handoff, SliceWork};
use crate::element::Element;
use crate::flags::{signal, wait_at_least, WaitCtx, WaitSite};
use crate::op::ReduceOp;
use crate::plan::{block_residue, Chunking, NUM_SUBCHUNKS, STAGING_SLOTS};
use crate::primitives::{self, LaneCtx, Slot};
use crate::ring::block_for_step;
use crate::schedule::{prims_of, Prim, Schedule};
use crate::types::Collective;
use core::mem::size_of;
use core::ptr::addr_of;

/// What every lane of a channel's block knows about the call: copies of
/// the connection's parts it reads, and the one word it writes.
struct Channel<'a> {
    rank: RankInfo,
    chan: ChannelConn,
    /// The channel's `seq` word in the connection.
    seq: *mut u64,
    work: &'a Work,
    sched: Schedule,
    chunks: Chunking,
    index: u64,
    /// The channel's send (and receive) count before this call.
    base: u64,
}

/// One slice of the schedule, as the control lane tracks it.
#[derive(Clone, Copy)]
struct SliceAt {
    chunk: u64,
    step: u64,
    sub: u64,
    /// The send number, when the step sends.
    send: Option<u64>,
    /// The receive number, when the step receives.
    recv: Option<u64>,
}

/// Runs one rank's part of a collective of `SET` (a mask of
/// [`Collective::bit`](crate::types::Collective::bit)s; others do nothing): this
/// block runs channel `d.channel()`. Every lane of every block of the rank
/// calls it with the same `w`.
///
/// # Safety
/// `w` must come from the host planner: valid pointers, a sizing that fits
/// the staging buffers, and peers running the same collective.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn run<
    D: Device + Handoff,
    T: Element,
    O: ReduceOp,
    const THREADS: u64,
    const SET: u64,
>(
    d: &D,
    w: &Work,
) {
    let conn = w.conn as *const RankConn;
    let index = d.channel();
    let Some(collective) = Collective::from_u64_in(w.collective, SET) else {
        return;
    };
    if index >= w.channels || index >= MAX_CHANNELS as u64 {
        return;
    }
    // No reference to the connection is made: its `seq` words change.
    let rank = addr_of!((*conn).rank).read();
    let chan_at = addr_of!((*conn).channels[index as usize]);
    let seq = addr_of!((*chan_at).seq) as *mut u64;
    if rank.k < 2 {
        return;
    }
    let ch = Channel {
        rank,
        chan: chan_at.read(),
        seq,
        work: w,
        sched: Schedule::new(collective, rank.k),
        chunks: Chunking::new(&w.sizing, w.geometry.channel_len(index)),
        index,
        // Every lane reads it before the barrier below; the control lane
        // advances it only after the producers finished the last slice.
        base: d.load_volatile(seq),
    };
    let tid = d.thread_idx();
    if tid == THREADS {
        d.reset_release();
    }
    d.block_barrier_or(false);
    if d.thread_idx_fresh() == THREADS {
        control_lane(d, &ch, size_of::<T>() as u64);
    } else {
        producer_lane::<D, T, O, THREADS, SET>(d, &ch, tid);
    }
}

impl Channel<'_> {
    /// How many slices [`for_each_slice`] visits.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn slices(&self) -> u64 {
        self.chunks.num_chunks * self.sched.steps() * NUM_SUBCHUNKS
    }
}

/// Calls `f` for every slice of the call, in order, with its send and
/// receive numbers.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn for_each_slice(ch: &Channel, mut f: impl FnMut(SliceAt)) {
    let (mut sent, mut received) = (ch.base, ch.base);
    for chunk in 0..ch.chunks.num_chunks {
        for step in 0..ch.sched.steps() {
            let p = ch.sched.prim(step);
            for sub in 0..NUM_SUBCHUNKS {
                f(SliceAt {
                    chunk,
                    step,
                    sub,
                    send: p.sends().then_some(sent),
                    recv: p.recvs().then_some(received),
                });
                sent += p.sends() as u64;
                received += p.recvs() as u64;
            }
        }
    }
}

/// The control lane: before releasing slice `i` it works out the slice's
/// addresses (elements of `sz` bytes) and waits for its flags, and after
/// releasing it waits for the producers to finish slice `i - 1` and
/// publishes that. So it runs a slice ahead of the producers.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn control_lane<D: Device + Handoff>(d: &D, ch: &Channel, sz: u64) {
    let ufr = core::slice::from_raw_parts(ch.rank.user_from_ring as *const u32, ch.rank.k as usize);
    let aligned = ch.work.aligned != 0;
    let mut at = StepAt::default();
    let mut failed = false;
    let mut moved: Option<SliceAt> = None;
    let mut i = 0u64;
    let mut sent = ch.base;
    let mut seen = Seen::default();
    let finish = |i: u64, moved: Option<SliceAt>, failed: bool| {
        if let Some(prev) = moved {
            d.await_done((i - 1) & 1);
            if !failed {
                publish(d, ch, prev);
            }
        }
    };
    for_each_slice(ch, |s| {
        if s.sub == 0 {
            at = StepAt::of(ch, s, ufr, aligned, sz);
        }
        let work = at.next_slice(ch, s, sz);
        if !failed {
            failed = !wait_for_slice(d, ch, s, &mut seen);
        }
        d.release(i, failed, work);
        finish(i, moved, failed);
        moved = Some(s);
        sent += s.send.is_some() as u64;
        i += 1;
    });
    finish(i, moved, failed);
    if !failed {
        // In a ring every rank receives what it sends: one count serves.
        d.store_volatile(ch.seq, sent);
    }
}

/// The counters the control lane last read. They only grow, so a value
/// seen once stays a lower bound: a wait it already covers needs no load
/// (the acquire that read it ordered everything after it). With 8 slots
/// the successor's head is usually several slices ahead, so most slices
/// skip that round trip to L2, as NCCL's cached step counters do.
#[derive(Default)]
struct Seen {
    head: u64,
    tail: u64,
}

/// The control lane's waits before moving a slice: the slot it fills must
/// be free, and the slot it reads must be full.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn wait_for_slice<D: Device>(d: &D, ch: &Channel, s: SliceAt, seen: &mut Seen) -> bool {
    let ctx = WaitCtx::of(&ch.rank, &ch.chan, ch.index);
    let wait = |flag: u64, kind, want: u64, cached: &mut u64| {
        if *cached >= want {
            return true;
        }
        // One look inline before the out-of-line wait: when the counter is
        // already there, the call and the spills around it are skipped.
        // Here, not as an inlined head of `wait_at_least`: there LLVM
        // writes the wait's context to local memory before the look.
        // SAFETY: `flag` is a flag of this channel's connection.
        let now = unsafe { d.load_acquire(flag as *const u64, ch.rank.scope()) };
        if now >= want {
            *cached = now;
            return true;
        }
        let at = WaitSite {
            kind,
            chunk: s.chunk,
            step: s.step,
            sub: s.sub,
            expected: want,
        };
        match wait_at_least(d, ctx, flag, at) {
            Some(v) => {
                *cached = v;
                true
            }
            None => false,
        }
    };
    if let Some(j) = s.send {
        if j >= STAGING_SLOTS {
            let want = j + 1 - STAGING_SLOTS;
            if !wait(ch.chan.this_head, WaitKind::SlotFree, want, &mut seen.head) {
                return false;
            }
        }
    }
    if let Some(j) = s.recv {
        if !wait(ch.chan.this_tail, WaitKind::NewData, j + 1, &mut seen.tail) {
            return false;
        }
    }
    true
}

/// Tells the successor about a slice every producer has finished sending,
/// and the predecessor that the slot it filled is free again. Once any wait
/// gave up the control lane publishes nothing more, not even the slice just
/// moved: the ranks downstream then all time out together instead of one
/// after another.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn publish<D: Device>(d: &D, ch: &Channel, s: SliceAt) {
    let tail = match s.send {
        Some(j) if !drop_signal(ch.work, s.chunk, s.step) => (ch.chan.next_tail, j + 1),
        _ => (0, 0),
    };
    let head = match s.recv {
        Some(j) => (ch.chan.prev_head, j + 1),
        None => (0, 0),
    };
    signal(d, ch.rank.scope(), [tail, head]);
}

/// A producer lane: every slice in order, each once it is released,
/// reporting each done. A released slice is skipped when the control lane
/// has given up. Only the loop counter and the lane's constants stay live
/// across a slice, so the transfer has the registers to itself.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn producer_lane<
    D: Device + Handoff,
    T: Element,
    O: ReduceOp,
    const THREADS: u64,
    const SET: u64,
>(
    d: &D,
    ch: &Channel,
    tid: u64,
) {
    let prims = prims_of(SET);
    let lane = LaneCtx {
        tid,
        aligned: ch.work.aligned != 0,
        k: ch.rank.k as u32,
        prefetch_rounds: ch.work.prefetch_rounds,
    };
    for i in 0..ch.slices() {
        if let Some(s) = d.await_release(i) {
            if let Some(p) = Prim::from_index_in(s.prim, prims) {
                primitives::run::<D, T, O, THREADS>(p, d, lane, Slot::of(s), s.len);
            }
        }
        d.arrive_done(i & 1);
    }
}

// `StepAt::next_slice` picks a step's slice by a select of two.
const _: () = assert!(NUM_SUBCHUNKS == 2);

/// Where the slices of one step lie, as the control lane tracks them.
#[derive(Default)]
struct StepAt {
    /// The user rank whose block the step moves.
    block: u64,
    /// The slices of this chunk of the channel's share of that block.
    slices: [u64; NUM_SUBCHUNKS as usize],
    /// Where the next slice starts in the block, in elements.
    off: u64,
    /// The block's alignment residue (0 on the scalar path).
    residue: u64,
}

impl StepAt {
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn of(ch: &Channel, s: SliceAt, ufr: &[u32], aligned: bool, sz: u64) -> Self {
        let g = &ch.work.geometry;
        let block = block_for_step(ufr, ch.rank.ring_pos, ch.sched.ring_step(s.step));
        let (off, len) = g.channel_part(ch.index, g.block_len(block));
        StepAt {
            block,
            slices: ch.chunks.slices(s.chunk, len),
            off: off + s.chunk * ch.chunks.chunk_elems,
            residue: if aligned {
                block_residue(ch.work.residue, block, g.block_elems, sz)
            } else {
                0
            },
        }
    }

    /// The work of slice `s` of this step (elements of `sz` bytes); the
    /// next slice starts after it.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn next_slice(&mut self, ch: &Channel, s: SliceAt, sz: u64) -> SliceWork {
        let (w, g) = (ch.work, &ch.work.geometry);
        // A select, not an index: a run-time index puts the array in local
        // memory, a round trip on the control lane's path.
        let len = if s.sub == 0 {
            self.slices[0]
        } else {
            self.slices[NUM_SUBCHUNKS as usize - 1]
        };
        let slot = |base: u64, seq: Option<u64>| {
            base + seq.map_or(0, |j| w.sizing.slot_offset(j)) + self.residue
        };
        let work = SliceWork {
            prim: ch.sched.prim(s.step).index(),
            incoming: slot(ch.chan.this_staging, s.recv),
            next: slot(ch.chan.next_staging, s.send),
            own: w.send + (self.block * g.in_stride + self.off) * sz,
            out: w.recv + (self.block * g.out_stride + self.off) * sz,
            len,
        };
        self.off += len;
        work
    }
}

/// The fault-injection hook: from (chunk, step) on, this rank stops telling
/// its successor about new data, as a rank whose signals are lost for good
/// would. (A single lost increment of a monotonic counter is healed by the
/// next one, so only a lasting loss can stall the ring.)
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn drop_signal(w: &Work, c: u64, step: u64) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        w.fault_chunk != u64::MAX && (c, step) >= (w.fault_chunk, w.fault_step)
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (w, c, step);
        false
    }
}
