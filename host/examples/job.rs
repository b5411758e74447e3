//! One rank of a job of processes, as `torchrun`, `mpirun` and `srun`
//! start them: the three collectives on this process's rank, checked bit
//! for bit against the reference, which every process computes alike.
//!
//! ```sh
//! cargo build --release --example job
//! torchrun --no-python --nproc-per-node 4 target/release/examples/job
//! RINGREDUCE_ROOT=127.0.0.1:29500 mpirun -np 4 target/release/examples/job
//! RINGREDUCE_ROOT=$(hostname):29500 srun -n 4 target/release/examples/job
//! ```
//!
//! It runs on the GPUs when there are any (rank `r` on GPU `r` modulo the
//! GPUs; several processes share one best under MPS), else on the CPU
//! execution, or there with `RINGREDUCE_EXAMPLE_CPU=1`.

use ringreduce::{
    reference, Backend, Collective, Collectives, Comm, CommConfig, CpuBackend, GpuBackend, Op,
    Region,
};

const N: usize = 1 << 16;

/// Rank `r`'s input of `len` elements: fractions of mixed magnitudes, so
/// that a sum's last bits depend on the order it folds in.
fn input(r: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 31 + r * 7) % 97) as f32 * 0.37 - 17.9 + (r as f32) * 1e-3)
        .collect()
}

/// Collective `c` on this process's rank; returns the elements that
/// differ from the reference of the algorithm that ran.
fn run<B: Backend>(comm: &Comm<B>, c: Collective) -> ringreduce::Result<usize> {
    let (k, me) = (comm.k(), comm.local_ranks().start);
    let (send_len, recv_len) = c.lengths(k as u64, N as u64);
    let (send_len, recv_len) = (send_len as usize, recv_len as usize);
    let inputs: Vec<Vec<f32>> = (0..k).map(|r| input(r, send_len)).collect();
    let mut send = comm.upload(me, &inputs[me])?;
    let mut recv = comm.upload(me, &vec![f32::NAN; recv_len])?;
    let mut regions = [Region::OutOfPlace {
        send: &mut send,
        send_at: 0..send_len,
        recv: &mut recv,
        recv_at: 0..recv_len,
    }];
    comm.collective(c, &mut regions, Op::Sum)?;
    comm.synchronize()?;
    let got = comm.download(me, &recv)?;
    let refs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let algorithm = comm.algorithm_for::<f32>(c, N)?;
    let want = reference::collective_by(c, algorithm, &refs, comm.ring_order(), Op::Sum);
    Ok(got
        .iter()
        .zip(&want[me])
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count())
}

fn job<B: Backend>(what: &str) -> ringreduce::Result<usize> {
    let comm = Comm::<B>::from_env(CommConfig::default())?;
    let (k, me) = (comm.k(), comm.local_ranks().start);
    let mut wrong = 0;
    for c in Collective::ALL {
        let w = run(&comm, c)?;
        println!(
            "rank {me} of {k} ({what}): {} of {N} f32: {w} wrong",
            c.name()
        );
        wrong += w;
    }
    Ok(wrong)
}

fn main() -> std::process::ExitCode {
    let gpus = ringreduce::gpu::device_count().unwrap_or(0);
    let cpu = gpus == 0 || std::env::var_os("RINGREDUCE_EXAMPLE_CPU").is_some();
    let outcome = if cpu {
        job::<CpuBackend>("CPU execution")
    } else {
        job::<GpuBackend>("GPU")
    };
    match outcome {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
