//! Stream compaction in index order, then the scatter-add. The elements are
//! cut into fixed tiles ([`tiles_for`](crate::abi::tiles_for)); a pass
//! counts each tile's magnitudes above and equal to the threshold, one
//! block turns the counts into offsets, and a last pass writes each tile's
//! selection at its offset. An element is selected if its magnitude is
//! above the threshold, or equal to it and among the first `take_equal`
//! such by index; so its place is (above before it) + min(equal before it,
//! take_equal), and the result does not depend on the lanes.

use super::lanes::Lanes;
use super::{all_aligned, for_each_index, for_each_quad, Quad};
use crate::grad::abi::{magnitude, tile_range, SelectState, Task, PAD_INDEX, SCAN_LANES};

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

/// Each tile's (above, equal) counts into `aux`.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn count_tiles<L: Lanes>(g: &L, t: &Task) {
    let th = (*(t.state as *const SelectState)).threshold;
    let (src, counts) = (t.src as *const u32, t.aux as *mut u64);
    for_each_tile(g, t, |tile, a, b| {
        let (mut above, mut equal) = (0u64, 0u64);
        for i in a..b {
            let m = magnitude(src.add(i as usize).read()) as u64;
            above += (m > th) as u64;
            equal += (m == th) as u64;
        }
        counts.add(2 * tile as usize).write(above);
        counts.add(2 * tile as usize + 1).write(equal);
    });
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
            for tile in run.0..run.1 {
                sum[0] += counts.add(2 * tile as usize).read();
                sum[1] += counts.add(2 * tile as usize + 1).read();
            }
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
            for tile in run.0..run.1 {
                let c = [
                    counts.add(2 * tile as usize).read(),
                    counts.add(2 * tile as usize + 1).read(),
                ];
                counts.add(2 * tile as usize).write(at[0]);
                counts.add(2 * tile as usize + 1).write(at[1]);
                at = [at[0] + c[0], at[1] + c[1]];
            }
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
        for i in a..b {
            let bits = src.add(i as usize).read();
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
        }
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
    for_each_quad(
        g,
        t.n,
        all_aligned(&[(t.src, 16), (t.aux2, 16)]),
        |i| {
            let x = (src.add(i as usize) as *const Quad<u32>).read().0;
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
