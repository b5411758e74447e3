//! Running a sweep, written once against the library's `Collectives`
//! trait: on the GPU (virtual ranks, or one rank per GPU), or on the CPU
//! execution when there is no GPU (or `--cpu`).

use crate::bufs::{fill_all, regions, shift, upload_bufs, window, Bufs};
use crate::ceilings;
use crate::cli::{AlgoArg, BenchArgs};
use crate::clock::Clock;
use crate::exact::FromSmall;
use crate::metrics::name;
use crate::nccl;
use crate::plot;
use crate::point::{perf, points, with_elem, Judge, Point};
use crate::report::{now_iso, AutoVsBest, Perf, Report, Row, SCHEMA_VERSION};
use crate::sizes::sweep;
use crate::table;
use cudarc::driver::sys;
use indicatif::{ProgressBar, ProgressStyle};
use ringreduce::{
    reference, Algo, Collective, Collectives, CommConfig, Communicator, CpuCommunicator, Op,
    RingOrder, RsElement,
};

/// Largest size the CPU execution sweeps to: it exists to show the runner
/// works, not to measure anything.
pub const CPU_MAX_BYTES: u64 = 4 << 20;
/// Bytes the copy ceilings move: far beyond any L2 cache.
pub const CEILING_COPY_BYTES: u64 = 1 << 30;

fn progress(n: usize) -> ProgressBar {
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// Runs the bench and returns the process exit code.
pub fn run(args: BenchArgs, argv: Vec<String>) -> i32 {
    match run_inner(&args, argv) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ringreduce-bench: {e}");
            2
        }
    }
}

