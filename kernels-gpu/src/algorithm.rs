//! The ring reduce-scatter, as one rank's block runs it.
//!
//! The block has two roles. Lanes `0..THREADS` are producers: they only
//! move data. Lane `THREADS`, alone in its warp, is the control lane: it
//! makes every flag wait and every signal. For slice `i` the control lane
//! waits for the slice's flag condition, releases the producers into it
//! (it raises a count of released slices in shared memory, which each
//! producer warp polls on its own, so no producer waits for another), then
//! waits until every producer reported slice `i - 1` done and publishes that
//! slice. So the flag round trips overlap data movement, and producers
//! drift up to a slice apart instead of meeting at a block barrier every
//! slice, which was the largest per-slice cost (`bench/NOTES.md`). The
//! block handled at each step comes from
//! [`ring::block_for_step`], so the last step reduces the rank's own block
//! into `recv`.
//!
//! Deadlock freedom: the condition for slice `i` is a peer's signal for
//! its slice `i - 2` (the predecessor's previous step, or the successor's
//! last step of the previous chunk), which that peer publishes before it
//! waits for its slice `i`. So no rank ever waits on a later slice of
//! another. The done barriers alternate by slice parity, which is safe
//! because slice `i` is released only after slice `i - 2` is done; the
//! release count only grows within a collective.
//!
//! Failure handling: a wait that gives up (abort or timeout) makes the
//! control lane report the reason and publish a `failed` bit with every
//! later release; producers skip released slices while it is set, and the
//! control lane signals nothing more, but every barrier is still passed, so
//! nothing deadlocks.

use crate::args::{KernelArgs, WaitKind};
use crate::device::Device;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::plan::{block_residue, Sizing, NUM_SUBCHUNKS};
use crate::primitives::{signal, transfer, wait_until, WaitCtx, WaitSite, COPY, FINAL, REDUCE};
use crate::ring::block_for_step;
use core::mem::size_of;

/// Runs one rank's part of a reduce-scatter. Every lane of the block calls
/// it with the same `args`.
///
/// # Safety
/// `args` must come from the host planner: valid pointers, a sizing that
/// fits the staging buffers, and peers running the same collective.
#[inline(always)]
pub unsafe fn reduce_scatter<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    a: &KernelArgs,
) {
    let s = &a.sizing;
    let k = a.k;
    if s.n == 0 || k < 2 {
        return;
    }
    let tid = d.thread_idx();
    let control = tid == THREADS;
    let failed = control && !handshake(d, a);
    if control {
        d.reset_release();
    }
    if d.block_barrier_or(failed) {
        return;
    }
    if control {
        control_lane(d, a);
    } else {
        producer_lane::<D, T, O, THREADS>(d, a, tid);
    }
}

/// The control lane: before releasing slice `i` it waits for that slice's
/// condition, and after releasing it waits for the producers to finish
/// slice `i - 1` and publishes that. So it runs a slice ahead of the
/// producers, and its flag round trips overlap their data movement.
#[inline(always)]
unsafe fn control_lane<D: Device>(d: &D, a: &KernelArgs) {
    let (s, k) = (&a.sizing, a.k);
    let mut failed = false;
    let mut moved: Option<(u64, u64, u64)> = None;
    let mut i = 0u64;
    // Waits for the producers to finish the slice released before slice
    // `i` and publishes it.
    let finish = |i: u64, moved: Option<(u64, u64, u64)>, failed: bool| {
        if let Some(prev) = moved {
            d.await_done((i - 1) & 1);
            if !failed {
                publish(d, a, prev);
            }
        }
    };
    for c in 0..s.num_chunks {
        for step in 0..k {
            for sub in 0..NUM_SUBCHUNKS {
                if !failed {
                    failed = !wait_for_slot(d, a, c, step, sub);
                }
                d.release(i, failed);
                finish(i, moved, failed);
                moved = Some((c, step, sub));
                i += 1;
            }
        }
    }
    finish(i, moved, failed);

    // The predecessor's last signal lands in our flag; only once it has can
    // we reset the flags for the next collective and clear our slot.
    if !failed {
        let last = s.final_new_data_value(k);
        let site = WaitSite {
            kind: WaitKind::FinalData,
            chunk: s.num_chunks,
            step: 0,
            sub: 0,
            expected: last,
        };
        if wait_until(d, WaitCtx::of(a), a.this_new_data, site, |v| v >= last) {
            d.store_volatile(a.this_new_data as *mut u64, 0);
            d.store_volatile(a.this_chunk_done as *mut u64, 0);
            signal(d, a.scope(), a.this_slot, 0);
        }
    }
}

/// Tells the successor about slice (c, step, sub), which every producer has
/// finished, and after the last step the predecessor that the chunk's slot
/// is free again. Once any wait gave up the control lane publishes nothing
/// more, not even the slice just moved: the ranks downstream then all time
/// out together instead of one after another.
#[inline(always)]
unsafe fn publish<D: Device>(d: &D, a: &KernelArgs, (c, step, sub): (u64, u64, u64)) {
    let k = a.k;
    if !drop_signal(a, c, step) {
        signal(
            d,
            a.scope(),
            a.next_new_data,
            Sizing::new_data_value(k, c, step, sub),
        );
    }
    if step + 1 == k && c + 1 < a.sizing.num_chunks {
        signal(
            d,
            a.scope(),
            a.prev_chunk_done,
            Sizing::chunk_done_value(c, sub),
        );
    }
}

