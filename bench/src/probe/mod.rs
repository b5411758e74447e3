//! Probes that split a small collective's time where the bench cannot:
//! the local kernel's own GPU time per launch by shape (`kernel`), and the
//! library's host time against the driver's (`host`); and a fresh
//! process's first calls (`cold`). The suite runs them (`probes-k8`,
//! `probes-k4`, `cold-start`); the `ringreduce-probe` binary runs one.

pub mod cold;
pub mod host;
pub mod kernel;

use cudarc::driver::{result, CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError};
use ringreduce::kernels::abi::{LocalArgs, Work, LOCAL_THREADS};
use ringreduce::kernels::Geometry;
use ringreduce::Collective;
use std::sync::Arc;

/// The local entry's argument for `c` over `send.len()` ranks of `n` f32
/// each on a grid of `blocks`, built as the planner's are (each rank's
/// geometry, then [`LocalArgs::new`]), so the probes launch what the
/// library would; `None` past a batch's ranks or with none.
fn local_args(
    c: Collective,
    blocks: u64,
    n: u64,
    aligned: bool,
    send: &[u64],
    recv: &[u64],
) -> Option<LocalArgs> {
    let k = send.len() as u64;
    let works: Vec<Work> = send
        .iter()
        .zip(recv)
        .map(|(&send, &recv)| Work {
            collective: c as u64,
            send,
            recv,
            geometry: Geometry::new(c, k, n, 4, 1, 1),
            aligned: aligned as u64,
            ..Work::default()
        })
        .collect();
    LocalArgs::new(&works, blocks)
}

/// Each buffer's device address.
fn device_ptrs(bufs: &[CudaSlice<f32>], stream: &Arc<CudaStream>) -> Vec<u64> {
    bufs.iter().map(|b| b.device_ptr(stream).0).collect()
}

/// Enqueues one launch of the local entry `f` with argument `a`, on its
/// grid of `a.blocks` blocks.
///
/// # Safety
/// `a` must name buffers on `f`'s device that hold what it reads and
/// writes, until the launch has run.
unsafe fn launch_local(
    f: &CudaFunction,
    stream: &CudaStream,
    mut a: LocalArgs,
) -> Result<(), DriverError> {
    let mut params = [&mut a as *mut LocalArgs as *mut std::ffi::c_void];
    result::launch_kernel(
        f.cu_function(),
        (a.blocks as u32, 1, 1),
        (LOCAL_THREADS, 1, 1),
        0,
        stream.cu_stream(),
        &mut params,
    )
}
