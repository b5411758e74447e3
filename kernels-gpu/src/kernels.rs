//! PTX entry points: one reduce-scatter kernel per (type, op), plus the
//! three kernels the bench runner measures its ceilings with.

use crate::algorithm::reduce_scatter;
use crate::arch::nvptx::{block_idx, grid_dim, trap, Gpu};
use crate::args::KernelArgs;
use crate::device::{Device, Scope};
use crate::op::{Avg, Max, Min, Prod, Sum};
use crate::plan::{BLOCK_THREADS, GPU_THREADS};
use crate::primitives::{transfer, COPY, REDUCE};
use half::{bf16, f16};

type Block = Gpu<{ GPU_THREADS as u32 }>;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    trap()
}

macro_rules! rs_kernels {
    ($($name:ident: $t:ty, $op:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(args: KernelArgs) {
            reduce_scatter::<Block, $t, $op, GPU_THREADS>(&Block::default(), &args);
        }
    )*};
}

macro_rules! rs_types {
    ($($t:ident => $sum:ident $prod:ident $max:ident $min:ident $avg:ident;)*) => {$(
        rs_kernels! {
            $sum: $t, Sum;
            $prod: $t, Prod;
            $max: $t, Max;
            $min: $t, Min;
            $avg: $t, Avg;
        }
    )*};
}

// Names follow `ringreduce_rs_<type>_<op>`; the host builds them from
// `DataType::name` and `Op::name`, and a host test checks every one exists.
rs_types! {
    i8 => ringreduce_rs_int8_sum ringreduce_rs_int8_prod ringreduce_rs_int8_max ringreduce_rs_int8_min ringreduce_rs_int8_avg;
    u8 => ringreduce_rs_uint8_sum ringreduce_rs_uint8_prod ringreduce_rs_uint8_max ringreduce_rs_uint8_min ringreduce_rs_uint8_avg;
    i32 => ringreduce_rs_int32_sum ringreduce_rs_int32_prod ringreduce_rs_int32_max ringreduce_rs_int32_min ringreduce_rs_int32_avg;
    u32 => ringreduce_rs_uint32_sum ringreduce_rs_uint32_prod ringreduce_rs_uint32_max ringreduce_rs_uint32_min ringreduce_rs_uint32_avg;
    i64 => ringreduce_rs_int64_sum ringreduce_rs_int64_prod ringreduce_rs_int64_max ringreduce_rs_int64_min ringreduce_rs_int64_avg;
    u64 => ringreduce_rs_uint64_sum ringreduce_rs_uint64_prod ringreduce_rs_uint64_max ringreduce_rs_uint64_min ringreduce_rs_uint64_avg;
    f16 => ringreduce_rs_half_sum ringreduce_rs_half_prod ringreduce_rs_half_max ringreduce_rs_half_min ringreduce_rs_half_avg;
    bf16 => ringreduce_rs_bfloat16_sum ringreduce_rs_bfloat16_prod ringreduce_rs_bfloat16_max ringreduce_rs_bfloat16_min ringreduce_rs_bfloat16_avg;
    f32 => ringreduce_rs_float_sum ringreduce_rs_float_prod ringreduce_rs_float_max ringreduce_rs_float_min ringreduce_rs_float_avg;
    f64 => ringreduce_rs_double_sum ringreduce_rs_double_prod ringreduce_rs_double_max ringreduce_rs_double_min ringreduce_rs_double_avg;
}

/// One block copying `n` `u64`s with the reduce-scatter's own copy loop:
/// the ceiling of one-block mode.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ringreduce_copy_block(dst: u64, src: u64, n: u64) {
    let g = Block::default();
    let tid = g.thread_idx();
    if tid < GPU_THREADS {
        let s = src as *const u64;
        transfer::<Block, u64, Sum, GPU_THREADS, COPY>(
            &g,
            tid,
            dst as *mut u64,
            s,
            s,
            n,
            true,
            1,
            0,
        );
    }
}

/// Every block of the grid copying its share of `n` `u64`s (16-byte aligned
/// buffers): the device-wide copy bandwidth.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ringreduce_copy_grid(dst: u64, src: u64, n: u64) {
    let g = Block::default();
    let threads = BLOCK_THREADS as u64;
    let lane = block_idx() * threads + g.thread_idx();
    let stride = grid_dim() * threads;
    let packs = n / 2;
    let (s, d) = (src as *const u8, dst as *mut u8);
    let mut p = lane;
    while p < packs {
        let at = (p * 16) as usize;
        g.store_pack(d.add(at), g.load_pack(s.add(at)));
        p += stride;
    }
    if lane == 0 && n % 2 == 1 {
        (dst as *mut u64)
            .add(n as usize - 1)
            .write((src as *const u64).add(n as usize - 1).read());
    }
}

/// One block reducing two arrays of `n` `f32`s into a third with the
/// reduce-scatter's reduce loop: the ceiling of a middle ring step, which
/// reads two inputs per output.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ringreduce_reduce_block(dst: u64, a: u64, b: u64, n: u64) {
    let g = Block::default();
    let tid = g.thread_idx();
    if tid < GPU_THREADS {
        let (d, a, b) = (dst as *mut f32, a as *const f32, b as *const f32);
        transfer::<Block, f32, Sum, GPU_THREADS, REDUCE>(&g, tid, d, a, b, n, true, 1, 0);
    }
}

/// Two blocks bouncing a counter `iters` times through two flags, with the
/// same acquire loads and fences as the ring protocol: the latency of one
/// signal round trip.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ringreduce_pingpong(flags: u64, iters: u64) {
    let g = Gpu::<{ GPU_THREADS as u32 }>;
    if g.thread_idx() != 0 {
        return;
    }
    let ping = flags as *mut u64;
    let pong = ping.add(1);
    let me = block_idx();
    // Bounded like every other wait: give up after 10 s.
    let deadline = g.now_ns().saturating_add(10_000_000_000);
    for i in 1..=iters {
        if me == 0 {
            g.fence(Scope::Sys);
            g.store_volatile(ping, i);
            while g.load_acquire(pong, Scope::Sys) != i {
                if g.now_ns() > deadline {
                    return;
                }
            }
        } else {
            while g.load_acquire(ping, Scope::Sys) != i {
                if g.now_ns() > deadline {
                    return;
                }
            }
            g.fence(Scope::Sys);
            g.store_volatile(pong, i);
        }
    }
}
