//! The ceilings a sweep is judged against, measured on the same device in
//! the same process before it starts.

use crate::report::Ceilings;
use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use ringreduce::gpu::module::Kernels;
use ringreduce::gpu::resident_blocks_of;
use ringreduce::kernels::abi::{LocalArgs, BATCH_RANKS, BLOCK_THREADS, LOCAL_THREADS};
use ringreduce::kernels::catalogue::{self, Kind, COPY_BLOCK, COPY_GRID, PINGPONG, REDUCE_BLOCK};
use ringreduce::{Collective, DataType, Op};
use std::error::Error;
use std::sync::Arc;
use std::time::Instant;

const TIMING: Option<sys::CUevent_flags> = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);

/// The median of `v` (not empty): the upper one of an even count.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `reps` runs of `f` with events, returning the median in µs.
fn time_us(
    stream: &Arc<CudaStream>,
    reps: usize,
    mut f: impl FnMut() -> ringreduce::Result<()>,
) -> ringreduce::Result<f64> {
    f()?; // warm-up
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let a = stream.record_event(TIMING)?;
        f()?;
        let b = stream.record_event(TIMING)?;
        b.synchronize()?;
        t.push(a.elapsed_ms(&b)? as f64 * 1e3);
    }
    Ok(median(t))
}

