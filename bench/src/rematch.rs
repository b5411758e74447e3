//! `Auto` against the fastest forced algorithm, timed again side by side.
//!
//! `--algo all` times each algorithm's sweep minutes after the one before,
//! and a machine that drifts in between made two sweeps of one kernel
//! differ by up to 1.43x (twenty-fourth session). Timing `Auto` and the
//! fastest forced algorithm in alternating windows at each size cancels
//! such drift, so the ratio judges the choice, not the machine.

use crate::cli::BenchArgs;
use crate::clock::Clock;
use crate::exact::FromSmall;
use crate::metrics::name;
use crate::run::{fill_all, regions, shift, window, with_elem, Bufs, Point};
use crate::table::AutoVsBest;
use ringreduce::{Algo, Op, RsElement};

/// Every row of `rows` (from [`crate::table::compare_auto`]) timed again:
/// `comms[i]` is the communicator sweep `i` ran on, `pts` the sweep's
/// points. Each placement gets `args.rematch` windows of `args.iters`
/// calls per side, the two sides taking turns to go first; a side's time
/// is the median window's, averaged over the two placements.
pub fn rematch<C: Clock>(
    args: &BenchArgs,
    comms: &[(Option<Algo>, C)],
    pts: &[Point],
    rows: &[AutoVsBest],
) -> ringreduce::Result<Vec<AutoVsBest>> {
    let mut out = Vec::with_capacity(rows.len());
    let mut i = 0;
    while i < rows.len() {
        // Rows come grouped by collective: buffers once per group, sized
        // as the sweep sized them, so that the shifting matches.
        let j = rows[i..]
            .iter()
            .position(|r| r.collective != rows[i].collective)
            .map_or(rows.len(), |x| i + x);
        let group: Vec<&Point> = pts
            .iter()
            .filter(|p| name(p.collective) == rows[i].collective)
            .collect();
        let Some(first) = group.first() else {
            i = j;
            continue;
        };
        let max_count = group.iter().map(|p| p.count).max().unwrap_or(0);
        let r = with_elem!(first.dtype, T => group_rematch::<C, T>(
            args, comms, &group, max_count, &rows[i..j]
        ));
        out.extend(r?);
        i = j;
    }
    Ok(out)
}

fn group_rematch<C: Clock, T: RsElement + FromSmall>(
    args: &BenchArgs,
    comms: &[(Option<Algo>, C)],
    pts: &[&Point],
    max_count: u64,
    rows: &[AutoVsBest],
) -> ringreduce::Result<Vec<AutoVsBest>> {
    let c = pts[0].collective;
    let auto = &comms[rows[0].sweeps.0].1;
    let k = auto.k();
    let (send_cap, recv_cap) = c.lengths(k as u64, max_count);
    let cap = send_cap.max(recv_cap).max(1) as usize;
    // Both communicators drive the same ranks of one device, and each
    // window ends with a mark the host waits for, so they share buffers.
    let mut bufs = Bufs {
        send: Vec::with_capacity(k),
        recv: Vec::with_capacity(k),
    };
    for (u, data) in fill_all::<T>(Op::Sum, k, cap, 1).iter().enumerate() {
        bufs.send.push(auto.upload(u, data)?);
        bufs.recv.push(auto.upload(u, data)?);
    }
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(p) = pts.iter().find(|p| p.size == row.size) else {
            continue;
        };
        let best = &comms[row.sweeps.1].1;
        let n = p.count as usize;
        let (sl, rl) = c.lengths(k as u64, n as u64);
        let whole = sl.max(rl).max(1);
        let mut times = [[0.0f64; 2]; 2];
        for (pi, in_place) in [false, true].into_iter().enumerate() {
            let mut side = [Vec::new(), Vec::new()];
            let mut launch = |comm: &C, it: usize| {
                let sh = shift(it, whole, cap as u64) as usize;
                comm.collective(c, &mut regions(c, k, n, in_place, sh, &mut bufs), p.op)
            };
            for comm in [auto, best] {
                for it in 0..args.warmup {
                    launch(comm, it)?;
                }
            }
            for w in 0..args.rematch {
                // Taking turns to go first, so that neither side always
                // follows the other's tail.
                let order = if w % 2 == 0 { [0, 1] } else { [1, 0] };
                for s in order {
                    let comm = [auto, best][s];
                    side[s].push(window(args, comm, &mut |it| launch(comm, it))?.0);
                }
            }
            auto.synchronize()?;
            best.synchronize()?;
            for s in 0..2 {
                side[s].sort_by(f64::total_cmp);
                times[s][pi] = side[s].get(side[s].len() / 2).copied().unwrap_or(0.0);
            }
        }
        out.push(AutoVsBest {
            auto_us: (times[0][0] + times[0][1]) / 2.0,
            best_us: (times[1][0] + times[1][1]) / 2.0,
            ..row.clone()
        });
    }
    Ok(out)
}
