//! Stream compaction in index order, then the scatter-add. The elements are
//! cut into fixed tiles ([`tiles_for`](crate::abi::tiles_for)); a pass
//! counts each tile's magnitudes above and equal to the threshold, one
//! block turns the counts into offsets, and a last pass writes each tile's
//! selection at its offset. An element is selected if its magnitude is
//! above the threshold, or equal to it and among the first `take_equal`
//! such by index; so its place is (above before it) + min(equal before it,
//! take_equal), and the result does not depend on the lanes.

use super::lanes::Lanes;
use super::{all_aligned, for_each_index, map_quads, Quad};
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
    for_each_tile(g, t, |tile, a, b| {
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

/// `dst[index] += value` for the `n` pairs at `src` (one rank's: their
/// indices are distinct, so lanes never add to one element together).
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn scatter_add<L: Lanes>(g: &L, t: &Task) {
    let (pairs, dst) = (t.src as *const u64, t.dst as *mut f32);
    for_each_index(g, t.n, |j| {
        let p = pairs.add(j as usize).read();
        let index = p as u32;
        if index != PAD_INDEX && (index as u64) < t.arg {
            let d = dst.add(index as usize);
            d.write(d.read() + f32::from_bits((p >> 32) as u32));
        }
    });
}