/// Measures the device-wide copy (the copy kernel and the driver's copy),
/// the plain single-block copy and reduce (no prefetch: on an H200 it slowed
/// the plain copy), and the flag ping-pong. `copy_bytes` should be far
/// larger than the L2 cache.
pub fn measure(ctx: &Arc<CudaContext>, copy_bytes: u64) -> Result<Ceilings, Box<dyn Error>> {
    let kernels = Kernels::of(ctx)?;
    let stream = ctx.new_stream()?;
    let words = (copy_bytes / 8) as usize;
    let pattern: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9))
        .collect();
    let src = stream.clone_htod(&pattern)?;
    let mut dst = stream.alloc_zeros::<u64>(words)?;
    let (sp, _g1) = src.device_ptr(&stream);
    let (dp, _g2) = dst.device_ptr_mut(&stream);
    let n = words as u64;
    let threads = BLOCK_THREADS;

    let (mut kernel_copy, blocks) = grid_copy(ctx, &kernels, &stream, dp, sp, n)?;
    let t_grid = time_us(&stream, 10, &mut kernel_copy)?;
    verify_copy(&stream, dp, &pattern, "the copy kernel", &mut kernel_copy)?;
    let mut driver_copy = || {
        // SAFETY: two buffers of `n` u64s, on this context.
        unsafe { result::memcpy_dtod_async(dp, sp, n as usize * 8, stream.cu_stream()) }?;
        Ok(())
    };
    let t_driver = time_us(&stream, 10, &mut driver_copy)?;
    verify_copy(&stream, dp, &pattern, "the driver's copy", &mut driver_copy)?;
    drop(pattern);

    let block = kernels.other(&COPY_BLOCK)?.clone();
    let block_cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let t_block = time_us(&stream, 5, || {
        let mut b = stream.launch_builder(&block);
        b.arg(&dp).arg(&sp).arg(&n);
        // SAFETY: as above.
        unsafe { b.launch(block_cfg) }?;
        Ok(())
    })?;

    // The reduce reads two halves of `src` into one half of `dst`: each
    // output element costs two reads and a write, like a middle ring step.
    let reduce = kernels.other(&REDUCE_BLOCK)?.clone();
    let half_f32 = n; // n u64s = 2n f32s: two inputs of n f32s each
    let src_b = sp + half_f32 * 4;
    let t_reduce = time_us(&stream, 5, || {
        let mut b = stream.launch_builder(&reduce);
        b.arg(&dp).arg(&sp).arg(&src_b).arg(&half_f32);
        // SAFETY: `src` holds 2n f32s (two inputs of n), `dst` at least n.
        unsafe { b.launch(block_cfg) }?;
        Ok(())
    })?;

    let ping = kernels.other(&PINGPONG)?.clone();

    let mut flags = stream.alloc_zeros::<u64>(32)?;
    let iters: u64 = 10_000;
    let ping_cfg = LaunchConfig {
        grid_dim: (2, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let t_ping = time_us(&stream, 3, || {
        stream.memset_zeros(&mut flags)?;
        let (fp, _g) = flags.device_ptr(&stream);
        let mut b = stream.launch_builder(&ping);
        b.arg(&fp).arg(&iters);
        // SAFETY: 32 zeroed words; both blocks fit on any device.
        unsafe { b.launch(ping_cfg) }?;
        Ok(())
    })?;
    let [(launch_us, launch_host_us), (local_launch_us, local_launch_host_us)] =
        launch_floors(&stream, &kernels, &block)?;
    let kernel_gbps = copy_bytes as f64 / t_grid / 1e3;
    let driver_gbps = copy_bytes as f64 / t_driver / 1e3;
    Ok(Ceilings {
        device_copy_gbps: kernel_gbps.max(driver_gbps),
        device_copy_kernel_gbps: kernel_gbps,
        device_copy_blocks: blocks,
        device_copy_driver_gbps: driver_gbps,
        block_copy_gbps: copy_bytes as f64 / t_block / 1e3,
        block_reduce_gbps: (half_f32 * 4) as f64 / t_reduce / 1e3,
        pingpong_rtt_us: t_ping / iters as f64,
        launch_us,
        launch_host_us,
        local_launch_us,
        local_launch_host_us,
        copy_bytes,
    })
}

/// Launches back to back of `kernel` on `grid` blocks of `threads` with
/// `params`, through the driver call the collectives use: (µs per launch
/// between events, µs of host time per launch), the medians of five runs
/// of 1000. The kernel must do nothing with these arguments.
fn empty_launches(
    stream: &Arc<CudaStream>,
    kernel: &CudaFunction,
    (grid, threads): (u32, u32),
    params: &mut [*mut std::ffi::c_void],
) -> ringreduce::Result<(f64, f64)> {
    let (mut gpu, mut host) = (Vec::new(), Vec::new());
    for _ in 0..FLOOR_RUNS {
        stream.synchronize()?;
        let a = stream.record_event(TIMING)?;
        let t0 = Instant::now();
        for _ in 0..FLOOR_LAUNCHES {
            // SAFETY: the caller's arguments make the kernel touch nothing.
            unsafe {
                result::launch_kernel(
                    kernel.cu_function(),
                    (grid, 1, 1),
                    (threads, 1, 1),
                    0,
                    stream.cu_stream(),
                    params,
                )
            }?;
        }
        host.push(t0.elapsed().as_secs_f64() * 1e6 / FLOOR_LAUNCHES as f64);
        let b = stream.record_event(TIMING)?;
        b.synchronize()?;
        gpu.push(a.elapsed_ms(&b)? as f64 * 1e3 / FLOOR_LAUNCHES as f64);
    }
    // The first run is the warm-up.
    Ok((median(gpu.split_off(1)), median(host.split_off(1))))
}

/// The floor of a one-launch collective: the single-block copy with
/// nothing to copy, then the local `f32` sum entry with no ranks on a grid
/// of [`LOCAL_FLOOR_BLOCKS`], its 312-byte argument and its own function,
/// so that what a local call costs beyond it is the library's own.
fn launch_floors(
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    block: &CudaFunction,
) -> ringreduce::Result<[(f64, f64); 2]> {
    let (mut dst, mut src, mut none) = (0u64, 0u64, 0u64);
    let mut copy_params = [
        &mut dst as *mut u64 as *mut std::ffi::c_void,
        &mut src as *mut u64 as *mut std::ffi::c_void,
        &mut none as *mut u64 as *mut std::ffi::c_void,
    ];
    let copy = empty_launches(stream, block, (1, BLOCK_THREADS), &mut copy_params)?;
    let f32_sum =
        catalogue::collective_index(Kind::Local, Collective::AllReduce, DataType::F32, Op::Sum)
            .expect("a local entry");
    let local = kernels.collective(f32_sum)?.clone();
    let mut args = LocalArgs {
        collective: 0,
        ranks: 0,
        blocks: LOCAL_FLOOR_BLOCKS as u64,
        total: 0,
        segment: 0,
        aligned: 0,
        send: [0; BATCH_RANKS],
        recv: [0; BATCH_RANKS],
        divisor: 0,
    };
    let mut local_params = [&mut args as *mut LocalArgs as *mut std::ffi::c_void];
    let grid = (LOCAL_FLOOR_BLOCKS, LOCAL_THREADS);
    let local = empty_launches(stream, &local, grid, &mut local_params)?;
    Ok([copy, local])
}

/// Timed runs of [`FLOOR_LAUNCHES`] for each floor (the first is the
/// warm-up).
const FLOOR_RUNS: usize = 6;
/// Launches per timed run of a floor.
const FLOOR_LAUNCHES: usize = 1000;

/// Launches of the local `f32` sum entry the ceilings make before the
/// sweep: a profiler timing that entry skips these, or their 2 us empty
/// runs outnumber the collectives' own (the suite's kernel times).
pub const LOCAL_FLOOR_LAUNCHES: usize = FLOOR_RUNS * FLOOR_LAUNCHES;

/// Blocks of the local floor's grid: a small local call's at k = 8.
const LOCAL_FLOOR_BLOCKS: u32 = 8;

/// The copy kernel over `n` `u64`s as a launch to time, and its blocks: one
/// resident wave, so that no block waits for another to end. (The old
/// fixed eight per multiprocessor was two whole waves on an H200 only
/// because ptxas gave the kernel 55 registers, four blocks of 257 threads
/// per SM.)
fn grid_copy<'a>(
    ctx: &Arc<CudaContext>,
    kernels: &Kernels,
    stream: &'a Arc<CudaStream>,
    dp: sys::CUdeviceptr,
    sp: sys::CUdeviceptr,
    n: u64,
) -> ringreduce::Result<(impl FnMut() -> ringreduce::Result<()> + 'a, u32)> {
    let grid = kernels.other(&COPY_GRID)?.clone();
    let blocks = resident_blocks_of(ctx, std::iter::once(&grid), BLOCK_THREADS)? as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let launch = move || {
        let mut b = stream.launch_builder(&grid);
        b.arg(&dp).arg(&sp).arg(&n);
        // SAFETY: two buffers of `n` u64s.
        unsafe { b.launch(cfg) }?;
        Ok(())
    };
    Ok((launch, blocks))
}

