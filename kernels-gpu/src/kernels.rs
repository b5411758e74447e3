//! PTX entry points: every entry of the [`catalogue`](crate::catalogue),
//! generated from its rows, so the names and the code cannot disagree.
//! Each collective entry runs one algorithm family (ring, direct, local)
//! for one set of collectives; besides them, the gradient layer's task and
//! the kernels the bench measures its ceilings with.

use crate::abi::{Batch, LocalArgs, GPU_THREADS, LOCAL_THREADS};
use crate::arch::nvptx::{block_idx, grid_dim, trap, Gpu};
use crate::catalogue::{GATHERING, REDUCING};
use crate::device::Device;
use crate::op::Sum;
use crate::transfer::{transfer, COPY, REDUCE};
use crate::types::Scope;

type Block = Gpu<{ GPU_THREADS as u32 }>;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    trap()
}

/// An entry of kind `$kind` (`ring` or `direct`, also the name of its
/// function in [`crate::entry`]) over a [`Batch`]: each block runs one
/// channel of one rank's work, read in place from param space.
macro_rules! batch_entry {
    ($kind:ident, $a:ident, $b:ident, $t:ty, $op:ident, $set:expr) => {
        #[export_name = $crate::entry_name!($kind, $a, $b)]
        pub unsafe extern "ptx-kernel" fn $kind(b: Batch) {
            let Some((rank, channel)) = b.locate(block_idx()) else {
                return;
            };
            let w = $crate::param_batch!($crate::entry_name!($kind, $a, $b)).work(rank);
            $crate::entry::$kind::<Block, $t, $crate::op::$op, GPU_THREADS, { $set }>(
                &Block { channel },
                &w,
            );
        }
    };
}

/// The three entries of one catalogue row (`$a`, `$b` as in
/// [`entry_name!`](crate::entry_name)): ring, direct and local, for the
/// collectives of `$set`.
macro_rules! row_entries {
    ($a:ident, $b:ident, $t:ty, $op:ident, $set:expr) => {
        batch_entry!(ring, $a, $b, $t, $op, $set);
        batch_entry!(direct, $a, $b, $t, $op, $set);

        #[export_name = $crate::entry_name!(local, $a, $b)]
        pub unsafe extern "ptx-kernel" fn local(a: LocalArgs) {
            $crate::local::run::<Block, $t, $crate::op::$op, { LOCAL_THREADS as u64 }, { $set }>(
                &Block { channel: 0 },
                &a,
                &$crate::param_ends!($crate::entry_name!(local, $a, $b)),
                block_idx(),
            );
        }
    };
}

/// Every row's entries, each in a module of its own so that its Rust
/// names are unique.
macro_rules! collective_kernels {
    (
        reduce: [$($tn:ident: $t:ty => $dt:ident { $($on:ident: $op:ident),* })*]
        gather: [$($gn:ident: $gt:ty,)*]
    ) => {
        $(
            #[allow(non_snake_case)]
            mod $tn {
                $(pub mod $on {
                    use super::super::*;
                    row_entries!($tn, $on, $t, $op, REDUCING);
                })*
            }
        )*
        mod gather {
            $(pub mod $gn {
                use super::super::*;
                row_entries!(gather, $gn, $gt, Sum, GATHERING);
            })*
        }
    };
}

crate::for_each_collective_row!(collective_kernels);

/// One block copying `n` `u64`s with the reduce-scatter's own copy loop:
/// the ceiling of one-block mode.
#[export_name = crate::entry_name!(copy_block)]
pub unsafe extern "ptx-kernel" fn copy_block(dst: u64, src: u64, n: u64) {
    let g = Block::default();
    let tid = g.thread_idx();
    if tid < GPU_THREADS {
        let s = src as *const u64;
        transfer::<Block, u64, Sum, GPU_THREADS, COPY, false>(
            &g,
            tid,
            dst as *mut u64,
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
/// buffers): the device-wide copy bandwidth. Each lane has four packs in
/// flight, so that the ceiling is the memory's and not one load's round
/// trip per lane (the collectives' own loops keep more than one in flight).
/// Only the first `GPU_THREADS` lanes of a block copy, so that every warp's
/// 512 bytes start on a 32-byte sector, as the local collectives' do (with
/// 257 lanes, every other block's warps straddled one more sector).
#[export_name = crate::entry_name!(copy_grid)]
pub unsafe extern "ptx-kernel" fn copy_grid(dst: u64, src: u64, n: u64) {
    let g = Block::default();
    let tid = g.thread_idx();
    if tid >= GPU_THREADS {
        return;
    }
    let lane = block_idx() * GPU_THREADS + tid;
    let stride = grid_dim() * GPU_THREADS;
    let packs = n / 2;
    let (s, d) = (src as *const u8, dst as *mut u8);
    let at = |p: u64| (p * 16) as usize;
    crate::grad::four_at_a_time(
        lane,
        stride,
        packs,
        |p| g.load_pack(s.add(at(p))),
        |p, v| g.store_pack(d.add(at(p)), v),
    );
    if lane == 0 && n % 2 == 1 {
        (dst as *mut u64)
            .add(n as usize - 1)
            .write((src as *const u64).add(n as usize - 1).read());
    }
}

/// One block reducing two arrays of `n` `f32`s into a third with the
/// reduce-scatter's reduce loop: the ceiling of a middle ring step, which
/// reads two inputs per output.
#[export_name = crate::entry_name!(reduce_block)]
pub unsafe extern "ptx-kernel" fn reduce_block(dst: u64, a: u64, b: u64, n: u64) {
    let g = Block::default();
    let tid = g.thread_idx();
    if tid < GPU_THREADS {
        let (d, a, b) = (dst as *mut f32, a as *const f32, b as *const f32);
        transfer::<Block, f32, Sum, GPU_THREADS, REDUCE, false>(&g, tid, d, d, a, b, n, true, 1, 0);
    }
}

/// Two blocks bouncing a counter `iters` times through two flags, with the
/// same acquire loads and fences as the ring protocol: the latency of one
/// signal round trip.
#[export_name = crate::entry_name!(pingpong)]
pub unsafe extern "ptx-kernel" fn pingpong(flags: u64, iters: u64) {
    let g = Gpu::<{ GPU_THREADS as u32 }>::default();
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

/// The gradient layer's one entry: a [`Task`](crate::grad::abi::Task) of any
/// kind, its phases separated by block barriers.
#[export_name = crate::entry_name!(task)]
pub unsafe extern "ptx-kernel" fn task(t: crate::grad::abi::Task) {
    let g = crate::arch::nvptx::GpuLanes;
    let phases = crate::grad::abi::TaskKind::from_u64(t.kind).map_or(0, |k| k.phases());
    for p in 0..phases {
        if p > 0 {
            crate::arch::nvptx::block_sync();
        }
        crate::grad::run_phase(&g, &t, p);
    }
}
