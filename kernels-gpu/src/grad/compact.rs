//! Stream compaction in index order, then the scatter-add. The elements are
//! cut into fixed tiles ([`tiles_for`](crate::abi::tiles_for)); a pass
//! counts each tile's magnitudes above and equal to the threshold, one
//! block turns the counts into offsets, and a last pass writes each tile's
//! selection at its offset. An element is selected if its magnitude is
//! above the threshold, or equal to it and among the first `take_equal`
//! such by index; so its place is (above before it) + min(equal before it,
//! take_equal), and the result does not depend on the lanes.
//!
//! Where every tie is taken (top-K's threshold names the K-th magnitude
//! exactly, so nearly always), no place depends on the elements before it:
//! [`write_any_order`] writes the pairs in one coalesced pass instead, each
//! warp reserving its slots with one atomic, and the ordered tasks after it
//! do nothing. The order of one rank's pairs changes no bit of a
//! scatter-add, since they name distinct elements.

use super::lanes::Lanes;
use super::{all_aligned, each_round, for_each_index, map_quads, Quad};
use crate::grad::abi::{magnitude, tile_range, SelectState, Task, PAD_INDEX, SCAN_LANES};
use crate::unroll::each4;

/// Tiles `lane, lane + lanes, …` of the task.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn for_each_tile<L: Lanes>(g: &L, t: &Task, mut f: impl FnMut(u64, u64, u64)) {
    let mut tile = g.lane();
    while tile < t.tiles {
        let (a, b) = tile_range(tile, t.tiles, t.n);
        f(tile, a, b);
        tile += g.lanes();
    }
}

/// `f(i, bits)` for each element `i` of `a..b` of `src`, in order: where
/// `src` allows, sixteen at a time from four 16-byte loads issued together,
/// so that a lane walking its tile alone keeps 64 bytes in flight, where
/// one 4-byte load at a time left the pass latency-bound.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn walk<L: Lanes>(g: &L, src: *const u32, a: u64, b: u64, mut f: impl FnMut(u64, u32)) {
    let mut i = a;
    while i < b && !(src.add(i as usize) as usize).is_multiple_of(16) {
        f(i, src.add(i as usize).read());
        i += 1;
    }
    while i + 16 <= b {
        let x = [0usize, 4, 8, 12].map(|o| g.load_pack(src.add(i as usize + o) as *const u8));
        each4!(o => each4!(j => f(i + (4 * o + j) as u64, x[o][j])));
        i += 16;
    }
    while i < b {
        f(i, src.add(i as usize).read());
        i += 1;
    }
}

/// Each tile's (above, equal) counts into `aux`.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn count_tiles<L: Lanes>(g: &L, t: &Task) {
    if written(t) {
        return;
    }
    let th = (*(t.state as *const SelectState)).threshold;
    let (src, counts) = (t.src as *const u32, t.aux as *mut u64);
    for_each_tile(g, t, |tile, a, b| {
        let (mut above, mut equal) = (0u64, 0u64);
        walk(g, src, a, b, |_, bits| {
            let m = magnitude(bits) as u64;
            above += (m > th) as u64;
            equal += (m == th) as u64;
        });
        counts.add(2 * tile as usize).write(above);
        counts.add(2 * tile as usize + 1).write(equal);
    });
}

/// `f(tile, counts)` over the tiles of `run`, in order, with the (above,
/// equal) counts of up to four tiles read before `f` sees them: the scan is
/// one block, so its loads are what it waits on.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
unsafe fn for_each_run_four(
    counts: *const u64,
    run: (u64, u64),
    mut f: impl FnMut(u64, &[[u64; 2]]),
) {
    let read = |tile: u64| {
        let p = counts.add(2 * tile as usize);
        [p.read(), p.add(1).read()]
    };
    let mut tile = run.0;
    while tile + 4 <= run.1 {
        let c = [0, 1, 2, 3].map(|j| read(tile + j));
        f(tile, &c);
        tile += 4;
    }
    while tile < run.1 {
        f(tile, &[read(tile)]);
        tile += 1;
    }
}