/// Zeroes the `want.len()` words at `dp`, runs `copy` once more and
/// compares every word with `want`: a copy that skipped data would make a
/// ceiling that flatters every ratio measured against it.
fn verify_copy(
    stream: &Arc<CudaStream>,
    dp: sys::CUdeviceptr,
    want: &[u64],
    what: &str,
    mut copy: impl FnMut() -> ringreduce::Result<()>,
) -> Result<(), Box<dyn Error>> {
    let mut got = vec![0u64; want.len()];
    // SAFETY: `dp` holds `want.len()` words on this stream's context; the
    // stream is synchronised before `got` is read.
    unsafe { result::memset_d8_async(dp, 0, want.len() * 8, stream.cu_stream()) }?;
    copy()?;
    unsafe { result::memcpy_dtoh_async(&mut got, dp, stream.cu_stream()) }?;
    stream.synchronize()?;
    match first_difference(&got, want) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what} copied word {i} of {} wrong ({:#x}, not {:#x}): no ceiling",
            want.len(),
            got[i],
            want[i]
        )
        .into()),
    }
}

/// The first index where `got` and `want` differ, if any.
fn first_difference(got: &[u64], want: &[u64]) -> Option<usize> {
    (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i))
}

#[cfg(test)]
mod tests {
    use super::first_difference;

    #[test]
    fn a_copy_is_checked_to_its_last_word() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 0, 3], &[1, 2, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
