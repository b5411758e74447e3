//! Reduction operators.

use crate::element::Element;
use crate::types::Op;

impl Op {
    /// Applies the operator to two elements (dynamic dispatch, for
    /// references and checks; kernels use [`ReduceOp`]).
    #[inline]
    pub fn apply<T: Element>(self, a: T, b: T) -> T {
        match self {
            Op::Sum | Op::Avg => a.red_sum(b),
            Op::Prod => a.red_prod(b),
            Op::Max => a.red_max(b),
            Op::Min => a.red_min(b),
        }
    }

    /// What the last step does to the fully reduced value.
    #[inline]
    pub fn finish<T: Element>(self, x: T, k: u32) -> T {
        match self {
            Op::Avg => x.div_ranks(k),
            _ => x,
        }
    }
}

/// An operator known at compile time, so the kernels monomorphise one loop
/// per (type, op).
pub trait ReduceOp: Copy + Send + Sync + 'static {
    const OP: Op;
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn apply<T: Element>(a: T, b: T) -> T {
        Self::OP.apply(a, b)
    }
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn finish<T: Element>(x: T, k: u32) -> T {
        Self::OP.finish(x, k)
    }
}

macro_rules! ops {
    ($($name:ident),*) => {$(
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;
        impl ReduceOp for $name {
            const OP: Op = Op::$name;
        }
    )*};
}
ops!(Sum, Prod, Max, Min, Avg);
