//! Running a sweep, written once against the library's `Collectives`
//! trait: on the GPU (virtual ranks, or one rank per GPU), or on the CPU
//! execution when there is no GPU (or `--cpu`).

use crate::ceilings;
use crate::cli::{AlgoArg, BackendArg, BenchArgs};
use crate::clock::Clock;
use crate::nccl;
use crate::plot;
use crate::point::{points, Judge, Point};
use crate::report::{now_iso, Report, Row, SCHEMA_VERSION};
use crate::sizes::sweep;
use crate::sweeps::{points_for, rematch_all, runs_here, sweep_all, with_algo};
use crate::table;
use cudarc::driver::sys;
use ringreduce::{
    Algo, CommConfig, Communicator, CpuBackend, CpuCommunicator, GpuBackend, HierComm,
    NcclCommunicator, RingOrder,
};

/// Largest size the CPU execution sweeps to: it exists to show the runner
/// works, not to measure anything.
pub const CPU_MAX_BYTES: u64 = 4 << 20;
/// Bytes the copy ceilings move: far beyond any L2 cache.
pub const CEILING_COPY_BYTES: u64 = 1 << 30;

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
    if let Some(n) = args.procs.filter(|&n| n > 1) {
        return crate::procs::spawn_job(n as usize, args.nodes.map(|m| m as usize), &argv);
    }
    let job = crate::procs::launched()?;
    // Only rank 0 writes the report and the plot (every rank is given the
    // same paths).
    let quiet;
    let args = match &job {
        Some(l) if l.rank != 0 => {
            quiet = BenchArgs {
                json: None,
                plot: None,
                ..args.clone()
            };
            &quiet
        }
        _ => args,
    };
    if let Some(l) = &job {
        if args.ranks != 1 {
            return Err("-g counts the ranks of one process: 1 in a job of processes".into());
        }
        // nccl-tests' rule: rank 0 prints.
        if l.rank != 0 {
            crate::procs::silence_stdout();
        }
    }
    // Ranks in the communicator: `-g`, or the job's processes.
    let ranks = job.as_ref().map_or(args.ranks, |l| l.world);
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
    RingOrder::for_ranks(args.ring_order.as_deref(), ranks).map_err(|e| e.to_string())?;
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
    let pts = points(args, ranks, &sizes)?;
    let ring =
        RingOrder::for_ranks(args.ring_order.as_deref(), ranks).map_err(|e| e.to_string())?;
    let config = config_of(args, &ring);

    let hier_only = args.backend == [BackendArg::Hier];
    if job.is_some() && args.collective.is_grad() && !hier_only {
        return Err("the gradient rows run in one process, or with --backend hier alone".into());
    }
    if job.is_some() && (args.vs_nccl || args.graph) {
        return Err("--vs-nccl and --graph run in one process".into());
    }
    let others: Vec<BackendArg> = args
        .backend
        .iter()
        .copied()
        .filter(|b| *b != BackendArg::Ringreduce)
        .collect();
    if !others.is_empty() && job.is_none() {
        return Err(
            "--backend nccl and hier run the collectives of a job of processes (--procs N)".into(),
        );
    }
    let ours = args.backend.contains(&BackendArg::Ringreduce);
    if args.collective.is_grad() {
        return grad_main(args, argv, use_gpu, &sizes, &config, job.as_ref());
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
        ranks,
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
        processes: job.as_ref().map_or(1, |l| l.world),
        ceilings: None,
        rows: vec![],
        nccl_rows: vec![],
        nccl_note: None,
        out_of_bounds: 0,
        avg_busbw: 0.0,
        auto_rematch: vec![],
    };

    let mut per_algo: Vec<(Option<Algo>, Vec<Row>)> = Vec::new();
    // The rows of --backend nccl and hier.
    let mut other_rows: Vec<Row> = Vec::new();
    let rematched;
    let gpu_count = *gpus.as_ref().unwrap_or(&1);
    if use_gpu {
        // A job's process measures on its own GPU.
        let mine = job.as_ref().map_or(0, |l| l.local_rank % gpu_count.max(1));
        let ctx = ringreduce::gpu::open_device(mine).map_err(|e| e.to_string())?;
        report.device = ctx.name().map_err(|e| e.to_string())?;
        report.driver_version = driver_version();
        // SAFETY: the ceilings synchronise their own streams.
        unsafe { ctx.disable_event_tracking() };
        let c = ceilings::measure(&ctx, CEILING_COPY_BYTES).map_err(|e| e.to_string())?;
        // The ceilings loaded the device's kernels.
        report.kernels = ringreduce::gpu::module::kernel_image(ctx.ordinal())
            .map_or_else(|| "-".into(), |i| i.to_string());
        let devices = match &job {
            Some(l) => (0..l.world)
                .map(|r| {
                    if r == l.rank {
                        mine
                    } else {
                        r % gpu_count.max(1)
                    }
                })
                .collect(),
            None => placement(ranks, gpu_count),
        };
        let ranks_here = devices.iter().filter(|&&d| d == devices[0]).count();
        report.devices = devices.clone();
        let judge = Judge {
            ceilings: Some(&c),
            busbw_ceiling: Some(c.block_copy_gbps),
            ranks_here,
        };
        let make = |a: Option<Algo>| -> ringreduce::Result<Communicator> {
            let config = with_algo(&config, a);
            let comm = match &job {
                Some(l) => Communicator::init_rank(&l.unique_id()?, l.rank, l.world, mine, config)?,
                None => Communicator::with_placement(&devices, config)?,
            };
            // The bench times launches back to back; cudarc's per-buffer
            // event tracking would add two driver calls per buffer to every
            // one (a context object each: the communicator's, not the one
            // above), and a graph capture cannot wait on the uploads' events.
            for u in comm.local_ranks() {
                // SAFETY: the bench synchronises its streams itself.
                unsafe { comm.context(u).disable_event_tracking() };
            }
            Ok(comm)
        };
        if !ours {
            print!("{}", table::preamble(&report));
            print!("{}", table::ceilings(&c));
        }
        for (i, a) in args.algos().into_iter().enumerate().filter(|_| ours) {
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
        if let Some(l) = &job {
            let id = l.unique_id().map_err(|e| e.to_string())?;
            let (rank, world, name) = (l.rank, l.world, "1-block copy");
            for &b in &others {
                let cfg = config.clone();
                other_rows.extend(match b {
                    BackendArg::Nccl => {
                        let comm = NcclCommunicator::init_rank(&id, rank, world, mine, cfg)
                            .map_err(|e| e.to_string())?;
                        backend_sweep(args, &comm, &pts, judge, name, b)?
                    }
                    _ => {
                        let comm = HierComm::<GpuBackend>::init_rank(&id, rank, world, mine, cfg)
                            .map_err(|e| e.to_string())?;
                        backend_sweep(args, &comm, &pts, judge, name, b)?
                    }
                });
            }
        }
        report.ceilings = Some(c);
        rematched = rematch_all(args, &make, &pts, &per_algo)?;
    } else {
        let judge = Judge {
            ceilings: None,
            busbw_ceiling: None,
            ranks_here: ranks,
        };
        let make = |a| match &job {
            Some(l) => CpuCommunicator::init_rank(
                &l.unique_id()?,
                l.rank,
                l.world,
                0,
                with_algo(&config, a),
            ),
            None => CpuCommunicator::with_config(ranks, with_algo(&config, a)),
        };
        if !ours {
            print!("{}", table::preamble(&report));
        }
        for (i, a) in args.algos().into_iter().enumerate().filter(|_| ours) {
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
        if let Some(l) = &job {
            for &b in &others {
                if b == BackendArg::Nccl {
                    return Err("--backend nccl needs GPUs".into());
                }
                let comm = HierComm::<CpuBackend>::init_rank(
                    &l.unique_id().map_err(|e| e.to_string())?,
                    l.rank,
                    l.world,
                    0,
                    config.clone(),
                )
                .map_err(|e| e.to_string())?;
                other_rows.extend(backend_sweep(args, &comm, &pts, judge, "(none: CPU)", b)?);
            }
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
    report.rows.extend(other_rows);

    finish(
        args,
        &mut report,
        &pts,
        use_gpu,
        gpus.as_ref().copied().unwrap_or(0),
    )?;
    // Every rank checked its own outputs; rank 0's report counts its own.
    Ok(if report.out_of_bounds == 0 { 0 } else { 1 })
}

/// The sweep of `--backend` `b` (NCCL's, or the hierarchical one) on
/// `comm`, its rows named by it.
fn backend_sweep<C: Clock>(
    args: &BenchArgs,
    comm: &C,
    pts: &[Point],
    judge: Judge,
    ceiling_name: &str,
    b: BackendArg,
) -> Result<Vec<Row>, String> {
    println!("#\n# backend: {}", b.name());
    let mut rows = sweep_all(args, comm, &points_for(pts, None), judge, ceiling_name)?;
    for r in &mut rows {
        r.backend = b.name().into();
        if b == BackendArg::Nccl {
            r.algorithm = "nccl".into();
        }
    }
    Ok(rows)
}

/// The communicators' configuration the bench's flags ask for.
fn config_of(args: &BenchArgs, ring: &RingOrder) -> CommConfig {
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
    config
}

/// The end of a sweep: the NCCL rows beside ours with `--vs-nccl`, the
/// totals, and the JSON report and plot where asked for.
fn finish(
    args: &BenchArgs,
    report: &mut Report,
    pts: &[Point],
    use_gpu: bool,
    devices: usize,
) -> Result<(), String> {
    if args.vs_nccl {
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
                let rows = nccl::sweep(args, pts, judge)?;
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
        let s = serde_json::to_string_pretty(&*report).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("writing {}: {e}", p.display()))?;
        println!("# JSON written to {}", p.display());
    }
    if let Some(p) = &args.plot {
        plot::draw(report, p)?;
        println!("# Plot written to {}", p.display());
    }
    Ok(())
}

/// The gradient rows `args` ask for on `comm`, with `fused` tensors of
/// the ResNet-50 list.
fn grad_rows<C: ringreduce::grad::GradBackend>(
    comm: &C,
    args: &BenchArgs,
    sizes: &[u64],
    fused: usize,
) -> Result<crate::grad::Measured, String> {
    crate::grad::rows(comm, args.collective, sizes, args.warmup, args.iters, fused)
}

/// The gradient layer's rows (see [`crate::grad`]): on the GPU the whole
/// ResNet-50 list, on the CPU execution its first 40 tensors.
fn grad_main(
    args: &BenchArgs,
    argv: Vec<String>,
    use_gpu: bool,
    sizes: &[u64],
    config: &CommConfig,
    job: Option<&ringreduce::bootstrap::Launch>,
) -> Result<i32, String> {
    let e = |e: ringreduce::Error| e.to_string();
    // The whole list on the GPU, its first 40 tensors on the CPU.
    let fused = if use_gpu { 161 } else { 40 };
    // A hierarchical job's hosts: nodes, and ranks on each.
    let mut hosts = None;
    let (mut rows, device) = match job {
        // A hierarchical job: this process's rank, the step between its
        // nodes compressed as each row asks.
        Some(l) if use_gpu => {
            let gpus = ringreduce::gpu::device_count().map_err(e)?.max(1);
            let mine = l.local_rank % gpus;
            let comm = HierComm::<GpuBackend>::init_rank(
                &l.unique_id().map_err(e)?,
                l.rank,
                l.world,
                mine,
                config.clone(),
            )
            .map_err(e)?;
            let device = ringreduce::gpu::open_device(mine)
                .and_then(|c| Ok(c.name()?))
                .map_err(e)?;
            hosts = Some((comm.nodes().count(), comm.nodes().per_node()));
            (grad_rows(&comm, args, sizes, fused)?, device)
        }
        Some(l) => {
            let id = l.unique_id().map_err(e)?;
            let comm = HierComm::<CpuBackend>::init_rank(&id, l.rank, l.world, 0, config.clone())
                .map_err(e)?;
            hosts = Some((comm.nodes().count(), comm.nodes().per_node()));
            (
                grad_rows(&comm, args, sizes, fused)?,
                "CPU execution".to_string(),
            )
        }
        None if use_gpu => {
            let gpus = ringreduce::gpu::device_count().map_err(e)?;
            let devices = placement(args.ranks, gpus);
            let comm = Communicator::with_placement(&devices, config.clone()).map_err(e)?;
            for u in 0..args.ranks {
                // SAFETY: the bench synchronises its streams itself.
                unsafe { comm.context(u).disable_event_tracking() };
            }
            let device = comm.context(0).name().map_err(|x| x.to_string())?;
            (grad_rows(&comm, args, sizes, fused)?, device)
        }
        None => {
            let comm = CpuCommunicator::with_config(args.ranks, config.clone()).map_err(e)?;
            (
                grad_rows(&comm, args, sizes, fused)?,
                "CPU execution".to_string(),
            )
        }
    };
    if let (Some((nodes, per_node)), Some(0)) = (hosts, job.map(|l| l.rank)) {
        crate::grad::with_wire(&mut rows, nodes, per_node)?;
    }
    let ranks = job.map_or(args.ranks, |l| l.world);
    let mut report = crate::grad::report(argv, use_gpu, device, ranks, args.iters, args.warmup);
    println!(
        "# ringreduce {} {}: nRanks {} iters {} warmup {} on {}",
        env!("CARGO_PKG_VERSION"),
        args.collective.name(),
        ranks,
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
