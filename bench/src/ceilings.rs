//! The ceilings a sweep is judged against, measured on the same device in
//! the same process before it starts.

use crate::report::Ceilings;
use cudarc::driver::{
    result, sys, CudaContext, CudaModule, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use ringreduce::gpu::module::{
    module_for, COPY_BLOCK_KERNEL, COPY_GRID_KERNEL, PINGPONG_KERNEL, REDUCE_BLOCK_KERNEL,
};
use ringreduce::kernels::abi::BLOCK_THREADS;
use std::sync::Arc;

const TIMING: Option<sys::CUevent_flags> = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
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
pub fn measure(ctx: &Arc<CudaContext>, copy_bytes: u64) -> ringreduce::Result<Ceilings> {
    let module = module_for(ctx)?;
    let stream = ctx.new_stream()?;
    let words = (copy_bytes / 8) as usize;
    let src = stream.clone_htod(
        &(0..words as u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9))
            .collect::<Vec<_>>(),
    )?;
    let mut dst = stream.alloc_zeros::<u64>(words)?;
    let (sp, _g1) = src.device_ptr(&stream);
    let (dp, _g2) = dst.device_ptr_mut(&stream);
    let n = words as u64;
    let threads = BLOCK_THREADS;

    let (t_grid, blocks) = time_grid_copy(ctx, &module, &stream, dp, sp, n)?;
    let t_driver = time_us(&stream, 10, || {
        // SAFETY: two buffers of `n` u64s, on this context.
        unsafe { result::memcpy_dtod_async(dp, sp, n as usize * 8, stream.cu_stream()) }?;
        Ok(())
    })?;

    let block = module.load_function(COPY_BLOCK_KERNEL)?;
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
    let reduce = module.load_function(REDUCE_BLOCK_KERNEL)?;
    let half_f32 = n; // n u64s = 2n f32s: two inputs of n f32s each
    let src_b = sp + half_f32 * 4;
    let t_reduce = time_us(&stream, 5, || {
        let mut b = stream.launch_builder(&reduce);
        b.arg(&dp).arg(&sp).arg(&src_b).arg(&half_f32);
        // SAFETY: `src` holds 2n f32s (two inputs of n), `dst` at least n.
        unsafe { b.launch(block_cfg) }?;
        Ok(())
    })?;

    let ping = module.load_function(PINGPONG_KERNEL)?;

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
        copy_bytes,
    })
}

/// Blocks for a grid-stride copy: exactly the ones the driver says fit at
/// once, so that no block waits for another to end. (The old fixed eight
/// per multiprocessor was two whole waves on an H200 only because ptxas
/// gives the kernel 55 registers, four blocks of 257 threads per SM.)
fn one_wave(sms: u32, per_sm: u32) -> u32 {
    sms * per_sm.max(1)
}

/// Times the copy kernel over `n` `u64`s with one resident wave of blocks;
/// returns the median µs and the blocks.
fn time_grid_copy(
    ctx: &Arc<CudaContext>,
    module: &Arc<CudaModule>,
    stream: &Arc<CudaStream>,
    dp: sys::CUdeviceptr,
    sp: sys::CUdeviceptr,
    n: u64,
) -> ringreduce::Result<(f64, u32)> {
    let sms =
        ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    let grid = module.load_function(COPY_GRID_KERNEL)?;
    let per_sm = grid.occupancy_max_active_blocks_per_multiprocessor(BLOCK_THREADS, 0, None)?;
    let blocks = one_wave(sms, per_sm);
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let t = time_us(stream, 10, || {
        let mut b = stream.launch_builder(&grid);
        b.arg(&dp).arg(&sp).arg(&n);
        // SAFETY: two buffers of `n` u64s.
        unsafe { b.launch(cfg) }?;
        Ok(())
    })?;
    Ok((t, blocks))
}

#[cfg(test)]
mod tests {
    use super::one_wave;

    #[test]
    fn the_copy_grid_is_one_resident_wave() {
        assert_eq!(one_wave(132, 7), 924);
        // A kernel the driver says cannot fit still gets a block per
        // multiprocessor, so that the launch reports the real error.
        assert_eq!(one_wave(132, 0), 132);
    }
}
