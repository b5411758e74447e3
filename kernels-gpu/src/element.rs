//! Element types and their arithmetic.
//!
//! Floats follow IEEE 754 round-to-nearest-even for every binary operation.
//! `f16` and `bf16` are reduced in their own precision, as NCCL does with
//! `__hadd2`/`__hmul2`: each operation is computed in `f32` and rounded once
//! to the element type. `f32` has more than twice the significand bits of
//! either plus two, so that double rounding is innocuous and the result is
//! bit-identical to a native half-precision operation.
//!
//! `max`/`min` return the other operand when one is NaN (as CUDA's
//! `fmaxf`/`__hmax`), and order `-0 < +0`, so the result never depends on the
//! operand order except for which NaN payload survives two NaNs.

use crate::types::DataType;
use half::{bf16, f16};

/// One 16-byte pack of elements, aligned so that loads and stores of it are
/// single vector accesses.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct Pack<T, const N: usize>(pub [T; N]);

impl<T, const N: usize> AsRef<[T]> for Pack<T, N> {
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn as_ref(&self) -> &[T] {
        &self.0
    }
}
impl<T, const N: usize> AsMut<[T]> for Pack<T, N> {
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    fn as_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// An element type the kernels reduce.
pub trait Element: Copy + Send + Sync + PartialEq + 'static {
    const DTYPE: DataType;
    /// A [`Pack`] of `16 / size_of::<Self>()` elements.
    type Pack: Copy + AsRef<[Self]> + AsMut<[Self]>;
    fn red_sum(self, o: Self) -> Self;
    fn red_prod(self, o: Self) -> Self;
    fn red_max(self, o: Self) -> Self;
    fn red_min(self, o: Self) -> Self;
    /// The average's final division by the number of ranks. Integers
    /// truncate toward zero, as C's division does.
    fn div_ranks(self, k: u32) -> Self;
}

