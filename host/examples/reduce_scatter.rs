//! A small reduce-scatter: four ranks, f32 sum. It runs on the GPU (virtual
//! ranks) when one is present and says so otherwise, then runs the same
//! kernels on the CPU execution.

use ringreduce::{
    reference, CommConfig, Communicator, CpuBuffers, CpuCommunicator, HostBuffer, Op, RsBuffers,
};

const K: usize = 4;
const N: usize = 1 << 16;

fn inputs() -> Vec<Vec<f32>> {
    (0..K)
        .map(|r| {
            (0..K * N)
                .map(|i| ((i * 31 + r * 7) % 97) as f32 - 48.0)
                .collect()
        })
        .collect()
}

fn check(got: &[Vec<f32>], ring: &ringreduce::RingOrder) -> usize {
    let inp = inputs();
    let refs: Vec<&[f32]> = inp.iter().map(|v| v.as_slice()).collect();
    let want = reference::reduce_scatter(&refs, ring, Op::Sum);
    got.iter()
        .zip(&want)
        .map(|(g, w)| g.iter().zip(w).filter(|(a, b)| a != b).count())
        .sum()
}

fn on_gpu() -> ringreduce::Result<usize> {
    let comm = Communicator::with_config(0, K, CommConfig::default().ring_order(vec![1, 2, 0, 3]))?;
    let streams = comm.new_streams()?;
    let mut send = Vec::new();
    let mut recv = Vec::new();
    for (s, data) in streams.iter().zip(inputs()) {
        send.push(s.clone_htod(&data)?);
        recv.push(s.alloc_zeros::<f32>(N)?);
    }
    let mut bufs: Vec<RsBuffers<'_, f32>> = send
        .iter()
        .zip(recv.iter_mut())
        .map(|(s, r)| RsBuffers::out_of_place(s.as_view(), r.as_view_mut()))
        .collect();
    comm.reduce_scatter(&mut bufs, Op::Sum, &streams)?;
    drop(bufs);
    comm.synchronize()?;
    let got: Vec<Vec<f32>> = recv
        .iter()
        .zip(&streams)
        .map(|(r, s)| s.clone_dtoh(r))
        .collect::<Result<_, _>>()?;
    Ok(check(&got, comm.ring_order()))
}

fn on_cpu() -> ringreduce::Result<usize> {
    let comm = CpuCommunicator::with_config(K, CommConfig::default().ring_order(vec![1, 2, 0, 3]))?;
    let send: Vec<HostBuffer<f32>> = inputs().iter().map(|v| HostBuffer::from_slice(v)).collect();
    let recv: Vec<HostBuffer<f32>> = (0..K).map(|_| HostBuffer::zeroed(N)).collect();
    let bufs: Vec<CpuBuffers<f32>> = (0..K)
        .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view()))
        .collect();
    comm.reduce_scatter(&bufs, Op::Sum)?;
    comm.synchronize()?;
    let got: Vec<Vec<f32>> = recv.iter().map(|r| r.to_vec()).collect();
    Ok(check(&got, comm.ring_order()))
}

fn main() {
    println!("reduce-scatter: {K} ranks, {N} f32 per rank's result, ring order [1, 2, 0, 3]");
    match ringreduce::gpu::device_count() {
        Ok(n) if n > 0 => match on_gpu() {
            Ok(w) => println!("GPU (virtual ranks on device 0): {} wrong elements", w),
            Err(e) => {
                eprintln!("GPU run failed: {e}");
                std::process::exit(1);
            }
        },
        Ok(_) => println!("No GPU: the CUDA driver reports no device; using the CPU execution."),
        Err(e) => println!("No GPU ({e}); using the CPU execution."),
    }
    match on_cpu() {
        Ok(w) => {
            println!("CPU execution (same kernel code on threads): {w} wrong elements");
            if w != 0 {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("CPU run failed: {e}");
            std::process::exit(1);
        }
    }
}