fn run_inner(args: &BenchArgs, argv: Vec<String>) -> Result<i32, String> {
    if let (Some(json), Some(png)) = (&args.replot, &args.plot) {
        let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
        let report: Report =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
        plot::draw(&report, png)?;
        return Ok(0);
    }
    if args.ranks == 0 {
        return Err("-g must be at least 1".into());
    }
    // Every argument is checked before anything is printed.
    if args.rematch > 0 && args.algo != Some(AlgoArg::All) {
        return Err("--rematch needs --algo all".into());
    }
    args.dtypes()?;
    args.ops()?;
    sweep(args.min_bytes, args.max_bytes, args.factor, args.increment)?;
    RingOrder::for_ranks(args.ring_order.as_deref(), args.ranks).map_err(|e| e.to_string())?;
    let gpus = ringreduce::gpu::device_count();
    let use_gpu = !args.cpu && matches!(gpus, Ok(n) if n > 0);
    let mut max = args.max_bytes;
    let mut min = args.min_bytes;
    if !use_gpu {
        let why = if args.cpu {
            "--cpu was given".to_string()
        } else {
            match &gpus {
                Ok(_) => "the CUDA driver reports no GPU".to_string(),
                Err(e) => e.to_string(),
            }
        };
        println!("# ================================================================");
        println!("# NO GPU: {why}.");
        println!("# Running the CPU execution of the same kernels (OS threads, not a GPU).");
        println!("# These figures are NOT GPU figures; they only show the runner works.");
        println!("# ================================================================");
        if max > CPU_MAX_BYTES {
            println!("# Sizes capped at {CPU_MAX_BYTES} bytes for the CPU execution.");
            max = CPU_MAX_BYTES;
            min = min.min(max);
        }
    }
    if args.graph && (!use_gpu || args.blocking || args.vs_nccl) {
        return Err("--graph needs a GPU, and neither -z 1 nor --vs-nccl".into());
    }
    let sizes = sweep(min, max, args.factor, args.increment)?;
    let pts = points(args, &sizes)?;
    let ring =
        RingOrder::for_ranks(args.ring_order.as_deref(), args.ranks).map_err(|e| e.to_string())?;
    let mut config = CommConfig::default().watchdog(!args.no_watchdog);
    if let Some(b) = args.buffsize {
        config = config.buffer_bytes(b);
    }
    if let Some(r) = args.prefetch {
        config = config.prefetch_rounds(r);
    }
    if let Some(c) = args.channels {
        config = config.channels(c);
    }
    if let Some(AlgoArg::One(a)) = args.algo {
        config = config.algorithm(a);
    }
    if let Some(b) = args.direct_bytes {
        config = config.direct_bytes(b);
    }
    // Without --ring-order, a ring over several GPUs follows their links.
    if args.ring_order.is_some() {
        config = config.ring_order(ring.user_from_ring().to_vec());
    }

    if args.collective.is_grad() {
        return grad_main(args, argv, use_gpu, &sizes, &config);
    }

    let mut report = Report {
        schema: SCHEMA_VERSION,
        tool: "ringreduce-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command_line: argv,
        date: now_iso(),
        execution: if use_gpu { "gpu" } else { "cpu" }.into(),
        device: "CPU execution".into(),
        driver_version: "-".into(),
        kernels: "-".into(),
        collective: args.collective.name().into(),
        ranks: args.ranks,
        iters: args.iters,
        warmup: args.warmup,
        repeats: args.repeats,
        blocking: args.blocking,
        graph: args.graph,
        buffsize: 0,
        channels: args.channels,
        algorithm: match args.algo {
            Some(AlgoArg::All) => "all".into(),
            _ => config
                .effective_algorithm()
                .map_err(|e| e.to_string())?
                .name()
                .into(),
        },
        ring_order: ring.user_from_ring().to_vec(),
        devices: vec![],
        prefetch_rounds: config.effective_prefetch_rounds(),
        ceilings: None,
        rows: vec![],
        nccl_rows: vec![],
        nccl_note: None,
        out_of_bounds: 0,
        avg_busbw: 0.0,
        auto_rematch: vec![],
    };

    let mut per_algo: Vec<(Option<Algo>, Vec<Row>)> = Vec::new();
    let rematched;
    if use_gpu {
        let ctx = ringreduce::gpu::open_device(0).map_err(|e| e.to_string())?;
        report.device = ctx.name().map_err(|e| e.to_string())?;
        report.driver_version = driver_version();
        // SAFETY: the ceilings synchronise their own streams.
        unsafe { ctx.disable_event_tracking() };
        let c = ceilings::measure(&ctx, CEILING_COPY_BYTES).map_err(|e| e.to_string())?;
        // The ceilings loaded the device's kernels.
        report.kernels = ringreduce::gpu::module::kernel_image(ctx.ordinal())
            .map_or_else(|| "-".into(), |i| i.to_string());
        let devices = placement(args.ranks, *gpus.as_ref().unwrap_or(&1));
        let ranks_here = devices.iter().filter(|&&d| d == devices[0]).count();
        report.devices = devices.clone();
        let judge = Judge {
            ceilings: Some(&c),
            busbw_ceiling: Some(c.block_copy_gbps),
            ranks_here,
        };
        let make = |a: Option<Algo>| -> ringreduce::Result<Communicator> {
            let comm = Communicator::with_placement(&devices, with_algo(&config, a))?;
            // The bench times launches back to back; cudarc's per-buffer
            // event tracking would add two driver calls per buffer to every
            // one (a context object each: the communicator's, not the one
            // above), and a graph capture cannot wait on the uploads' events.
            for u in 0..args.ranks {
                // SAFETY: the bench synchronises its streams itself.
                unsafe { comm.context(u).disable_event_tracking() };
            }
            Ok(comm)
        };
        for (i, a) in args.algos().into_iter().enumerate() {
            let comm = make(a).map_err(|e| e.to_string())?;
            if !runs_here(&comm, a) {
                continue;
            }
            if i == 0 {
                report.ring_order = comm.ring_order().user_from_ring().to_vec();
                report.buffsize = comm.staging_bytes();
                print!("{}", table::preamble(&report));
                print!("{}", table::ceilings(&c));
            }
            let rows = sweep_all(args, &comm, &points_for(&pts, a), judge, "1-block copy")?;
            per_algo.push((a, rows));
        }
        report.ceilings = Some(c);
        rematched = rematch_all(args, &make, &pts, &per_algo)?;
    } else {
        let judge = Judge {
            ceilings: None,
            busbw_ceiling: None,
            ranks_here: args.ranks,
        };
        let make = |a| CpuCommunicator::with_config(args.ranks, with_algo(&config, a));
        for (i, a) in args.algos().into_iter().enumerate() {
            let comm = make(a).map_err(|e| e.to_string())?;
            if !runs_here(&comm, a) {
                continue;
            }
            if i == 0 {
                report.buffsize = comm.staging_bytes();
                print!("{}", table::preamble(&report));
            }
            let rows = sweep_all(args, &comm, &points_for(&pts, a), judge, "(none: CPU)")?;
            per_algo.push((a, rows));
        }
        rematched = rematch_all(args, &make, &pts, &per_algo)?;
    }
    if args.algo == Some(AlgoArg::All) {
        let how = "mean of out-of-place and in-place";
        print!(
            "{}",
            table::auto_vs_best(&table::compare_auto(&per_algo), how)
        );
    }
    if !rematched.is_empty() {
        let how = format!(
            "timed again in {} alternating windows per placement, mean of both",
            args.rematch
        );
        print!("{}", table::auto_vs_best(&rematched, &how));
    }
    report.auto_rematch = rematched;
    report.rows = per_algo.into_iter().flat_map(|(_, rows)| rows).collect();

    if args.vs_nccl {
        let devices = gpus.as_ref().copied().unwrap_or(0);
        match nccl::availability(args.ranks, devices, use_gpu) {
            Err(note) => {
                println!("# --vs-nccl: {note}");
                report.nccl_note = Some(note);
            }
            Ok(()) => {
                let judge = Judge {
                    ceilings: report.ceilings.as_ref(),
                    busbw_ceiling: report.ceilings.as_ref().map(|c| c.device_copy_gbps),
                    ranks_here: 1,
                };
                let rows = nccl::sweep(args, &pts, judge)?;
                println!("# NCCL, same sweep, same process:");
                print!("{}", table::header("device copy"));
                for r in &rows {
                    println!("{}", table::row(r));
                }
                print!("{}", table::footer(&rows));
                print!("{}", nccl::ratio_table(&report.rows, &rows));
                report.nccl_rows = rows;
            }
        }
    }

    report.out_of_bounds = table::wrong_total(&report.rows) + table::wrong_total(&report.nccl_rows);
    report.avg_busbw = table::avg_busbw(&report.rows);
    if let Some(p) = &args.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("writing {}: {e}", p.display()))?;
        println!("# JSON written to {}", p.display());
    }
    if let Some(p) = &args.plot {
        plot::draw(&report, p)?;
        println!("# Plot written to {}", p.display());
    }
    Ok(if report.out_of_bounds == 0 { 0 } else { 1 })
}

