//! The three collectives on four ranks, f32 sum, written once against the
//! `Collectives` trait: on the GPU (virtual ranks) when one is present, and
//! on the CPU execution, which runs the same kernel code on threads.

use ringreduce::{
    reference, Algorithm, Collective, Collectives, CommConfig, Communicator, CpuCommunicator, Op,
    Region,
};

const K: usize = 4;
const N: usize = 1 << 16;

/// Rank `r`'s input of `len` elements: fractions of mixed magnitudes, so
/// that a sum's last bits depend on the order it folds in.
fn input(r: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 31 + r * 7) % 97) as f32 * 0.37 - 17.9 + (r as f32) * 1e-3)
        .collect()
}

/// Runs collective `c` with count `N` on `comm`; returns the algorithm that
/// ran and the elements that differ from its sequential reference (each
/// algorithm folds in its own order, which the reference follows).
fn run<C: Collectives>(comm: &C, c: Collective) -> ringreduce::Result<(Algorithm, usize)> {
    let (send_len, recv_len) = c.lengths(K as u64, N as u64);
    let (send_len, recv_len) = (send_len as usize, recv_len as usize);
    let inputs: Vec<Vec<f32>> = (0..K).map(|r| input(r, send_len)).collect();
    let mut bufs = Vec::new();
    for (r, data) in inputs.iter().enumerate() {
        bufs.push((
            comm.upload(r, data)?,
            comm.upload(r, &vec![0f32; recv_len])?,
        ));
    }
    let mut regions: Vec<Region<'_, C::Buf<f32>>> = bufs
        .iter_mut()
        .map(|(send, recv)| Region::OutOfPlace {
            send,
            send_at: 0..send_len,
            recv,
            recv_at: 0..recv_len,
        })
        .collect();
    comm.collective(c, &mut regions, Op::Sum)?; // asynchronous
    drop(regions);
    comm.synchronize()?; // reports timeouts and aborts
    let refs: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
    let algorithm = comm.algorithm_for::<f32>(c, N)?;
    let want = reference::collective_by(c, algorithm, &refs, comm.ring_order(), Op::Sum);
    let mut wrong = 0;
    for (r, (_, recv)) in bufs.iter().enumerate() {
        let got = comm.download(r, recv)?;
        wrong += got.iter().zip(&want[r]).filter(|(a, b)| a != b).count();
    }
    Ok((algorithm, wrong))
}

/// Every collective on `comm`, printed under `name`.
fn all<C: Collectives>(name: &str, comm: &C) -> ringreduce::Result<usize> {
    let mut total = 0;
    for c in Collective::ALL {
        let (algorithm, w) = run(comm, c)?;
        println!(
            "{name}: {} ({}): {w} wrong elements",
            c.name(),
            algorithm.name()
        );
        total += w;
    }
    Ok(total)
}

fn main() {
    println!("{K} ranks, count {N} f32, ring order [1, 2, 0, 3]");
    let cfg = CommConfig::default().ring_order(vec![1, 2, 0, 3]);
    let mut wrong = 0;
    match ringreduce::gpu::device_count() {
        Ok(n) if n > 0 => match Communicator::with_config(0, K, cfg.clone())
            .and_then(|comm| all("GPU (virtual ranks on device 0)", &comm))
        {
            Ok(w) => wrong += w,
            Err(e) => {
                eprintln!("GPU run failed: {e}");
                std::process::exit(1);
            }
        },
        Ok(_) => println!("No GPU: the CUDA driver reports no device; using the CPU execution."),
        Err(e) => println!("No GPU ({e}); using the CPU execution."),
    }
    match CpuCommunicator::with_config(K, cfg).and_then(|comm| all("CPU execution", &comm)) {
        Ok(w) => wrong += w,
        Err(e) => {
            eprintln!("CPU run failed: {e}");
            std::process::exit(1);
        }
    }
    if wrong != 0 {
        std::process::exit(1);
    }
}
