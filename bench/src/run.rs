//! Running a sweep: on the GPU with virtual ranks, or on the CPU execution
//! when there is no GPU (or `--cpu`).

use crate::ceilings;
use crate::cli::BenchArgs;
use crate::exact::{fill, FromSmall};
use crate::metrics::{algbw, busbw, Collective};
use crate::nccl;
use crate::plot;
use crate::report::{now_iso, Perf, Report, Row, SCHEMA_VERSION};
use crate::sizes::sweep;
use crate::table;
use cudarc::driver::{sys, CudaSlice, CudaStream};
use indicatif::{ProgressBar, ProgressStyle};
use ringreduce::{
    reference, CommConfig, Communicator, CpuBuffers, CpuCommunicator, DataType, HostBuffer, Op,
    RingOrder, RsBuffers, RsElement,
};
use std::sync::Arc;
use std::time::Instant;

/// Largest per-rank size the CPU execution sweeps to: it exists to show
/// the runner works, not to measure anything.
pub const CPU_MAX_BYTES: u64 = 4 << 20;
/// Bytes the copy ceilings move: far beyond any L2 cache.
pub const CEILING_COPY_BYTES: u64 = 1 << 30;

pub(crate) use ringreduce::with_element_type as with_elem;

/// One sweep point, for either backend.
pub struct Point {
    pub dtype: DataType,
    pub op: Op,
    pub size: u64,
    pub count: u64,
}

pub fn points(args: &BenchArgs, sizes: &[u64]) -> Result<Vec<Point>, String> {
    let mut v = Vec::new();
    for dtype in args.dtypes()? {
        for op in args.ops()? {
            for &size in sizes {
                let count = args.collective.count_for(size, dtype.size(), args.ranks);
                v.push(Point {
                    dtype,
                    op,
                    size,
                    count,
                });
            }
        }
    }
    Ok(v)
}

