//! Enqueuing a planned collective: one grid of `channels` blocks per rank,
//! each on its rank's stream, in stream order with that rank's earlier
//! collectives.

use super::setup::Inner;
use crate::error::Result;
use crate::planner::Plan;
use cudarc::driver::{result, CudaStream};
use ringreduce_kernels::abi::{Work, BLOCK_THREADS};
use ringreduce_kernels::{DataType, Op};
use std::sync::Arc;

/// Enqueues `plan` on `streams` (one per user rank). A failed launch
/// breaks the communicator: the ranks already launched cannot finish.
pub fn enqueue(
    inner: &Inner,
    plan: Plan,
    dtype: DataType,
    op: Op,
    streams: &[Arc<CudaStream>],
) -> Result<()> {
    let mut last = inner.launch.lock().unwrap_or_else(|e| e.into_inner());
    match plan {
        Plan::Nothing => Ok(()),
        Plan::Copy { send, recv, bytes } => {
            hand_over(&mut last[0], &streams[0])?;
            inner.ranks[0].ctx.bind_to_thread()?;
            // SAFETY: validated addresses on this device.
            unsafe {
                result::memcpy_dtod_async(recv, send, bytes as usize, streams[0].cu_stream())?
            };
            Ok(())
        }
        Plan::Launch {
            channels, works, ..
        } => {
            let withhold = inner.state.hooks().withhold_rank;
            for (u, w) in works.iter().enumerate() {
                if withhold == Some(u) {
                    continue;
                }
                let r = hand_over(&mut last[u], &streams[u])
                    .and_then(|()| launch(inner, u, w, channels, dtype, op, &streams[u]));
                if let Err(e) = r {
                    inner.state.mark_broken(&e);
                    return Err(e);
                }
            }
            Ok(())
        }
    }
}

/// Launches user rank `u`'s grid.
fn launch(
    inner: &Inner,
    u: usize,
    w: &Work,
    channels: u64,
    dtype: DataType,
    op: Op,
    stream: &CudaStream,
) -> Result<()> {
    let f = inner.kernels[u].get(dtype, op);
    inner.ranks[u].ctx.bind_to_thread()?;
    let mut work = *w;
    let mut params = [&mut work as *mut Work as *mut std::ffi::c_void];
    // SAFETY: the kernel takes one `Work` by value; the driver copies it at
    // launch.
    unsafe {
        result::launch_kernel(
            f.cu_function(),
            (channels as u32, 1, 1),
            (BLOCK_THREADS, 1, 1),
            0,
            stream.cu_stream(),
            &mut params,
        )?
    };
    Ok(())
}

/// Keeps one rank's collectives in order when the caller switches streams:
/// the new stream waits for everything the last one had queued. With the
/// same stream every time, stream order already does this.
fn hand_over(last: &mut Option<Arc<CudaStream>>, next: &Arc<CudaStream>) -> Result<()> {
    if let Some(prev) = last.as_ref() {
        if prev.cu_stream() != next.cu_stream() {
            let e = prev.record_event(None)?;
            next.wait(&e)?;
        }
    }
    *last = Some(next.clone());
    Ok(())
}
