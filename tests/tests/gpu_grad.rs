//! The gradient layer on the GPU with virtual ranks: the CPU execution's
//! checks at larger sizes, results identical to the CPU execution, and the
//! stream ordering of the streaming form. Without a GPU every test is
//! reported as ignored, with the reason.

use ringreduce::{
    Algo, CommConfig, Communicator, CpuCommunicator, GradConfig, GradSync, Precision, Sparsity,
};
use ringreduce_tests::data::Rng;
use ringreduce_tests::grad::{
    bucketed_matches_fused, fused_matches_per_tensor, half_matches_reference, results,
    session_matches_fused, sparse_matches_selection, values,
};
use ringreduce_tests::{gpu_comm, run_gpu_tests};

fn gpu_grad_fused(dev: usize) {
    let comm = gpu_comm(dev, 8, CommConfig::default()).unwrap();
    let mut n = fused_matches_per_tensor(&*comm, 1, 500, 4096, 16 << 10, false);
    n += fused_matches_per_tensor(&*comm, 2, 24, 1 << 20, 2 << 20, false);
    n += session_matches_fused(&*comm, 4, 120, 64 << 10);
    for stream in [false, true] {
        n += bucketed_matches_fused(&*comm, 8, 300, 4096, 16 << 10, stream);
        n += bucketed_matches_fused(&*comm, 9, 24, 1 << 20, 2 << 20, stream);
    }
    // One communicator at a time: the second one's blocks may only fit
    // once the first has given its own back to the test pool.
    drop(comm);
    let cfg = CommConfig::default().algorithm(Algo::TwoShot);
    let direct = gpu_comm(dev, 4, cfg).unwrap();
    n += fused_matches_per_tensor(&*direct, 3, 200, 8192, 16 << 10, true);
    println!("gpu grad fused: {n} elements bitwise equal to one all-reduce per tensor");
}

fn gpu_grad_half_and_sparse(dev: usize) {
    let mut n = 0;
    for k in [8, 4] {
        let comm = gpu_comm(dev, k, CommConfig::default()).unwrap();
        for p in [Precision::F16, Precision::Bf16] {
            for prescale in [false, true] {
                n += half_matches_reference(&*comm, 5, (1 << 20) + 7, p, prescale);
            }
        }
        for s in [
            Sparsity::TopK(0.001),
            Sparsity::TopK(0.01),
            Sparsity::Threshold(35.0),
        ] {
            for dense_above in [1.0, 0.0] {
                n += sparse_matches_selection(&*comm, 6, (1 << 20) + 3, s, true, dense_above);
            }
        }
        n += sparse_matches_selection(&*comm, 7, 100_001, Sparsity::TopK(0.05), false, 1.0);
    }
    println!("gpu grad half and sparse: {n} elements checked");
}

/// The GPU and the CPU execution give bitwise the same results.
fn gpu_grad_matches_cpu(dev: usize) {
    let cfg = CommConfig::default().algorithm(Algo::Ring);
    let gpu = gpu_comm(dev, 4, cfg.clone()).unwrap();
    let cpu = CpuCommunicator::with_config(4, cfg).unwrap();
    let n = 30_011;
    let (a, b) = (results(&*gpu, n), results(&cpu, n));
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (x, y): (Vec<u32>, Vec<u32>) = (
            x.iter().map(|v| v.to_bits()).collect(),
            y.iter().map(|v| v.to_bits()).collect(),
        );
        assert_eq!(x, y, "result {i}");
    }
    println!("gpu grad: half, sparse and fused results identical to the CPU execution");
}