pub fn perf(
    coll: Collective,
    k: usize,
    p: &Point,
    time_us: f64,
    wrong: Option<u64>,
    ceiling: Option<f64>,
) -> Perf {
    let bytes = coll.bytes_for(p.count, p.dtype.size(), k);
    let bus = busbw(coll, k, bytes, time_us);
    Perf {
        time_us,
        algbw: algbw(bytes, time_us),
        busbw: bus,
        wrong,
        busbw_vs_ceiling: ceiling.filter(|c| *c > 0.0).map(|c| bus / c),
    }
}

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
    if args.ranks == 0 {
        return Err("-g must be at least 1".into());
    }
    // Every argument is checked before anything is printed.
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
            println!("# Sizes capped at {CPU_MAX_BYTES} bytes per rank for the CPU execution.");
            max = CPU_MAX_BYTES;
            min = min.min(max);
        }
    }
    let sizes = sweep(min, max, args.factor, args.increment)?;
    let pts = points(args, &sizes)?;
    let ring =
        RingOrder::for_ranks(args.ring_order.as_deref(), args.ranks).map_err(|e| e.to_string())?;
    let mut config = CommConfig::default()
        .buffer_bytes(args.buffsize)
        .watchdog(!args.no_watchdog);
    if let Some(r) = args.prefetch {
        config = config.prefetch_rounds(r);
    }
    // Without --ring-order, a ring over several GPUs follows their links.
    if args.ring_order.is_some() {
        config = config.ring_order(ring.user_from_ring().to_vec());
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
        collective: args.collective.name().into(),
        ranks: args.ranks,
        iters: args.iters,
        warmup: args.warmup,
        blocking: args.blocking,
        buffsize: args.buffsize,
        ring_order: ring.user_from_ring().to_vec(),
        devices: vec![],
        prefetch_rounds: config.effective_prefetch_rounds(),
        ceilings: None,
        rows: vec![],
        nccl_rows: vec![],
        nccl_note: None,
        out_of_bounds: 0,
        avg_busbw: 0.0,
    };

    if use_gpu {
        let ctx = ringreduce::gpu::open_device(0).map_err(|e| e.to_string())?;
        report.device = ctx.name().map_err(|e| e.to_string())?;
        report.driver_version = driver_version();
        // The bench times launches back to back; cudarc's per-buffer event
        // tracking would add driver calls to every one of them.
        // SAFETY: the bench synchronises its streams itself.
        unsafe { ctx.disable_event_tracking() };
        let c = ceilings::measure(&ctx, CEILING_COPY_BYTES).map_err(|e| e.to_string())?;
        let devices = placement(args.ranks, *gpus.as_ref().unwrap_or(&1));
        let comm = Communicator::with_placement(&devices, config).map_err(|e| e.to_string())?;
        report.ring_order = comm.ring_order().user_from_ring().to_vec();
        report.devices = devices;
        print!("{}", table::preamble(&report));
        print!("{}", table::ceilings(&c));
        report.ceilings = Some(c.clone());
        let streams = comm.new_streams().map_err(|e| e.to_string())?;
        print!("#\n{}", table::header("1-block copy"));
        report.rows = gpu_sweep(args, &comm, &streams, &pts, Some(c.block_copy_gbps))?;
    } else {
        print!("{}", table::preamble(&report));
        let comm = CpuCommunicator::with_config(args.ranks, config).map_err(|e| e.to_string())?;
        print!("#\n{}", table::header("(none: CPU)"));
        report.rows = cpu_sweep(args, &comm, &pts)?;
    }
    print!("{}", table::footer(&report.rows));

    if args.vs_nccl {
        let devices = gpus.as_ref().copied().unwrap_or(0);
        match nccl::availability(args.ranks, devices, use_gpu) {
            Err(note) => {
                println!("# --vs-nccl: {note}");
                report.nccl_note = Some(note);
            }
            Ok(()) => {
                let ceiling = report.ceilings.as_ref().map(|c| c.device_copy_gbps);
                let rows = nccl::sweep(args, &pts, ceiling)?;
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

/// nccl-tests shifts each iteration's buffers by one message within the
/// allocation, so back-to-back iterations do not hit the same cache lines.
fn shift(iter: usize, size: u64, max: u64) -> u64 {
    let steps = max.checked_div(size).unwrap_or(1).max(1);
    iter as u64 % steps
}

fn gpu_sweep(
    args: &BenchArgs,
    comm: &Communicator,
    streams: &[Arc<CudaStream>],
    pts: &[Point],
    ceiling: Option<f64>,
) -> Result<Vec<Row>, String> {
    let pb = progress(pts.len());
    let mut rows = Vec::with_capacity(pts.len());
    let mut i = 0;
    while i < pts.len() {
        // Points come grouped by type; allocate once per type.
        let dtype = pts[i].dtype;
        let j = pts[i..]
            .iter()
            .position(|p| p.dtype != dtype)
            .map_or(pts.len(), |x| i + x);
        let group = &pts[i..j];
        let r =
            with_elem!(dtype, T => gpu_type_sweep::<T>(args, comm, streams, group, ceiling, &pb));
        rows.extend(r.map_err(|e| e.to_string())?);
        i = j;
    }
    pb.finish_and_clear();
    Ok(rows)
}

fn gpu_type_sweep<T: RsElement + FromSmall>(
    args: &BenchArgs,
    comm: &Communicator,
    streams: &[Arc<CudaStream>],
    pts: &[Point],
    ceiling: Option<f64>,
    pb: &ProgressBar,
) -> ringreduce::Result<Vec<Row>> {
    let k = comm.k();
    let sz = std::mem::size_of::<T>() as u64;
    let max_count = pts.iter().map(|p| p.count).max().unwrap_or(0);
    let max_bytes = pts
        .iter()
        .map(|p| p.size)
        .max()
        .unwrap_or(0)
        .max(max_count * k as u64 * sz);
    let send_len = (max_bytes / sz).max(k as u64 * max_count).max(1) as usize;
    let recv_len = (send_len / k).max(1);
    let mut send: Vec<CudaSlice<T>> = Vec::with_capacity(k);
    let mut recv: Vec<CudaSlice<T>> = Vec::with_capacity(k);
    for (u, s) in streams.iter().enumerate() {
        // Never time on zeros: start from the exact-check data.
        send.push(s.clone_htod(&fill::<T>(Op::Sum, k, u, send_len, 1))?);
        recv.push(s.alloc_zeros::<T>(recv_len)?);
    }
    let mut rows = Vec::new();
    for p in pts {
        pb.set_message(format!("{} {} {}B", p.dtype.name(), p.op.name(), p.size));
        let n = p.count as usize;
        let steps_max = send_len as u64 * sz;
        let mut timed = [0.0f64; 2];
        let mut wrong = [None, None];
        for (pi, in_place) in [false, true].into_iter().enumerate() {
            let launch = |it: usize, send: &mut [CudaSlice<T>], recv: &mut [CudaSlice<T>]| {
                let sh = shift(it, (n * k) as u64 * sz, steps_max) as usize;
                let mut bufs: Vec<RsBuffers<'_, T>> = send
                    .iter_mut()
                    .zip(recv.iter_mut())
                    .map(|(s, r)| {
                        let so = sh * n * k;
                        if in_place {
                            RsBuffers::in_place(s.slice_mut(so..so + n * k))
                        } else {
                            let ro = (sh * n).min(recv_len - n);
                            RsBuffers::out_of_place(
                                s.slice(so..so + n * k),
                                r.slice_mut(ro..ro + n),
                            )
                        }
                    })
                    .collect();
                comm.reduce_scatter(&mut bufs, p.op, streams)
            };
            for it in 0..args.warmup {
                launch(it, &mut send, &mut recv)?;
            }
            sync_all(streams)?;
            let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let start = streams[0].record_event(timing)?;
            for s in &streams[1..] {
                s.wait(&start)?;
            }
            let t0 = Instant::now();
            for it in 0..args.iters {
                launch(it, &mut send, &mut recv)?;
                if args.blocking {
                    sync_all(streams)?;
                }
            }
            for s in &streams[1..] {
                let e = s.record_event(None)?;
                streams[0].wait(&e)?;
            }
            let stop = streams[0].record_event(timing)?;
            stop.synchronize()?;
            let host_us = t0.elapsed().as_secs_f64() * 1e6;
            comm.synchronize()?;
            let ev_us = start.elapsed_ms(&stop)? as f64 * 1e3;
            let us = if args.blocking { host_us } else { ev_us };
            timed[pi] = us / args.iters.max(1) as f64;
            if args.check {
                wrong[pi] = Some(gpu_check::<T>(
                    comm, streams, &mut send, &mut recv, n, p.op, in_place,
                )?);
            }
        }
        let row = Row {
            size: p.size,
            count: p.count,
            dtype: p.dtype.name().into(),
            op: p.op.name().into(),
            root: -1,
            out_of_place: perf(args.collective, k, p, timed[0], wrong[0], ceiling),
            in_place: perf(args.collective, k, p, timed[1], wrong[1], ceiling),
        };
        pb.suspend(|| println!("{}", table::row(&row)));
        rows.push(row);
        pb.inc(1);
    }
    Ok(rows)
}

fn sync_all(streams: &[Arc<CudaStream>]) -> ringreduce::Result<()> {
    for s in streams {
        s.synchronize()?;
    }
    Ok(())
}

fn count_wrong<T: bytemuck::Pod>(got: &[T], want: &[T]) -> u64 {
    got.iter()
        .zip(want)
        .filter(|(a, b)| bytemuck::bytes_of(*a) != bytemuck::bytes_of(*b))
        .count() as u64
}

fn gpu_check<T: RsElement + FromSmall>(
    comm: &Communicator,
    streams: &[Arc<CudaStream>],
    send: &mut [CudaSlice<T>],
    recv: &mut [CudaSlice<T>],
    n: usize,
    op: Op,
    in_place: bool,
) -> ringreduce::Result<u64> {
    let k = comm.k();
    if n == 0 {
        return Ok(0);
    }
    let inputs: Vec<Vec<T>> = (0..k).map(|u| fill::<T>(op, k, u, n * k, 7)).collect();
    for u in 0..k {
        streams[u].memcpy_htod(&inputs[u], &mut send[u].slice_mut(0..n * k))?;
    }
    {
        let mut bufs: Vec<RsBuffers<'_, T>> = send
            .iter_mut()
            .zip(recv.iter_mut())
            .map(|(s, r)| {
                if in_place {
                    RsBuffers::in_place(s.slice_mut(0..n * k))
                } else {
                    RsBuffers::out_of_place(s.slice(0..n * k), r.slice_mut(0..n))
                }
            })
            .collect();
        comm.reduce_scatter(&mut bufs, op, streams)?;
    }
    sync_all(streams)?;
    comm.synchronize()?;
    let refs: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
    let want = reference::reduce_scatter(&refs, comm.ring_order(), op);
    let mut wrong = 0;
    for u in 0..k {
        let got = if in_place {
            streams[u].clone_dtoh(&send[u].slice(u * n..(u + 1) * n))?
        } else {
            streams[u].clone_dtoh(&recv[u].slice(0..n))?
        };
        wrong += count_wrong(&got, &want[u]);
    }
    Ok(wrong)
}

fn cpu_sweep(args: &BenchArgs, comm: &CpuCommunicator, pts: &[Point]) -> Result<Vec<Row>, String> {
    let pb = progress(pts.len());
    let mut rows = Vec::new();
    for p in pts {
        pb.set_message(format!("{} {} {}B", p.dtype.name(), p.op.name(), p.size));
        let row =
            with_elem!(p.dtype, T => cpu_point::<T>(args, comm, p)).map_err(|e| e.to_string())?;
        pb.suspend(|| println!("{}", table::row(&row)));
        rows.push(row);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(rows)
}

fn cpu_point<T: RsElement + FromSmall>(
    args: &BenchArgs,
    comm: &CpuCommunicator,
    p: &Point,
) -> ringreduce::Result<Row> {
    let k = comm.k();
    let n = p.count as usize;
    let inputs: Vec<Vec<T>> = (0..k).map(|u| fill::<T>(p.op, k, u, n * k, 7)).collect();
    let refs: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
    let want = reference::reduce_scatter(&refs, comm.ring_order(), p.op);
    let mut timed = [0.0f64; 2];
    let mut wrong = [None, None];
    for (pi, in_place) in [false, true].into_iter().enumerate() {
        let send: Vec<HostBuffer<T>> = inputs.iter().map(|v| HostBuffer::from_slice(v)).collect();
        let recv: Vec<HostBuffer<T>> = (0..k).map(|_| HostBuffer::zeroed(n)).collect();
        let bufs: Vec<CpuBuffers<T>> = (0..k)
            .map(|u| {
                if in_place {
                    CpuBuffers::in_place(send[u].as_view())
                } else {
                    CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view())
                }
            })
            .collect();
        if args.check {
            // Check first: in place, later iterations reduce reduced data.
            comm.reduce_scatter(&bufs, p.op)?;
            comm.synchronize()?;
            let mut w = 0;
            for u in 0..k {
                let got = if in_place {
                    send[u].to_vec()[u * n..(u + 1) * n].to_vec()
                } else {
                    recv[u].to_vec()
                };
                w += count_wrong(&got, &want[u]);
            }
            wrong[pi] = Some(w);
        }
        for _ in 0..args.warmup {
            comm.reduce_scatter(&bufs, p.op)?;
        }
        comm.synchronize()?;
        let t0 = Instant::now();
        for _ in 0..args.iters {
            comm.reduce_scatter(&bufs, p.op)?;
            if args.blocking {
                comm.synchronize()?;
            }
        }
        comm.synchronize()?;
        timed[pi] = t0.elapsed().as_secs_f64() * 1e6 / args.iters.max(1) as f64;
    }
    Ok(Row {
        size: p.size,
        count: p.count,
        dtype: p.dtype.name().into(),
        op: p.op.name().into(),
        root: -1,
        out_of_place: perf(args.collective, k, p, timed[0], wrong[0], None),
        in_place: perf(args.collective, k, p, timed[1], wrong[1], None),
    })
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