/// The gradient layer's rows (see [`crate::grad`]): on the GPU the whole
/// ResNet-50 list, on the CPU execution its first 40 tensors.
fn grad_main(
    args: &BenchArgs,
    argv: Vec<String>,
    use_gpu: bool,
    sizes: &[u64],
    config: &CommConfig,
) -> Result<i32, String> {
    let e = |e: ringreduce::Error| e.to_string();
    let (rows, device) = if use_gpu {
        let gpus = ringreduce::gpu::device_count().map_err(e)?;
        let devices = placement(args.ranks, gpus);
        let comm = Communicator::with_placement(&devices, config.clone()).map_err(e)?;
        for u in 0..args.ranks {
            // SAFETY: the bench synchronises its streams itself.
            unsafe { comm.context(u).disable_event_tracking() };
        }
        let device = comm.context(0).name().map_err(|x| x.to_string())?;
        let r = crate::grad::rows(&comm, args.collective, sizes, args.warmup, args.iters, 161)?;
        (r, device)
    } else {
        let comm = CpuCommunicator::with_config(args.ranks, config.clone()).map_err(e)?;
        let r = crate::grad::rows(&comm, args.collective, sizes, args.warmup, args.iters, 40)?;
        (r, "CPU execution".to_string())
    };
    let mut report =
        crate::grad::report(argv, use_gpu, device, args.ranks, args.iters, args.warmup);
    println!(
        "# ringreduce {} {}: nRanks {} iters {} warmup {} on {}",
        env!("CARGO_PKG_VERSION"),
        args.collective.name(),
        args.ranks,
        args.iters,
        args.warmup,
        report.device
    );
    print!("{}", crate::grad::table(&rows));
    report.rows = rows.rows;
    report.break_even_density = rows.break_even;
    report.pass_us = rows.pass_us;
    if let Some(p) = &args.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
        println!("# JSON written to {}", p.display());
    }
    Ok(0)
}

