//! The local kernel's own GPU time per launch, apart from any host time,
//! for small calls of several shapes.
//!
//! A small local call costs about 3 us more than an empty launch of the
//! same entry (`bench/NOTES.md`, 2026-12-05: a small call's time split), and the host cannot
//! tell where: a loop of launches is bound by the driver below that. Here
//! each shape's launches are captured into one CUDA graph and replayed,
//! so the time between events is the GPU's alone (each shape's outputs are
//! then checked against its inputs); how it grows with the
//! ranks, the blocks and the path (scalar or packs) says which part of the
//! kernel costs it. Under Nsight Compute (`REPS` small, one replay) the
//! same launches give each shape's duration and its stalls:
//!
//! ```sh
//! ringreduce-probe kernel -g 8                      # 1000 launches, 5 replays
//! ncu --cache-control none --clock-control none \
//!     ringreduce-probe kernel -g 8 --reps 10 --replays 1
//! ```

use super::{device_ptrs, launch_local, local_args};
use cudarc::driver::{sys, CudaFunction, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;
use ringreduce::gpu::capture;
use ringreduce::gpu::module::Kernels;
use ringreduce::kernels::abi::{LocalArgs, BATCH_RANKS};
use ringreduce::kernels::catalogue::{self, Kind};
use ringreduce::{Collective, Collectives, CommConfig, Communicator, DataType, Op};
use std::sync::Arc;

/// Elements of each rank's send and receive buffers: room for the largest
/// shape below.
const ELEMS: usize = 1 << 16;

/// One shape: its name, collective, ranks, blocks, elements per rank and
/// whether the pack path may run.
struct Shape {
    name: &'static str,
    collective: Collective,
    ranks: usize,
    blocks: u64,
    n: u64,
    aligned: bool,
}

fn shapes(k: usize) -> Vec<Shape> {
    use Collective::{AllGather, AllReduce, ReduceScatter};
    let s = |name, collective, ranks, blocks, n, aligned| Shape {
        name,
        collective,
        ranks,
        blocks,
        n,
        aligned,
    };
    let kb = k as u64;
    vec![
        s("empty (no ranks)", AllReduce, 0, kb, 2, false),
        s("AR 2 f32, library's grid", AllReduce, k, kb, 2, false),
        // The library's own argument: it allows the wide-pack path for
        // 256-byte-aligned buffers, even when no pack fits.
        s("AR 2 f32, wide-pack allowed", AllReduce, k, kb, 2, true),
        s("AR 2 f32, one block", AllReduce, k, 1, 2, false),
        s("AR 2 f32, one rank", AllReduce, 1, 1, 2, false),
        s("AR 2 f32, two ranks", AllReduce, 2.min(k), 1, 2, false),
        s("AR 4 f32, one pack", AllReduce, k, kb, 4, true),
        s("AR 256 f32 (1 KiB)", AllReduce, k, kb, 256, true),
        s("AR 1024 f32 (4 KiB)", AllReduce, k, kb, 1024, true),
        s("RS 2 f32 per rank", ReduceScatter, k, kb, 2, false),
        s("AG 2 f32 per rank", AllGather, k, kb, 2, false),
    ]
}

/// Prints each shape's time per launch at `k` ranks: `reps` launches per
/// graph, the best of `replays` replays.
pub fn run(k: usize, reps: usize, replays: usize) -> Result<(), Box<dyn std::error::Error>> {
    if !(1..=BATCH_RANKS).contains(&k) || reps == 0 || replays == 0 {
        return Err(format!("need 1 <= k <= {BATCH_RANKS} and reps, replays >= 1").into());
    }
    let comm = Communicator::with_config(0, k, CommConfig::default())?;
    let data = vec![1.0f32; ELEMS];
    let upload = || {
        (0..k)
            .map(|u| comm.upload(u, &data))
            .collect::<Result<Vec<_>, _>>()
    };
    let (send, mut recv) = (upload()?, upload()?);
    let poison = vec![POISON; ELEMS];
    let stream = comm.streams()[0].clone();
    let f32_sum =
        catalogue::collective_index(Kind::Local, Collective::AllReduce, DataType::F32, Op::Sum)
            .ok_or("no local f32 sum entry")?;
    let f = Kernels::of(comm.context(0))?.collective(f32_sum)?.clone();
    let (sp, rp) = (device_ptrs(&send, &stream), device_ptrs(&recv, &stream));
    let no_args = || format!("no local argument for {k} ranks");
    println!("k = {k}: {reps} launches per graph, best of {replays} replays, us per launch");
    for sh in shapes(k) {
        // The empty shape keeps one rank's geometry and runs none.
        let r = sh.ranks.max(1);
        let a = local_args(
            sh.collective,
            sh.blocks,
            sh.n,
            sh.aligned,
            &sp[..r],
            &rp[..r],
        )
        .ok_or_else(no_args)?;
        let a = LocalArgs {
            ranks: sh.ranks as u64,
            ..a
        };
        for (u, r) in recv.iter_mut().enumerate() {
            comm.write(u, r, 0, &poison)?;
        }
        let best = replay_time(&stream, &f, a, reps, replays)?;
        check(&comm, &recv, &sh)?;
        println!("  {:<28} {best:7.3}", sh.name);
    }
    println!("  (every shape's outputs checked, and the rest of each buffer untouched)");
    // The same argument (the all-reduce of 2 f32 on every rank) through
    // hand-written entries, each doing one part of what the local kernel
    // does, on the library's grid.
    let probes = comm
        .context(0)
        .load_module(Ptx::from_src(include_str!("kernel_probe.ptx")))?;
    let a = local_args(Collective::AllReduce, k as u64, 2, false, &sp, &rp).ok_or_else(no_args)?;
    println!("hand-written entries, {k} blocks:");
    for (name, what) in PROBES {
        let f = probes.load_function(name)?;
        let best = replay_time(&stream, &f, a, reps, replays)?;
        println!("  {name:<10} {best:7.3}  {what}");
    }
    Ok(())
}

/// What the outputs hold before each shape's launches.
const POISON: f32 = -1.0;

/// Every rank's output after `sh`'s launches, against what its inputs (all
/// 1.0) give: the sum of the shape's ranks, or a copy of 1.0 for an
/// all-gather, where the shape writes, and [`POISON`] everywhere else.
fn check(
    comm: &Communicator,
    recv: &[CudaSlice<f32>],
    sh: &Shape,
) -> Result<(), Box<dyn std::error::Error>> {
    let (r, n) = (sh.ranks, sh.n as usize);
    let (written, value) = match sh.collective {
        Collective::AllGather => (r * n, 1.0),
        _ => (n, r as f32),
    };
    for (u, buf) in recv.iter().enumerate() {
        let got = comm.download(u, buf)?;
        for (i, &v) in got.iter().enumerate() {
            let want = if u < r && i < written { value } else { POISON };
            if v.to_bits() != want.to_bits() {
                let at = format!("rank {u} element {i}: {v}, want {want}");
                return Err(format!("{}: {at}", sh.name).into());
            }
        }
    }
    Ok(())
}

/// The entries of `kernel_probe.ptx` and what each does.
const PROBES: [(&str, &str); 7] = [
    ("p_empty", "returns at once"),
    ("p_st", "lane 0 stores a constant"),
    ("p_ld", "lane 0 loads, stores nothing"),
    ("p_ldst", "lane 0 loads and stores"),
    ("p_local", "every lane copies addresses to local memory"),
    ("p_table", "lane 0 reads a module global, stores it"),
    ("p_wide", "every lane loads and stores one f32"),
];

/// `reps` launches of `f` with argument `a` (on its grid), captured
/// into one graph: the best of `replays` replays, in microseconds per
/// launch between events.
fn replay_time(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    a: LocalArgs,
    reps: usize,
    replays: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let graph = capture(stream, || {
        for _ in 0..reps {
            // SAFETY: the argument names live buffers of `ELEMS` elements
            // per rank on this device, more than any shape reads or
            // writes.
            unsafe { launch_local(f, stream, a) }?;
        }
        Ok(())
    })?;
    let mut best = f64::INFINITY;
    for _ in 0..replays {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let t0 = stream.record_event(flags)?;
        graph.launch()?;
        let t1 = stream.record_event(flags)?;
        t1.synchronize()?;
        best = best.min(t0.elapsed_ms(&t1)? as f64 * 1e3 / reps as f64);
    }
    Ok(best)
}