/// A producer lane: every slice in order, each once it is released,
/// reporting each done. A released slice is skipped when the control lane
/// has given up.
#[inline(always)]
unsafe fn producer_lane<D: Device, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    a: &KernelArgs,
    tid: u64,
) {
    let (s, k) = (&a.sizing, a.k);
    let ufr = core::slice::from_raw_parts(a.user_from_ring as *const u32, k as usize);
    let sz = size_of::<T>() as u64;
    let aligned = a.aligned != 0;
    let (k32, pf) = (k as u32, a.prefetch_rounds);
    let mut i = 0u64;
    for c in 0..s.num_chunks {
        let slices = s.slices(c);
        for step in 0..k {
            let block = block_for_step(ufr, a.ring_pos, step);
            let residue = if aligned {
                block_residue(a.send_residue, block, s.n, sz)
            } else {
                0
            };
            let mut off = c * s.chunk_elems;
            for (sub, &len) in slices.iter().enumerate() {
                if !d.await_release(i) {
                    let slot = s.slot_offset(block, sub as u64) + residue;
                    let own = (a.send + (block * s.n + off) * sz) as *const T;
                    let incoming = (a.this_buffer + slot) as *const T;
                    if step == 0 {
                        let dst = (a.next_buffer + slot) as *mut T;
                        transfer::<D, T, O, THREADS, COPY>(
                            d, tid, dst, incoming, own, len, aligned, k32, pf,
                        );
                    } else if step + 1 < k {
                        let dst = (a.next_buffer + slot) as *mut T;
                        transfer::<D, T, O, THREADS, REDUCE>(
                            d, tid, dst, incoming, own, len, aligned, k32, pf,
                        );
                    } else {
                        let dst = (a.recv + off * sz) as *mut T;
                        transfer::<D, T, O, THREADS, FINAL>(
                            d, tid, dst, incoming, own, len, aligned, k32, pf,
                        );
                    }
                }
                d.arrive_done(i & 1);
                off += len;
                i += 1;
            }
        }
    }
}

/// The control lane's handshake: the predecessor has finished its previous
/// collective once it cleared its slot; announce ourselves there; wait for
/// the successor to do the same with ours. `false`: a wait gave up.
#[inline(always)]
unsafe fn handshake<D: Device>(d: &D, a: &KernelArgs) -> bool {
    let site = |kind, expected| WaitSite {
        kind,
        chunk: 0,
        step: 0,
        sub: 0,
        expected,
    };
    if !wait_until(
        d,
        WaitCtx::of(a),
        a.prev_slot,
        site(WaitKind::PrevSlotCleared, 0),
        |v| v == 0,
    ) {
        return false;
    }
    // Our own flag resets from the previous collective must be visible
    // before anyone acts on the announcement.
    signal(d, a.scope(), a.prev_slot, a.recv | 1);
    wait_until(
        d,
        WaitCtx::of(a),
        a.this_slot,
        site(WaitKind::NextAnnounced, 1),
        |v| v != 0,
    )
}

/// What the control lane must see before moving slice (c, step, sub): at step 0 the
/// successor having drained the previous chunk from that slot, later the
/// predecessor's data of the step before. `None`: nothing to wait for.
#[inline(always)]
fn slot_condition(a: &KernelArgs, c: u64, step: u64, sub: u64) -> Option<(u64, WaitSite)> {
    let (flag, kind, expected) = if step == 0 {
        if c == 0 {
            return None;
        }
        let want = Sizing::chunk_done_value(c - 1, sub);
        (a.this_chunk_done, WaitKind::ChunkDone, want)
    } else {
        let want = Sizing::new_data_value(a.k, c, step - 1, sub);
        (a.this_new_data, WaitKind::NewData, want)
    };
    let site = WaitSite {
        kind,
        chunk: c,
        step,
        sub,
        expected,
    };
    Some((flag, site))
}

/// The control lane's wait before moving slice (c, step, sub).
#[inline(always)]
unsafe fn wait_for_slot<D: Device>(d: &D, a: &KernelArgs, c: u64, step: u64, sub: u64) -> bool {
    match slot_condition(a, c, step, sub) {
        None => true,
        Some((flag, site)) => wait_until(d, WaitCtx::of(a), flag, site, |v| v >= site.expected),
    }
}

/// The fault-injection hook: from (chunk, step) on, this rank stops telling
/// its successor about new data, as a rank whose signals are lost for good
/// would. (A single lost increment of a monotonic counter is healed by the
/// next one, so only a lasting loss can stall the ring.)
#[inline(always)]
fn drop_signal(a: &KernelArgs, c: u64, step: u64) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        a.fault_chunk != u64::MAX && (c, step) >= (a.fault_chunk, a.fault_step)
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (a, c, step);
        false
    }
}
