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
