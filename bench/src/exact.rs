//! Inputs whose reduction is exact in every element type, so any fold order
//! gives the same bits (nccl-tests checks results the same way). Sums stay
//! integers of magnitude at most 256 (exact even in bf16), products are
//! ±1 times at most one factor of 2, and max/min are exact anyway. The
//! average's one division then rounds a value that no order can change.

use half::{bf16, f16};
use ringreduce::{Op, RsElement};

/// Conversion from a small integer to an element type.
pub trait FromSmall: RsElement {
    const SIGNED: bool;
    fn from_small(v: i32) -> Self;
}

macro_rules! from_small_int {
    ($($t:ty: $signed:expr),*) => {$(
        impl FromSmall for $t {
            const SIGNED: bool = $signed;
            fn from_small(v: i32) -> Self { v as $t }
        }
    )*};
}
from_small_int!(i8: true, u8: false, i32: true, u32: false, i64: true, u64: false);

impl FromSmall for f32 {
    const SIGNED: bool = true;
    fn from_small(v: i32) -> Self {
        v as f32
    }
}
impl FromSmall for f64 {
    const SIGNED: bool = true;
    fn from_small(v: i32) -> Self {
        v as f64
    }
}
impl FromSmall for f16 {
    const SIGNED: bool = true;
    fn from_small(v: i32) -> Self {
        f16::from_f32(v as f32)
    }
}
impl FromSmall for bf16 {
    const SIGNED: bool = true;
    fn from_small(v: i32) -> Self {
        bf16::from_f32(v as f32)
    }
}

fn mix(seed: u64, r: u64, i: u64) -> u64 {
    let mut z =
        seed ^ r.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The value rank `r` (of `k`) sends at element `i` of its send buffer.
pub fn value<T: FromSmall>(op: Op, k: usize, r: usize, i: usize, seed: u64) -> T {
    let h = mix(seed, r as u64, i as u64);
    let m = (256 / k.max(1)).max(1) as u64;
    let v = match op {
        Op::Prod => {
            let mag = if r == i % k.max(1) { 2 } else { 1 };
            if T::SIGNED && (h >> 40) & 1 == 1 {
                -mag
            } else {
                mag
            }
        }
        _ => {
            if T::SIGNED {
                (h % (2 * m + 1)) as i32 - m as i32
            } else {
                (h % (m + 1)) as i32
            }
        }
    };
    T::from_small(v)
}

/// Rank `r`'s whole send buffer of `len` elements.
pub fn fill<T: FromSmall>(op: Op, k: usize, r: usize, len: usize, seed: u64) -> Vec<T> {
    (0..len).map(|i| value::<T>(op, k, r, i, seed)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringreduce::Element;

    fn fold<T: Element>(op: Op, vals: &[T], order: &[usize]) -> T {
        let mut acc = vals[order[0]];
        for &j in &order[1..] {
            acc = op.apply(acc, vals[j]);
        }
        op.finish(acc, vals.len() as u32)
    }

    fn any_order_same<T: FromSmall>() {
        for k in [2usize, 3, 4, 7, 8, 16, 64] {
            for op in Op::ALL {
                for i in 0..300 {
                    let vals: Vec<T> = (0..k).map(|r| value::<T>(op, k, r, i, 9)).collect();
                    let fwd: Vec<usize> = (0..k).collect();
                    let want = fold(op, &vals, &fwd);
                    // Reversed, rotated and interleaved orders.
                    let mut orders = vec![fwd.iter().rev().copied().collect::<Vec<_>>()];
                    for rot in 1..k {
                        orders.push((0..k).map(|j| (j + rot) % k).collect());
                    }
                    orders.push((0..k).step_by(2).chain((1..k).step_by(2)).collect());
                    for o in orders {
                        let got = fold(op, &vals, &o);
                        assert_eq!(
                            bytemuck::bytes_of(&got),
                            bytemuck::bytes_of(&want),
                            "{} {} k={k} i={i}",
                            T::DTYPE.name(),
                            op.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_type_is_order_independent() {
        any_order_same::<i8>();
        any_order_same::<u8>();
        any_order_same::<i32>();
        any_order_same::<u32>();
        any_order_same::<i64>();
        any_order_same::<u64>();
        any_order_same::<f16>();
        any_order_same::<bf16>();
        any_order_same::<f32>();
        any_order_same::<f64>();
    }

    #[test]
    fn values_are_not_trivial() {
        let v = fill::<f32>(Op::Sum, 4, 0, 1000, 1);
        assert!(v.iter().any(|x| *x != 0.0));
        assert!(v.iter().any(|x| *x < 0.0));
        let distinct: std::collections::BTreeSet<i32> = v.iter().map(|x| *x as i32).collect();
        assert!(distinct.len() > 50);
    }
}
