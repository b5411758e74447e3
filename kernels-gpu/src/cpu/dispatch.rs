//! The CPU execution's kernel table: the code of every collective entry of
//! the kernel catalogue (`crate::catalogue`), generated from
//! its rows, so that the CPU runs what the GPU would for every call, the
//! equivalence classes included.
//!
//! These functions are deliberately not generic. A generic `run::<T>`
//! would be compiled again, once per entry, in every crate that calls a
//! CPU collective (each test binary, the bench); as a runtime table it is
//! compiled once, here, and the callers link to it.

use super::lane::Lane;
use crate::abi::{LocalArgs, Work, CPU_THREADS};
use crate::catalogue::{COLLECTIVE_ENTRIES, GATHERING, REDUCING};
use crate::{entry, local};

/// One entry's code on the CPU.
#[derive(Clone, Copy)]
enum CpuKernel {
    /// A ring or direct entry: one rank's block.
    Rank(unsafe fn(&Lane<'_>, &Work)),
    /// A local entry: one block of the grid.
    Local(unsafe fn(&Lane<'_>, &LocalArgs, u64)),
}

/// The three kinds of one row (`$a`, `$b` as in the entry names).
macro_rules! row_code {
    ($t:ty, $op:ident, $set:expr) => {
        #[inline(never)]
        pub(in crate::cpu) unsafe fn ring(lane: &Lane<'_>, w: &Work) {
            entry::ring::<Lane<'_>, $t, crate::op::$op, CPU_THREADS, { $set }>(lane, w)
        }

        #[inline(never)]
        pub(in crate::cpu) unsafe fn direct(lane: &Lane<'_>, w: &Work) {
            entry::direct::<Lane<'_>, $t, crate::op::$op, CPU_THREADS, { $set }>(lane, w)
        }

        #[inline(never)]
        pub(in crate::cpu) unsafe fn local(lane: &Lane<'_>, b: &LocalArgs, block: u64) {
            local::run::<Lane<'_>, $t, crate::op::$op, CPU_THREADS, { $set }>(lane, b, b, block)
        }
    };
}

/// Each type's code sits in a module of its own because rustc splits
/// codegen units by module: one module held every instance in one unit,
/// which one core compiled alone for ten minutes. The engine's functions
/// are `#[inline]` on the CPU for the same reason: a generic instance
/// otherwise lands in its defining module's unit, whichever row calls it.
macro_rules! cpu_table {
    (
        reduce: [$($tn:ident: $t:ty => $dt:ident { $($on:ident: $op:ident),* })*]
        gather: [$($gn:ident: $gt:ty,)*]
    ) => {
        $(
            #[allow(non_snake_case)]
            mod $tn {
                $(pub(in crate::cpu) mod $on {
                    use super::super::*;
                    row_code!($t, $op, REDUCING);
                })*
            }
        )*
        mod gather {
            $(pub(in crate::cpu) mod $gn {
                use super::super::*;
                row_code!($gt, Sum, GATHERING);
            })*
        }

        /// Every collective entry's code, in the catalogue's order, with
        /// its name (checked against the catalogue by a test).
        const TABLE: &[(&str, CpuKernel)] = &[
            $($(
                (crate::entry_name!(ring, $tn, $on), CpuKernel::Rank($tn::$on::ring)),
                (crate::entry_name!(direct, $tn, $on), CpuKernel::Rank($tn::$on::direct)),
                (crate::entry_name!(local, $tn, $on), CpuKernel::Local($tn::$on::local)),
            )*)*
            $(
                (crate::entry_name!(ring, gather, $gn), CpuKernel::Rank(gather::$gn::ring)),
                (crate::entry_name!(direct, gather, $gn), CpuKernel::Rank(gather::$gn::direct)),
                (crate::entry_name!(local, gather, $gn), CpuKernel::Local(gather::$gn::local)),
            )*
        ];
    };
}

crate::for_each_collective_row!(cpu_table);

const _: () = assert!(TABLE.len() == COLLECTIVE_ENTRIES.len());

/// Runs `w`'s block on `lane` with the code of collective entry `entry`
/// (a ring or direct one; see `catalogue::collective_index`).
///
/// # Safety
/// As for [`entry::ring`] and [`entry::direct`], with `entry` one that
/// serves `w`'s collective, algorithm and type.
pub unsafe fn run_rank(entry: usize, lane: &Lane<'_>, w: &Work) {
    match TABLE[entry].1 {
        CpuKernel::Rank(f) => f(lane, w),
        CpuKernel::Local(_) => unreachable!("a local entry for a rank's work"),
    }
}

/// Runs block `block` of a local call's grid on `lane` with the code of
/// collective entry `entry` (a local one).
///
/// # Safety
/// As for [`local::run`], with `entry` one that serves `b`'s collective
/// and type.
pub unsafe fn run_local(entry: usize, lane: &Lane<'_>, b: &LocalArgs, block: u64) {
    match TABLE[entry].1 {
        CpuKernel::Local(f) => f(lane, b, block),
        CpuKernel::Rank(_) => unreachable!("a rank's entry for a local grid"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::lane::{BlockSync, Lane, Trap};
    use super::*;
    use crate::abi::BATCH_RANKS;
    use crate::catalogue::{collective_index, Kind};
    use crate::{Collective, DataType, Op};
    use std::time::Instant;
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn the_table_is_the_catalogue() {
        for (e, (name, k)) in COLLECTIVE_ENTRIES.iter().zip(TABLE) {
            assert_eq!(e.name, *name);
            let kinds: &[Kind] = match k {
                CpuKernel::Rank(_) => &[Kind::Ring, Kind::Direct],
                CpuKernel::Local(_) => &[Kind::Local],
            };
            assert!(kinds.contains(&e.kind), "{name}");
        }
    }

    /// Runs every block of a local grid over `args`, lane by lane (the
    /// local kernel never waits, so one thread can run them in turn).
    fn run_grid(args: &LocalArgs) {
        run_grid_of(args, Collective::ReduceScatter, Op::Sum)
    }

    /// [`run_grid`] with the f32 local entry of `c` and `op`.
    fn run_grid_of(args: &LocalArgs, c: Collective, op: Op) {
        let f32_sum = collective_index(Kind::Local, c, DataType::F32, op).expect("an entry");
        let (sync, trap) = (BlockSync::new(CPU_THREADS as usize), Trap::default());
        for block in 0..args.blocks {
            for tid in 0..CPU_THREADS {
                let lane = Lane {
                    tid,
                    block,
                    sync: &sync,
                    epoch: Instant::now(),
                    trap: &trap,
                };
                // SAFETY: `args` names the test's live f32 buffers, long
                // enough for what it asks.
                unsafe { run_local(f32_sum, &lane, args, block) };
            }
        }
    }

    /// Three ranks' 4-element reduce-scatter on a grid of 5 blocks (one
    /// row: block 0 runs it alone), then the same argument claiming more
    /// segments than ranks, which must write nothing: segment `s` indexes
    /// rank `s`'s buffers unchecked on the GPU.
    #[test]
    fn a_small_call_runs_once_and_a_space_past_its_ranks_runs_nothing() {
        let (k, n) = (3usize, 4usize);
        let send: Vec<Vec<f32>> = (0..k)
            .map(|u| (0..k * n).map(|i| (100 * u + i) as f32).collect())
            .collect();
        let mut recv = vec![vec![-1.0f32; n]; k];
        let mut args = LocalArgs {
            collective: Collective::ReduceScatter as u64,
            ranks: k as u64,
            blocks: 5,
            total: (k * n) as u64,
            segment: n as u64,
            aligned: 0,
            send: [0; BATCH_RANKS],
            recv: [0; BATCH_RANKS],
            divisor: k as u64,
        };
        for u in 0..k {
            args.send[u] = send[u].as_ptr() as u64;
            args.recv[u] = recv[u].as_mut_ptr() as u64;
        }
        run_grid(&args);
        for (s, out) in recv.iter().enumerate() {
            for (e, &v) in out.iter().enumerate() {
                let want = (0..k).fold(0.0f32, |a, u| a + send[u][s * n + e]);
                assert_eq!(v.to_bits(), want.to_bits(), "rank {s} element {e}");
            }
        }
        for out in recv.iter_mut() {
            out.fill(-1.0);
        }
        run_grid(&LocalArgs {
            total: (k * n + 1) as u64,
            ..args
        });
        assert!(recv.iter().flatten().all(|&v| v == -1.0), "{recv:?}");
    }

    /// An all-reduce of three sources into one destination (every rank's
    /// output the same address) with `Avg` dividing by a divisor of its
    /// own: the hierarchical step between nodes folds one rank per node
    /// and divides once by the job's size.
    #[test]
    fn avg_divides_by_the_divisor_not_the_ranks() {
        let (k, n) = (3usize, 37usize);
        let send: Vec<Vec<f32>> = (0..k)
            .map(|u| (0..n).map(|i| (7 * u + i) as f32 * 0.1).collect())
            .collect();
        let mut out = vec![-1.0f32; n];
        let mut args = LocalArgs {
            collective: Collective::AllReduce as u64,
            ranks: k as u64,
            blocks: 2,
            total: n as u64,
            segment: n as u64,
            aligned: 0,
            send: [0; BATCH_RANKS],
            recv: [0; BATCH_RANKS],
            divisor: 8,
        };
        for (u, s) in send.iter().enumerate() {
            args.send[u] = s.as_ptr() as u64;
            args.recv[u] = out.as_mut_ptr() as u64;
        }
        run_grid_of(&args, Collective::AllReduce, Op::Avg);
        for (i, &v) in out.iter().enumerate() {
            let sum = (0..k).fold(0.0f32, |a, u| a + send[u][i]);
            assert_eq!(v.to_bits(), (sum / 8.0).to_bits(), "element {i}");
        }
    }
}
