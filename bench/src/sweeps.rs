//! One communicator's sweep: every point of every collective, each timed
//! and checked exactly against the reference, a table per collective; and,
//! with `--rematch`, `Auto` timed again beside the fastest forced
//! algorithm. Generic over the backend's `Clock`.

use crate::bufs::{fill_all, regions, shift, upload_bufs, window, Bufs};
use crate::cli::BenchArgs;
use crate::clock::Clock;
use crate::exact::FromSmall;
use crate::metrics::name;
use crate::point::{perf, with_elem, Judge, Point};
use crate::report::{AutoVsBest, Perf, Row};
use crate::table;
use indicatif::{ProgressBar, ProgressStyle};
use ringreduce::{Algo, Collective, Collectives, CommConfig, Op, RsElement};

fn progress(n: usize) -> ProgressBar {
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// With `--rematch`, `Auto` and the fastest forced algorithm at each size
/// timed again side by side (see [`crate::rematch`]); otherwise nothing.
/// `make` makes a sweep's communicator again.
pub fn rematch_all<C: Clock>(
    args: &BenchArgs,
    make: &dyn Fn(Option<Algo>) -> ringreduce::Result<C>,
    pts: &[Point],
    per_algo: &[(Option<Algo>, Vec<Row>)],
) -> Result<Vec<AutoVsBest>, String> {
    if args.rematch == 0 {
        return Ok(Vec::new());
    }
    let rows = table::compare_auto(per_algo);
    let algos: Vec<Option<Algo>> = per_algo.iter().map(|(a, _)| *a).collect();
    // The sweeps' rows stand without it: a rematch that cannot finish (a
    // device too full for two communicators) is said, not fatal.
    Ok(
        crate::rematch::rematch(args, make, &algos, pts, &rows).unwrap_or_else(|e| {
            println!("# --rematch: not completed: {e}");
            Vec::new()
        }),
    )
}

/// Whether `comm` can run algorithm `a` at all: a forced local algorithm
/// needs every rank in one launch, and `--algo all` skips it where they
/// are not (saying so).
pub fn runs_here<C: Collectives>(comm: &C, a: Option<Algo>) -> bool {
    let local = comm.algorithm_for::<f32>(Collective::AllReduce, 1);
    if a == Some(Algo::Local) && local.is_err() {
        println!("# local: not run, the ranks do not share one launch");
        return false;
    }
    true
}

/// `config` with algorithm `a` forced (`None`: as configured).
pub fn with_algo(config: &CommConfig, a: Option<Algo>) -> CommConfig {
    match a {
        Some(a) => config.clone().algorithm(a),
        None => config.clone(),
    }
}

/// The points a sweep with `a` runs: a forced two-shot is the one-shot for
/// all but the all-reduce, so only its all-reduce points.
pub fn points_for(pts: &[Point], a: Option<Algo>) -> Vec<Point> {
    pts.iter()
        .filter(|p| a != Some(Algo::TwoShot) || p.collective == Collective::AllReduce)
        .cloned()
        .collect()
}

/// Every point, one table per collective.
pub fn sweep_all<C: Clock>(
    args: &BenchArgs,
    comm: &C,
    pts: &[Point],
    judge: Judge,
    ceiling_name: &str,
) -> Result<Vec<Row>, String> {
    let pb = progress(pts.len());
    let mut rows = Vec::with_capacity(pts.len());
    let mut i = 0;
    while i < pts.len() {
        // Points come grouped by collective, then type: print a table per
        // collective, allocate once per type.
        let (c, dtype) = (pts[i].collective, pts[i].dtype);
        if i == 0 || pts[i - 1].collective != c {
            pb.suspend(|| print!("#\n# {}\n{}", name(c), table::header(ceiling_name)));
        }
        let j = pts[i..]
            .iter()
            .position(|p| p.dtype != dtype || p.collective != c)
            .map_or(pts.len(), |x| i + x);
        let r = with_elem!(dtype, T => type_sweep::<C, T>(args, comm, &pts[i..j], judge, &pb));
        rows.extend(r.map_err(|e| e.to_string())?);
        if j == pts.len() || pts[j].collective != c {
            let these: Vec<Row> = rows
                .iter()
                .filter(|r| r.collective == name(c))
                .cloned()
                .collect();
            pb.suspend(|| print!("{}", table::footer(&these)));
        }
        i = j;
    }
    pb.finish_and_clear();
    Ok(rows)
}

fn type_sweep<C: Clock, T: RsElement + FromSmall>(
    args: &BenchArgs,
    comm: &C,
    pts: &[Point],
    judge: Judge,
    pb: &ProgressBar,
) -> ringreduce::Result<Vec<Row>> {
    let k = comm.k();
    let c = pts[0].collective;
    let max_count = pts.iter().map(|p| p.count).max().unwrap_or(0);
    let (mut bufs, cap) = upload_bufs::<C, T>(comm, c, max_count)?;
    let mut rows = Vec::new();
    for p in pts {
        pb.set_message(format!(
            "{} {} {} {}B",
            name(c),
            p.dtype.name(),
            p.op.name(),
            p.size
        ));
        let n = p.count as usize;
        let (sl, rl) = c.lengths(k as u64, n as u64);
        let whole = sl.max(rl).max(1);
        let mut timed = [0.0f64; 2];
        let mut host = [None, None];
        let mut wrong = [None, None];
        for (pi, in_place) in [false, true].into_iter().enumerate() {
            let mut launch = |it: usize| {
                let sh = shift(it, whole, cap as u64) as usize;
                comm.collective(c, &mut regions(c, k, n, in_place, sh, &mut bufs), p.op)
            };
            for it in 0..args.warmup {
                launch(it)?;
            }
            let graph = match args.graph {
                true => Some(comm.capture(&mut || (0..args.iters).try_for_each(&mut launch))?),
                false => None,
            };
            let mut windows = Vec::new();
            for _ in 0..args.repeats {
                let w = match &graph {
                    Some(g) => {
                        // The first replay uploads the graph.
                        comm.replay(g)?;
                        let start = comm.mark()?;
                        comm.replay(g)?;
                        let stop = comm.mark()?;
                        (
                            comm.elapsed_us(&start, &stop)? / args.iters.max(1) as f64,
                            None,
                        )
                    }
                    None => window(args, comm, &mut launch)?,
                };
                windows.push(w);
            }
            // The median window by time, with its own host time.
            windows.sort_by(|a, b| a.0.total_cmp(&b.0));
            (timed[pi], host[pi]) = windows[windows.len() / 2];
            comm.synchronize()?;
            if args.check {
                wrong[pi] = Some(check::<C, T>(comm, c, &mut bufs, n, p.op, in_place)?);
            }
        }
        let row = Row {
            collective: name(c).into(),
            size: p.size,
            count: p.count,
            dtype: p.dtype.name().into(),
            // As nccl-tests prints it: an all-gather reduces nothing.
            op: if c == Collective::AllGather {
                "none".into()
            } else {
                p.op.name().into()
            },
            root: -1,
            channels: comm.channels_for::<T>(c, n)? as u64,
            algorithm: comm.algorithm_for::<T>(c, n)?.name().into(),
            backend: "ringreduce".into(),
            out_of_place: Perf {
                host_us: host[0],
                ..perf(k, p, timed[0], wrong[0], judge)
            },
            in_place: Perf {
                host_us: host[1],
                ..perf(k, p, timed[1], wrong[1], judge)
            },
        };
        pb.suspend(|| println!("{}", table::row(&row)));
        rows.push(row);
        pb.inc(1);
    }
    Ok(rows)
}

/// Elements whose bits differ, compared on every core (a 1 GiB output is
/// a second of one core's time).
fn count_wrong<T: bytemuck::Pod + Sync>(got: &[T], want: &[T]) -> u64 {
    let differ = |g: &[T], w: &[T]| {
        g.iter()
            .zip(w)
            .filter(|(a, b)| bytemuck::bytes_of(*a) != bytemuck::bytes_of(*b))
            .count() as u64
    };
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = got.len().div_ceil(threads).max(1 << 16);
    let wrong = std::thread::scope(|s| {
        let hs: Vec<_> = got
            .chunks(per)
            .zip(want.chunks(per))
            .map(|(g, w)| s.spawn(move || differ(g, w)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("check thread"))
            .sum::<u64>()
    });
    wrong + got.len().abs_diff(want.len()) as u64
}

/// Runs the collective once more on exact-check inputs (any fold order
/// gives the same bits) and counts the output elements that differ from
/// the reference.
fn check<C: Clock, T: RsElement + FromSmall>(
    comm: &C,
    c: Collective,
    bufs: &mut Bufs<C::Buf<T>>,
    n: usize,
    op: Op,
    in_place: bool,
) -> ringreduce::Result<u64> {
    let k = comm.k();
    if n == 0 {
        return Ok(0);
    }
    let (sl, rl) = c.lengths(k as u64, n as u64);
    let (send_len, recv_len) = (sl as usize, rl as usize);
    let inputs = fill_all::<T>(op, k, send_len, 7);
    // In place, the buffer that holds every block (see `regions`).
    let pool_is_recv = in_place && c == Collective::AllGather;
    let at = |u: usize| {
        let (input, output) = c.in_place_offsets(u as u64, n as u64);
        if in_place {
            (input as usize, output as usize)
        } else {
            (0, 0)
        }
    };
    // Every rank's inputs make the reference; a job's process writes and
    // reads its own ranks' buffers only (`bufs` holds those).
    let local = comm.local_ranks();
    for (i, u) in local.clone().enumerate() {
        let buf = if pool_is_recv {
            &mut bufs.recv[i]
        } else {
            &mut bufs.send[i]
        };
        comm.write(u, buf, at(u).0, &inputs[u])?;
    }
    comm.collective(c, &mut regions(c, k, n, in_place, 0, bufs), op)?;
    comm.synchronize()?;
    let refs: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
    let want = comm.want(c, n, &refs, op)?;
    let mut wrong = 0;
    for (i, u) in local.enumerate() {
        let out = at(u).1;
        let buf = if in_place && !pool_is_recv {
            &bufs.send[i]
        } else {
            &bufs.recv[i]
        };
        let got = comm.read(u, buf, out..out + recv_len)?;
        wrong += count_wrong(&got, &want[u]);
    }
    Ok(wrong)
}
