//! The library's own host time per small collective, without a GPU.
//!
//! A collective launched one by one is host bound on the H100 machines
//! (`bench/NOTES.md`, nineteenth session), and the driver's share cannot be
//! told from the library's there. Here a stub `libcuda.so` whose calls do
//! nothing stands in for the driver, so what is timed is this crate:
//!
//! ```sh
//! gcc -O2 -shared -fPIC -o /tmp/stub/libcuda.so bench/stub-driver/libcuda_stub.c
//! cargo build --release -p ringreduce-bench --example host_probe
//! LD_LIBRARY_PATH=/tmp/stub target/release/examples/host_probe 8
//! ```
//!
//! `perf record -g` on the same command shows where the time goes.

use ringreduce::{Collective, Collectives, CommConfig, Communicator, Op, Region};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let k: usize = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 8,
    };
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
    let iters = 200_000;
    for round in 0..3 {
        let t = Instant::now();
        for _ in 0..iters {
            let mut regions: Vec<Region<'_, _>> = send
                .iter()
                .zip(recv.iter_mut())
                .map(|(s, r)| Region::OutOfPlace {
                    send: s,
                    send_at: 0..n,
                    recv: r,
                    recv_at: 0..n,
                })
                .collect();
            Collectives::collective(&comm, Collective::AllReduce, &mut regions, Op::Sum)?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!("round {round}: {us:.3} us per {algorithm:?} all-reduce of {n} f32, k = {k}");
    }
    Ok(())
}