/// The tile counts to exclusive offsets, in three phases of one block: each
/// lane sums a contiguous run of tiles, lane 0 scans those sums and sets
/// the selected count, each lane rewrites its run.
///
/// # Safety
/// As for [`super::run_phase`]; one block only.
pub unsafe fn scan_tiles<L: Lanes>(g: &L, t: &Task, phase: u32) {
    if written(t) {
        return;
    }
    let s = t.state as *mut SelectState;
    let counts = t.aux as *mut u64;
    let lanes = if g.lanes() < SCAN_LANES as u64 {
        g.lanes()
    } else {
        SCAN_LANES as u64
    };
    let lane = g.lane();
    if lane >= lanes {
        return;
    }
    let run = (lane * t.tiles / lanes, (lane + 1) * t.tiles / lanes);
    let totals = core::ptr::addr_of_mut!((*s).lane_totals) as *mut [u64; 2];
    match phase {
        0 => {
            let mut sum = [0u64; 2];
            for_each_run_four(counts, run, |_, c| {
                for [above, equal] in c {
                    sum = [sum[0] + above, sum[1] + equal];
                }
            });
            totals.add(lane as usize).write(sum);
        }
        1 if lane == 0 => {
            let mut at = [0u64; 2];
            for l in 0..lanes as usize {
                let sum = totals.add(l).read();
                totals.add(l).write(at);
                at = [at[0] + sum[0], at[1] + sum[1]];
            }
            let take = if at[1] < (*s).take_equal {
                at[1]
            } else {
                (*s).take_equal
            };
            (*s).count = at[0] + take;
        }
        2 => {
            let mut at = totals.add(lane as usize).read();
            for_each_run_four(counts, run, |tile, c| {
                for (j, &[above, equal]) in c.iter().enumerate() {
                    let p = counts.add(2 * (tile as usize + j));
                    p.write(at[0]);
                    p.add(1).write(at[1]);
                    at = [at[0] + above, at[1] + equal];
                }
            });
        }
        _ => {}
    }
}

/// Writes the selection of `src`: as `(index, value bits)` pairs at `dst`,
/// padded with [`PAD_INDEX`] pairs to `arg` (pairs past `arg` are dropped),
/// or with `arg == u64::MAX` as a dense array (zeros elsewhere). With `aux2`
/// not 0, the residual (0 where sent, the value elsewhere): with pairs only
/// of the elements tied with the threshold, since each lane walks its own
/// tile and its stores would not coalesce ([`residual_untied`] writes the
/// rest); dense, of every element, since `dst` may be `src` there.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn write_selected<L: Lanes>(g: &L, t: &Task) {
    let s = t.state as *const SelectState;
    let (th, take) = ((*s).threshold, (*s).take_equal);
    let (src, offsets) = (t.src as *const u32, t.aux as *const u64);
    let residual = t.aux2 as *mut f32;
    let dense = t.arg == u64::MAX;
    let walk_tiles = |f| {
        if !written(t) {
            for_each_tile(g, t, f)
        }
    };
    walk_tiles(|tile, a, b| {
        let mut above = offsets.add(2 * tile as usize).read();
        let mut equal = offsets.add(2 * tile as usize + 1).read();
        walk(g, src, a, b, |i, bits| {
            let m = magnitude(bits) as u64;
            let sel = m > th || (m == th && equal < take);
            if dense {
                (t.dst as *mut u32)
                    .add(i as usize)
                    .write(if sel { bits } else { 0 });
            } else if sel {
                let at = above + if equal < take { equal } else { take };
                if at < t.arg {
                    (t.dst as *mut u64)
                        .add(at as usize)
                        .write(i | ((bits as u64) << 32));
                }
            }
            if !residual.is_null() && (dense || m == th) {
                residual
                    .add(i as usize)
                    .write(if sel { 0.0 } else { f32::from_bits(bits) });
            }
            above += (m > th) as u64;
            equal += (m == th) as u64;
        });
    });
    if !dense {
        let count = (*s).count;
        let pads = t.arg.saturating_sub(count);
        for_each_index(g, pads, |j| {
            (t.dst as *mut u64)
                .add((count + j) as usize)
                .write(PAD_INDEX as u64);
        });
    }
}

