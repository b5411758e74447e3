//! The library's own host time per small collective, apart from the driver's.
//!
//! A collective launched one by one is host bound on the H100 machines
//! (`bench/NOTES.md`, 2026-12-05: short segments in lane groups), and the driver's share cannot be
//! told from the library's there. Five loops tell them apart, each timed
//! on the host clock and between events:
//! - `library`: the local all-reduce of 2 `f32` through the communicator;
//! - `library shifted`: the same, its buffers moved by one message each
//!   call as the bench moves them, so the plan memo never hits;
//! - `raw`: the same kernel launched directly with the scalar path;
//! - `raw aligned`: the same with the wide-pack path allowed, which is the
//!   library's own argument (the planner allows it for these buffers);
//! - `empty`: that kernel with no ranks (it returns at once).
//!
//! With a stub `libcuda.so` whose calls do nothing standing in for the
//! driver, `library` is this crate's own time:
//!
//! ```sh
//! gcc -O2 -shared -fPIC -o /tmp/stub/libcuda.so bench/stub-driver/libcuda_stub.c
//! LD_LIBRARY_PATH=/tmp/stub ringreduce-probe host -g 8
//! ```
//!
//! `perf record -g` on the same command shows where the time goes.

use super::{device_ptrs, launch_local, local_args};
use cudarc::driver::{sys, CudaStream};
use ringreduce::gpu::module::Kernels;
use ringreduce::kernels::abi::{LocalArgs, BATCH_RANKS};
use ringreduce::kernels::catalogue::{self, Kind};
use ringreduce::{Collective, Collectives, CommConfig, Communicator, DataType, Op, Region};
use std::sync::Arc;
use std::time::Instant;

const ROUNDS: usize = 3;

/// Prints the loops' times per call at `k` ranks, `iters` calls a round.
pub fn run(k: usize, iters: usize) -> Result<(), Box<dyn std::error::Error>> {
    if !(1..=BATCH_RANKS).contains(&k) {
        return Err(format!("need 1 <= k <= {BATCH_RANKS}").into());
    }
    let comm = Communicator::with_config(0, k, CommConfig::default())?;
    for u in 0..k {
        // SAFETY: nothing here runs on another stream; the bench does the same.
        unsafe { comm.context(u).disable_event_tracking() };
    }
    let n = 2usize;
    let data = vec![1.0f32; 1024];
    let send = (0..k)
        .map(|u| comm.upload(u, &data))
        .collect::<Result<Vec<_>, _>>()?;
    let mut recv = (0..k)
        .map(|u| comm.upload(u, &data))
        .collect::<Result<Vec<_>, _>>()?;
    let algorithm = comm.algorithm_for::<f32>(Collective::AllReduce, n)?;
    let blocks = (k * comm.channels_for::<f32>(Collective::AllReduce, n)?) as u64;
    let stream = comm.streams()[0].clone();
    println!("k = {k}, {algorithm:?} all-reduce of {n} f32, {blocks} blocks; per call:");
    // The library's call on elements `at..at + n` of every buffer.
    let mut library = |at: usize| -> Result<(), Box<dyn std::error::Error>> {
        let mut regions: Vec<Region<'_, _>> = send
            .iter()
            .zip(recv.iter_mut())
            .map(|(s, r)| Region::OutOfPlace {
                send: s,
                send_at: at..at + n,
                recv: r,
                recv_at: at..at + n,
            })
            .collect();
        Ok(Collectives::collective(
            &comm,
            Collective::AllReduce,
            &mut regions,
            Op::Sum,
        )?)
    };
    for round in 0..ROUNDS {
        let (host, gpu) = timed(&stream, iters, || library(0))?;
        println!("  round {round}: library {host:.3} us host, {gpu:.3} us between events");
    }
    // The bench moves each call's buffers by one message (as nccl-tests
    // does), so its calls never repeat an address: the plan memo misses.
    for round in 0..ROUNDS {
        let mut at = 0;
        let (host, gpu) = timed(&stream, iters, || {
            at = (at + n) % (data.len() - n);
            library(at)
        })?;
        println!("  round {round}: library shifted {host:.3} us host, {gpu:.3} us between events");
    }
    let f32_sum =
        catalogue::collective_index(Kind::Local, Collective::AllReduce, DataType::F32, Op::Sum)
            .ok_or("no local f32 sum entry")?;
    let f = Kernels::of(comm.context(0))?.collective(f32_sum)?.clone();
    let (sp, rp) = (device_ptrs(&send, &stream), device_ptrs(&recv, &stream));
    let args = local_args(Collective::AllReduce, blocks, n as u64, false, &sp, &rp)
        .ok_or("no local argument for these ranks")?;
    let wide = LocalArgs { aligned: 1, ..args };
    let empty = LocalArgs { ranks: 0, ..args };
    for (name, a) in [("raw", args), ("raw aligned", wide), ("empty", empty)] {
        for round in 0..ROUNDS {
            let (host, gpu) = timed(&stream, iters, || {
                // SAFETY: the argument names live buffers of `n` elements
                // on this device (or no ranks at all).
                unsafe { launch_local(&f, &stream, a) }?;
                Ok(())
            })?;
            println!("  round {round}: {name} {host:.3} us host, {gpu:.3} us between events");
        }
    }
    Ok(())
}

/// `iters` calls of `call` back to back: host and event microseconds per
/// call.
fn timed(
    stream: &Arc<CudaStream>,
    iters: usize,
    mut call: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    stream.synchronize()?;
    let a = stream.record_event(flags)?;
    let t = Instant::now();
    for _ in 0..iters {
        call()?;
    }
    let host = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    let b = stream.record_event(flags)?;
    b.synchronize()?;
    let gpu = a.elapsed_ms(&b)? as f64 * 1e3 / iters as f64;
    Ok((host, gpu))
}
