//! The CPU execution's kernel table: the ring and local kernels for every
//! (type, op), chosen at run time.
//!
//! These functions are deliberately not generic. A generic `run::<T>`
//! would be compiled again, 50 times over, in every crate that calls a
//! CPU collective (each test binary, the bench); as a runtime table it is
//! compiled once, here, and the callers link to it.

use super::lane::Lane;
use ringreduce_kernels::abi::{LocalArgs, Work, CPU_THREADS};
use ringreduce_kernels::{entry, local};
use ringreduce_kernels::{Avg, DataType, Max, Min, Op, Prod, Sum};

/// Runs `$body` with `$O` the reduce-op type of the runtime `op`.
macro_rules! with_op {
    ($op:expr, $O:ident => $body:expr) => {
        match $op {
            Op::Sum => {
                type $O = Sum;
                $body
            }
            Op::Prod => {
                type $O = Prod;
                $body
            }
            Op::Max => {
                type $O = Max;
                $body
            }
            Op::Min => {
                type $O = Min;
                $body
            }
            Op::Avg => {
                type $O = Avg;
                $body
            }
        }
    };
}

/// Generates the two entry points from the kernels' type table, so the
/// (`DataType`, Rust type) pairs are the ones the GPU entries use.
///
/// Each type's kernels sit in a module of their own because rustc splits
/// codegen units by module: one module held all 100 instances in one unit,
/// which one core compiled alone for ten minutes.
macro_rules! type_table {
    ($($tn:ident: $t:ty => $dt:ident;)*) => {
        $(mod $tn {
            // Not a glob: it would bring in the sibling modules, and one of
            // them is named `half`, like the crate.
            use super::{entry, local, Avg, Lane, LocalArgs, Max, Min, Op, Prod, Sum, Work, CPU_THREADS};

            #[inline(never)]
            pub(super) unsafe fn rank(op: Op, lane: &Lane<'_>, w: &Work) {
                with_op!(op, O => entry::run::<Lane<'_>, $t, O, CPU_THREADS>(lane, w))
            }

            #[inline(never)]
            pub(super) unsafe fn local(op: Op, lane: &Lane<'_>, b: &LocalArgs, block: u64) {
                with_op!(op, O => local::run::<Lane<'_>, $t, O, CPU_THREADS>(lane, b, b, block))
            }
        })*

        /// Runs `w`'s block on `lane` with the kernel code for
        /// (`dtype`, `op`).
        ///
        /// # Safety
        /// As for [`entry::run`], with `dtype` the type of `w`'s buffers.
        pub(super) unsafe fn run_rank(dtype: DataType, op: Op, lane: &Lane<'_>, w: &Work) {
            match dtype {
                $(DataType::$dt => $tn::rank(op, lane, w),)*
            }
        }

        /// Runs block `block` of a local call's grid on `lane` with the
        /// kernel code for (`dtype`, `op`).
        ///
        /// # Safety
        /// As for [`local::run`], with `dtype` the type of `b`'s buffers.
        pub(super) unsafe fn run_local(
            dtype: DataType,
            op: Op,
            lane: &Lane<'_>,
            b: &LocalArgs,
            block: u64,
        ) {
            match dtype {
                $(DataType::$dt => $tn::local(op, lane, b, block),)*
            }
        }
    };
}

ringreduce_kernels::for_each_type!(type_table);

#[cfg(test)]
mod tests {
    use super::super::lane::{BlockSync, Lane, Trap};
    use super::*;
    use ringreduce_kernels::abi::BATCH_RANKS;
    use ringreduce_kernels::Collective;
    use std::time::Instant;

    /// Runs every block of a local grid over `args`, lane by lane (the
    /// local kernel never waits, so one thread can run them in turn).
    fn run_grid(args: &LocalArgs) {
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
                unsafe { run_local(DataType::F32, Op::Sum, &lane, args, block) };
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
}