/// The residual `aux2` of every element of `src` whose magnitude is not
/// the threshold's: 0 above it (sent), the value below it.
///
/// # Safety
/// As for [`super::run_phase`]; `aux2` may not overlap `src`.
pub unsafe fn residual_untied<L: Lanes>(g: &L, t: &Task) {
    if written(t) {
        return;
    }
    let th = (*(t.state as *const SelectState)).threshold;
    let (src, res) = (t.src as *const u32, t.aux2 as *mut u32);
    let keep = |bits: u32| if magnitude(bits) as u64 > th { 0 } else { bits };
    map_quads(
        g,
        t.n,
        all_aligned(&[(t.src, 16), (t.aux2, 16)]),
        |i| (src.add(i as usize) as *const Quad<u32>).read().0,
        |i, x| {
            if x.iter().all(|&b| magnitude(b) as u64 != th) {
                (res.add(i as usize) as *mut Quad<u32>).write(Quad(x.map(keep)));
            } else {
                for (j, &b) in x.iter().enumerate() {
                    if magnitude(b) as u64 != th {
                        res.add(i as usize + j).write(keep(b));
                    }
                }
            }
        },
        |i| {
            let b = src.add(i as usize).read();
            if magnitude(b) as u64 != th {
                res.add(i as usize).write(keep(b));
            }
        },
    );
}

/// Whether [`write_any_order`] wrote the selection of `t`'s state, so that
/// the ordered compaction has nothing to do.
///
/// # Safety
/// `t.state` must be a valid [`SelectState`].
unsafe fn written(t: &Task) -> bool {
    (*(t.state as *const SelectState)).unordered != 0
}

/// Where the selection takes every element tied with its threshold (so an
/// element is selected exactly when its magnitude reaches it): the pairs
/// of `src` at `dst` in the order the warps reserve them (the first `arg`
/// reserved), their count in the state, and with `aux2` not 0 every
/// element's residual, coalesced; then marks the state written. Otherwise
/// nothing: the ordered tasks must rank the ties by index.
///
/// # Safety
/// As for [`super::run_phase`]; the state's count at 0 (a selection just
/// made); `aux2` may not overlap `src`.
pub unsafe fn write_any_order<L: Lanes>(g: &L, t: &Task) {
    let s = t.state as *mut SelectState;
    if (*s).take_equal < (*s).ties {
        return;
    }
    let th = (*s).threshold;
    let sel = |bits: u32| magnitude(bits) as u64 >= th;
    let keep = |bits: u32| if sel(bits) { 0 } else { bits };
    let (pairs, res) = (t.dst as *mut u64, t.aux2 as *mut u32);
    let count = core::ptr::addr_of_mut!((*s).count);
    let put = |slot: u64, i: u64, bits: u32| {
        if slot < t.arg {
            pairs.add(slot as usize).write(i | ((bits as u64) << 32));
        }
    };
    let res_quads = all_aligned(&[(t.aux2, 16)]);
    each_round(
        g,
        t.src,
        t.n,
        |x, qs| {
            let mut want = 0u32;
            each4!(o => if qs[o].is_some() {
                each4!(j => want += sel(x[o][j]) as u32);
            });
            let mut slot = g.reserve(count, want);
            each4!(o => if let Some(q) = qs[o] {
                let i = 4 * q;
                each4!(j => if sel(x[o][j]) {
                    put(slot, i + j as u64, x[o][j]);
                    slot += 1;
                });
                if !res.is_null() && res_quads {
                    g.store_pack(res.add(i as usize) as *mut u8, x[o].map(keep));
                } else if !res.is_null() {
                    each4!(j => res.add(i as usize + j).write(keep(x[o][j])));
                }
            });
        },
        |w| {
            let chosen = w.filter(|&(_, bits)| sel(bits));
            let slot = g.reserve(count, chosen.is_some() as u32);
            if let Some((i, bits)) = chosen {
                put(slot, i, bits);
            }
            if let (Some((i, bits)), false) = (w, res.is_null()) {
                res.add(i as usize).write(keep(bits));
            }
        },
    );
    if g.lane() == 0 {
        (*s).unordered = 1;
    }
}

/// `dst[index - aux] += value` for the `n` pairs at `src` whose index is
/// in `aux..arg` (one rank's: their indices are distinct, so lanes never
/// add to one element together): a rank may rebuild one range of what the
/// pairs index, such as a peer's shard or the shared tail.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn scatter_add<L: Lanes>(g: &L, t: &Task) {
    let (pairs, dst) = (t.src as *const u64, t.dst as *mut f32);
    for_each_index(g, t.n, |j| {
        let p = pairs.add(j as usize).read();
        let index = p as u32 as u64;
        if index != PAD_INDEX as u64 && (t.aux..t.arg).contains(&index) {
            let d = dst.add((index - t.aux) as usize);
            d.write(d.read() + f32::from_bits((p >> 32) as u32));
        }
    });
}