/// With `--rematch`, `Auto` and the fastest forced algorithm at each size
/// timed again side by side (see [`crate::rematch`]); otherwise nothing.
/// `make` makes a sweep's communicator again.
fn rematch_all<C: Clock>(
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
fn runs_here<C: Collectives>(comm: &C, a: Option<Algo>) -> bool {
    let local = comm.algorithm_for::<f32>(Collective::AllReduce, 1);
    if a == Some(Algo::Local) && local.is_err() {
        println!("# local: not run, the ranks do not share one launch");
        return false;
    }
    true
}

/// `config` with algorithm `a` forced (`None`: as configured).
fn with_algo(config: &CommConfig, a: Option<Algo>) -> CommConfig {
    match a {
        Some(a) => config.clone().algorithm(a),
        None => config.clone(),
    }
}

/// The points a sweep with `a` runs: a forced two-shot is the one-shot for
/// all but the all-reduce, so only its all-reduce points.
fn points_for(pts: &[Point], a: Option<Algo>) -> Vec<Point> {
    pts.iter()
        .filter(|p| a != Some(Algo::TwoShot) || p.collective == Collective::AllReduce)
        .cloned()
        .collect()
}

/// `-g N` on a machine with at least N GPUs: one rank per GPU, as
/// nccl-tests runs. Otherwise N virtual ranks on GPU 0.
pub fn placement(ranks: usize, gpus: usize) -> Vec<usize> {
    if ranks > 1 && gpus >= ranks {
        (0..ranks).collect()
    } else {
        vec![0; ranks]
    }
}

fn driver_version() -> String {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    if r == sys::CUresult::CUDA_SUCCESS {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    } else {
        "unknown".into()
    }
}

/// Every point, one table per collective.
fn sweep_all<C: Clock>(
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
fn check<C: Collectives, T: RsElement + FromSmall>(
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
    for (u, input) in inputs.iter().enumerate() {
        let buf = if pool_is_recv {
            &mut bufs.recv[u]
        } else {
            &mut bufs.send[u]
        };
        comm.write(u, buf, at(u).0, input)?;
    }
    comm.collective(c, &mut regions(c, k, n, in_place, 0, bufs), op)?;
    comm.synchronize()?;
    let refs: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
    let algorithm = comm.algorithm_for::<T>(c, n)?;
    let want = reference::collective_by(c, algorithm, &refs, comm.ring_order(), op);
    let mut wrong = 0;
    for (u, want) in want.iter().enumerate() {
        let out = at(u).1;
        let buf = if in_place && !pool_is_recv {
            &bufs.send[u]
        } else {
            &bufs.recv[u]
        };
        let got = comm.read(u, buf, out..out + recv_len)?;
        wrong += count_wrong(&got, want);
    }
    Ok(wrong)
}

#[cfg(test)]
mod placement_tests {
    use super::placement;

    #[test]
    fn one_rank_per_gpu_when_there_are_enough() {
        assert_eq!(placement(4, 8), vec![0, 1, 2, 3]);
        assert_eq!(placement(8, 8), (0..8).collect::<Vec<_>>());
        assert_eq!(placement(4, 2), vec![0; 4]);
        assert_eq!(placement(4, 1), vec![0; 4]);
        assert_eq!(placement(1, 8), vec![0]);
    }
}