/// The streaming form with the gradients produced late on the users'
/// streams (behind a large copy), and the results read on those streams
/// after `wait`, with no host synchronisation in between: a missing event
/// either way gives stale data.
fn gpu_grad_streams(dev: usize) {
    let k = 4;
    let comm = gpu_comm(dev, k, CommConfig::default()).unwrap();
    let c: &Communicator = &comm;
    let users = c.new_streams().unwrap();
    let mut rng = Rng(9);
    let lens = [3000usize, 70_000, 5, 300_000, 1 << 18];
    let data: Vec<Vec<Vec<f32>>> = lens
        .iter()
        .map(|&n| (0..k).map(|_| values(&mut rng, n, 50, false)).collect())
        .collect();
    let mut tensors: Vec<Vec<_>> = lens
        .iter()
        .map(|&n| {
            users
                .iter()
                .map(|s| s.alloc_zeros::<f32>(n).unwrap())
                .collect()
        })
        .collect();
    let mut junk: Vec<_> = users
        .iter()
        .map(|s| {
            (
                s.alloc_zeros::<u8>(256 << 20).unwrap(),
                s.alloc_zeros::<u8>(256 << 20).unwrap(),
            )
        })
        .collect();
    let cfg = GradConfig {
        bucket_bytes: 512 << 10,
        ..GradConfig::default()
    };
    let mut g = GradSync::new(c, cfg).unwrap();
    for round in 0..3 {
        // Keep the users' streams busy, then write the gradients.
        for (u, s) in users.iter().enumerate() {
            let (a, b) = &mut junk[u];
            for _ in 0..4 {
                s.memcpy_dtod(&*a, b).unwrap();
            }
            for (t, d) in tensors.iter_mut().zip(&data) {
                let v: Vec<f32> = d[u].iter().map(|x| x + round as f32).collect();
                s.memcpy_htod(&v, &mut t[u]).unwrap();
            }
        }
        {
            let mut sess = g.session(users.clone()).unwrap();
            for t in tensors.iter_mut().rev() {
                sess.push(t).unwrap();
            }
            sess.wait(&users).unwrap();
        }
        for (i, (t, d)) in tensors.iter().zip(&data).enumerate() {
            let want: Vec<f32> = (0..lens[i])
                .map(|j| (0..k).map(|u| d[u][j] + round as f32).sum())
                .collect();
            for (u, s) in users.iter().enumerate() {
                assert_eq!(
                    s.clone_dtoh(&t[u]).unwrap(),
                    want,
                    "round {round} tensor {i} rank {u}"
                );
            }
        }
    }
    // The same with the gradients stored in buckets (`bucketed`), written
    // on the users' streams and marked ready in backward order.
    let mut grads = g.bucketed(&lens).unwrap();
    for round in 0..3 {
        for (u, s) in users.iter().enumerate() {
            let (a, b) = &mut junk[u];
            for _ in 0..4 {
                s.memcpy_dtod(&*a, b).unwrap();
            }
            for (t, d) in data.iter().enumerate() {
                let p = grads.place(t).unwrap().clone();
                let v: Vec<f32> = d[u].iter().map(|x| x + 2.0 * round as f32).collect();
                let bucket = &mut grads.bucket_mut(p.bucket)[u];
                s.memcpy_htod(&v, &mut bucket.slice_mut(p.at)).unwrap();
            }
        }
        {
            let mut sess = g.bucketed_session(&mut grads, users.clone()).unwrap();
            for t in (0..lens.len()).rev() {
                sess.ready(t).unwrap();
            }
            sess.wait(&users).unwrap();
        }
        for (t, d) in data.iter().enumerate() {
            let p = grads.place(t).unwrap().clone();
            let want: Vec<f32> = (0..lens[t])
                .map(|j| (0..k).map(|u| d[u][j] + 2.0 * round as f32).sum())
                .collect();
            for (u, s) in users.iter().enumerate() {
                let got = s
                    .clone_dtoh(&grads.bucket(p.bucket)[u].slice(p.at.clone()))
                    .unwrap();
                assert_eq!(got, want, "bucketed round {round} tensor {t} rank {u}");
            }
        }
    }
    let _ = c.synchronize();
    println!(
        "gpu grad streams: 3 rounds of 5 tensors pushed and 3 stored in buckets, \
         ordered by events only, all correct"
    );
}

fn main() -> std::process::ExitCode {
    run_gpu_tests(&[
        ("gpu_grad_fused", gpu_grad_fused),
        ("gpu_grad_half_and_sparse", gpu_grad_half_and_sparse),
        ("gpu_grad_matches_cpu", gpu_grad_matches_cpu),
        ("gpu_grad_streams", gpu_grad_streams),
    ])
}
