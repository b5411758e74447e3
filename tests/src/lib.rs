//! The harness the integration tests share: deterministic inputs for every
//! type, one `Backend` trait over the CPU execution and the GPU, and a case
//! runner that compares against the sequential reference bit for bit.

pub mod backend;
pub mod cases;
pub mod data;
pub mod soak;

pub use backend::{Backend, CpuBackend, GpuBackend};
pub use cases::{run_case, Case, Outcome};
pub use data::with_type;

/// A fixed non-identity ring order of `k` ranks: reversed, then rotated.
pub fn shuffled(k: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..k as u32).rev().collect();
    v.rotate_left(1);
    v
}

/// The GPU to test on, or `None` after printing why the GPU tests skip.
pub fn gpu_or_skip(test: &str) -> Option<usize> {
    match ringreduce::gpu::device_count() {
        Ok(n) if n > 0 => Some(0),
        Ok(_) => {
            println!("{test}: skipped: the CUDA driver reports no device");
            None
        }
        Err(e) => {
            println!("{test}: skipped: {e}");
            None
        }
    }
}

/// Where the GPU tests put `k` ranks, starting at device `first`: one rank
/// per GPU round robin when the machine has several (the peer-to-peer
/// path, virtual ranks too once `k` exceeds the GPUs), else `k` virtual
/// ranks on `first`. The same tests thus serve one GPU and many.
pub fn placement(first: usize, k: usize) -> Vec<usize> {
    let count = ringreduce::gpu::device_count().unwrap_or(1).max(1);
    (0..k).map(|u| (first + u) % count).collect()
}

/// A communicator over [`placement`]`(first, k)`.
pub fn gpu_comm(
    first: usize,
    k: usize,
    config: ringreduce::CommConfig,
) -> ringreduce::Result<ringreduce::Communicator> {
    ringreduce::Communicator::with_placement(&placement(first, k), config)
}