macro_rules! int_element {
    ($t:ty, $dt:ident, $lanes:literal, $wide:ty) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dt;
            type Pack = Pack<$t, $lanes>;
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_sum(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_prod(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_max(self, o: Self) -> Self {
                if o > self {
                    o
                } else {
                    self
                }
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_min(self, o: Self) -> Self {
                if o < self {
                    o
                } else {
                    self
                }
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn div_ranks(self, k: u32) -> Self {
                // k >= 1 always; `max(1)` keeps the division total.
                ((self as $wide) / (Ord::max(k, 1) as $wide)) as $t
            }
        }
    };
}

// The average's division happens in the narrowest type that holds every
// value and every rank count (k < 2^31): the GPU has no divide instruction,
// and a 64-bit software division per byte lane is far slower than a 32-bit
// one.
int_element!(i8, I8, 16, i32);
int_element!(u8, U8, 16, u32);
int_element!(i32, I32, 4, i32);
int_element!(u32, U32, 4, u32);
int_element!(i64, I64, 2, i64);
int_element!(u64, U64, 2, u64);

/// NaN-ignoring max with `-0 < +0`, written once for every float type so
/// that host and GPU agree to the bit.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn float_max<F: Copy + PartialOrd>(a: F, b: F, a_nan: bool, b_nan: bool, a_neg: bool) -> F {
    if a_nan {
        b
    } else if b_nan || a > b {
        a
    } else if b > a || a_neg {
        b
    } else {
        a
    }
}

#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
fn float_min<F: Copy + PartialOrd>(a: F, b: F, a_nan: bool, b_nan: bool, a_neg: bool) -> F {
    if a_nan {
        b
    } else if b_nan || a < b {
        a
    } else if b < a || !a_neg {
        b
    } else {
        a
    }
}

macro_rules! float_element {
    ($t:ty, $dt:ident, $lanes:literal) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dt;
            type Pack = Pack<$t, $lanes>;
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_sum(self, o: Self) -> Self {
                self + o
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_prod(self, o: Self) -> Self {
                self * o
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_max(self, o: Self) -> Self {
                float_max(self, o, self.is_nan(), o.is_nan(), self.is_sign_negative())
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_min(self, o: Self) -> Self {
                float_min(self, o, self.is_nan(), o.is_nan(), self.is_sign_negative())
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn div_ranks(self, k: u32) -> Self {
                self / (Ord::max(k, 1) as $t)
            }
        }
    };
}

float_element!(f32, F32, 4);
float_element!(f64, F64, 2);

/// Rounds an `f32` to `bf16` bits, to nearest even; NaNs stay NaN (quiet).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

macro_rules! half_element {
    ($t:ty, $dt:ident, $to:path, $from:path) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dt;
            type Pack = Pack<$t, 8>;
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_sum(self, o: Self) -> Self {
                <$t>::from_bits($from($to(self.to_bits()) + $to(o.to_bits())))
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_prod(self, o: Self) -> Self {
                <$t>::from_bits($from($to(self.to_bits()) * $to(o.to_bits())))
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_max(self, o: Self) -> Self {
                let (a, b) = ($to(self.to_bits()), $to(o.to_bits()));
                if float_max(a, b, a.is_nan(), b.is_nan(), a.is_sign_negative()).to_bits()
                    == a.to_bits()
                {
                    self
                } else {
                    o
                }
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn red_min(self, o: Self) -> Self {
                let (a, b) = ($to(self.to_bits()), $to(o.to_bits()));
                if float_min(a, b, a.is_nan(), b.is_nan(), a.is_sign_negative()).to_bits()
                    == a.to_bits()
                {
                    self
                } else {
                    o
                }
            }
            #[cfg_attr(target_arch = "nvptx64", inline(always))]
            #[cfg_attr(not(target_arch = "nvptx64"), inline)]
            fn div_ranks(self, k: u32) -> Self {
                <$t>::from_bits($from($to(self.to_bits()) / (Ord::max(k, 1) as f32)))
            }
        }
    };
}

half_element!(
    f16,
    F16,
    crate::arch::f16_bits_to_f32,
    crate::arch::f32_to_f16_bits
);
half_element!(bf16, Bf16, bf16_bits_to_f32, f32_to_bf16_bits);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_max_min_rules() {
        let nan = f32::NAN;
        assert_eq!(Element::red_max(nan, 1.0f32), 1.0);
        assert_eq!(Element::red_max(1.0f32, nan), 1.0);
        assert_eq!(Element::red_min(nan, -1.0f32), -1.0);
        assert!(Element::red_max(nan, nan).is_nan());
        assert!(Element::red_max(-0.0f32, 0.0).is_sign_positive());
        assert!(Element::red_max(0.0f32, -0.0).is_sign_positive());
        assert!(Element::red_min(-0.0f32, 0.0).is_sign_negative());
        assert!(Element::red_min(0.0f32, -0.0).is_sign_negative());
        assert_eq!(Element::red_max(f32::NEG_INFINITY, -3.0f32), -3.0);
        let h = |x: f32| f16::from_f32(x);
        assert_eq!(Element::red_max(h(2.0), h(3.0)), h(3.0));
        assert_eq!(Element::red_max(f16::NAN, h(3.0)), h(3.0));
        assert!(Element::red_min(h(0.0), h(-0.0)).is_sign_negative());
    }

    #[test]
    fn half_arith_rounds_once() {
        // 1 + 2^-11 is a tie in f16: rounds to even (1.0).
        let one = f16::from_f32(1.0);
        let tiny = f16::from_f32(2f32.powi(-11));
        assert_eq!(one.red_sum(tiny), one);
        // bf16: 1 + 2^-8 ties to 1.0; 1 + 3*2^-9 rounds up.
        let b1 = bf16::from_f32(1.0);
        assert_eq!(b1.red_sum(bf16::from_f32(2f32.powi(-8))), b1);
        assert_eq!(
            b1.red_sum(bf16::from_f32(3.0 * 2f32.powi(-9))).to_f32(),
            1.0 + 2f32.powi(-7)
        );
        // Our bf16 rounding agrees with the half crate on a sweep.
        for i in 0..100_000u32 {
            let x = f32::from_bits(i.wrapping_mul(2654435761));
            if !x.is_nan() {
                assert_eq!(f32_to_bf16_bits(x), bf16::from_f32(x).to_bits(), "{x}");
            }
        }
    }

    #[test]
    fn int_avg_truncates() {
        assert_eq!((-7i32).div_ranks(2), -3);
        assert_eq!(7u8.div_ranks(200), 0);
        assert_eq!((-128i8).div_ranks(200), 0);
        assert_eq!(100i8.red_sum(100).div_ranks(2), -28);
        assert_eq!(f16::from_f32(3.0).div_ranks(2), f16::from_f32(1.5));
    }
}
