//! A plain sequential reduce-scatter, for checking results.

use crate::ring::RingOrder;
use ringreduce_kernels::{Element, Op};

/// `out[u][i]` is `op` over all ranks of `inputs[r][u * n + i]`, folded in the
/// order the ring folds it: starting at the ring position after `u`'s and
/// ending with `u`'s own input, then finished (the average divides). Floats
/// come out bit-identical to the kernels'.
pub fn reduce_scatter<T: Element>(inputs: &[&[T]], ring: &RingOrder, op: Op) -> Vec<Vec<T>> {
    let k = inputs.len();
    assert_eq!(ring.len(), k, "one input per rank");
    if k == 0 {
        return Vec::new();
    }
    let n = inputs[0].len() / k;
    let ufr = ring.user_from_ring();
    (0..k)
        .map(|u| {
            let q = ring.ring_from_user(u);
            let order: Vec<usize> = (1..=k).map(|j| ufr[(q + j) % k] as usize).collect();
            (0..n)
                .map(|i| {
                    let at = u * n + i;
                    let mut acc = inputs[order[0]][at];
                    for &r in &order[1..] {
                        acc = op.apply(acc, inputs[r][at]);
                    }
                    if k > 1 {
                        op.finish(acc, k as u32)
                    } else {
                        acc
                    }
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_blocks_in_ring_order() {
        let a = [1i32, 2, 3, 4];
        let b = [10i32, 20, 30, 40];
        let out = reduce_scatter(&[&a, &b], &RingOrder::identity(2), Op::Sum);
        assert_eq!(out, vec![vec![11, 22], vec![33, 44]]);
        let out = reduce_scatter(&[&a, &b], &RingOrder::identity(2), Op::Avg);
        assert_eq!(out, vec![vec![5, 11], vec![16, 22]]);
    }

    #[test]
    fn float_order_follows_ring() {
        // With user_from_ring = [1, 0, 2], block 0 ends at position 1 and is
        // folded starting at position 2: x2, then x1, then x0.
        let ring = RingOrder::new(&[1, 0, 2]).unwrap();
        let x0 = [1e20f32, 0.0, 0.0];
        let x1 = [-1e20f32, 0.0, 0.0];
        let x2 = [1.0f32, 0.0, 0.0];
        let out = reduce_scatter(&[&x0, &x1, &x2], &ring, Op::Sum);
        // (1 + -1e20) + 1e20 = 0 in f32; another order would give 1.
        assert_eq!(out[0][0], 0.0);
    }
}
