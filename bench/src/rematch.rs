//! `Auto` against the fastest forced algorithm, timed again side by side.
//!
//! `--algo all` times each algorithm's sweep minutes after the one before,
//! and a machine that drifts in between made two sweeps of one kernel
//! differ by up to 1.43x (2026-12-06, the producers' registers freed). Timing `Auto` and the
//! fastest forced algorithm in alternating windows at each size cancels
//! such drift, so the ratio judges the choice, not the machine.

use crate::bufs::{regions, shift, upload_bufs, window};
use crate::ceilings::median;
use crate::cli::BenchArgs;
use crate::clock::Clock;
use crate::exact::FromSmall;
use crate::metrics::name;
use crate::point::{with_elem, Point};
use crate::report::AutoVsBest;
use ringreduce::{Algo, Collective, RsElement};

/// Every row of `rows` (from [`crate::table::compare_auto`]) timed again,
/// in the same order. `make(algos[i])` makes a communicator configured as
/// sweep `i`'s was; only `Auto`'s and one forced algorithm's are alive at
/// a time, so that sizes whose staging fills the device can be timed again.
/// `pts` are the sweeps' points. Each placement gets `args.rematch`
/// windows of `args.iters` calls per side, the two sides taking turns to
/// go first; a side's time is its median window's, averaged over the two
/// placements.
pub fn rematch<C: Clock>(
    args: &BenchArgs,
    make: &dyn Fn(Option<Algo>) -> ringreduce::Result<C>,
    algos: &[Option<Algo>],
    pts: &[Point],
    rows: &[AutoVsBest],
) -> ringreduce::Result<Vec<AutoVsBest>> {
    let mut out: Vec<Option<AutoVsBest>> = vec![None; rows.len()];
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let auto = make(algos[first.sweeps.0])?;
    let mut bests: Vec<usize> = rows.iter().map(|r| r.sweeps.1).collect();
    bests.sort_unstable();
    bests.dedup();
    for b in bests {
        let best = make(algos[b])?;
        // Buffers once per collective.
        for c in Collective::ALL {
            let these: Vec<usize> = (0..rows.len())
                .filter(|&i| rows[i].sweeps.1 == b && rows[i].collective == name(c))
                .collect();
            let group: Vec<&Point> = pts.iter().filter(|p| p.collective == c).collect();
            let Some(p0) = group.first() else {
                continue;
            };
            if these.is_empty() {
                continue;
            }
            let times = with_elem!(p0.dtype, T => time_group::<C, T>(
                args, [&auto, &best], &group, these.iter().map(|&i| rows[i].size)
            ))?;
            for (&i, (auto_us, best_us)) in
                these.iter().zip(times).filter_map(|(i, t)| Some((i, t?)))
            {
                out[i] = Some(AutoVsBest {
                    auto_us,
                    best_us,
                    ..rows[i].clone()
                });
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// `Auto`'s and the forced algorithm's times (µs, mean of both
/// placements) at each of `sizes` (`None` for a size no point has), all
/// of one collective and type.
fn time_group<C: Clock, T: RsElement + FromSmall>(
    args: &BenchArgs,
    [auto, best]: [&C; 2],
    pts: &[&Point],
    sizes: impl Iterator<Item = u64>,
) -> ringreduce::Result<Vec<Option<(f64, f64)>>> {
    let c = pts[0].collective;
    let k = auto.k();
    // Sized as the sweep sized them, so that the shifting matches. Both
    // communicators drive the same ranks, and each window ends with a mark
    // the host waits for, so they share buffers.
    let max_count = pts.iter().map(|p| p.count).max().unwrap_or(0);
    let (mut bufs, cap) = upload_bufs::<C, T>(auto, c, max_count)?;
    let mut out = Vec::new();
    for size in sizes {
        let Some(p) = pts.iter().find(|p| p.size == size) else {
            out.push(None);
            continue;
        };
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
            // `rematch_all` runs this only with `args.rematch > 0`, so
            // neither side is empty.
            for (s, windows) in side.into_iter().enumerate() {
                times[s][pi] = median(windows);
            }
        }
        out.push(Some((
            (times[0][0] + times[0][1]) / 2.0,
            (times[1][0] + times[1][1]) / 2.0,
        )));
    }
    Ok(out)
}
