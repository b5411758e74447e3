//! Which block a ring position handles at each step.

/// The ring index whose block position `pos` handles at `step`:
/// `(k + pos - 1 - step) mod k`. Chasing the data backwards from the last
/// step, where every rank must hold its own block, gives this rule: at step
/// `k-1` a rank handles `user_from_ring[pos]`, and each earlier step hands the
/// block one position on.
#[inline]
pub fn ring_index_for_step(k: u64, pos: u64, step: u64) -> u64 {
    // step < 2k - 1 (an all-reduce's steps) and pos < k, so
    // 2k - 1 - step + pos lies in 1..=3k - 2: two subtractions of k reduce
    // it. The control lane works this out every step, where `%` by a
    // run-time `k` is a 64-bit division subroutine on the GPU.
    let mut i = 2 * k + pos - 1 - step;
    for _ in 0..2 {
        if i >= k {
            i -= k;
        }
    }
    i
}

/// The user rank of the block handled at `step` by ring position `pos`.
#[inline]
pub fn block_for_step(user_from_ring: &[u32], pos: u64, step: u64) -> u64 {
    let k = user_from_ring.len() as u64;
    user_from_ring[ring_index_for_step(k, pos, step) as usize] as u64
}

/// Checks that `order` is a permutation of `0..order.len()`, without
/// allocating. Quadratic, but `k` is at most a few hundred.
pub fn is_permutation(order: &[u32]) -> bool {
    let k = order.len();
    order.iter().all(|&u| (u as usize) < k)
        && (0..k).all(|i| order[..i].iter().all(|&v| v != order[i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table from NCCL 1.x's reduce_scatter.cu for userFromRing =
    /// {1, 2, 0, 3}: rows are steps, columns are ring positions.
    #[test]
    fn seed_table() {
        let ufr = [1u32, 2, 0, 3];
        let table = [[3, 1, 2, 0], [0, 3, 1, 2], [2, 0, 3, 1], [1, 2, 0, 3]];
        for (step, row) in table.iter().enumerate() {
            for (pos, &want) in row.iter().enumerate() {
                assert_eq!(
                    block_for_step(&ufr, pos as u64, step as u64),
                    want,
                    "step {step} pos {pos}"
                );
            }
        }
    }

    #[test]
    fn last_step_is_own_block_and_data_flows_forward() {
        for k in 1..9u64 {
            let ufr: [u32; 8] = [5, 2, 7, 0, 3, 6, 1, 4];
            let ufr: [u32; 8] = core::array::from_fn(|i| ufr[i] % 8);
            let order: &[u32] = &ufr[..k as usize];
            // Use the identity when the sample is not a permutation of 0..k.
            let ident: [u32; 8] = core::array::from_fn(|i| i as u32);
            let order = if is_permutation(order) {
                order
            } else {
                &ident[..k as usize]
            };
            for pos in 0..k {
                assert_eq!(
                    block_for_step(order, pos, k - 1),
                    order[pos as usize] as u64
                );
                for step in 1..k {
                    // What pos handles at `step` is what its predecessor
                    // handled at `step - 1`.
                    let pred = (pos + k - 1) % k;
                    assert_eq!(
                        block_for_step(order, pos, step),
                        block_for_step(order, pred, step - 1)
                    );
                }
            }
        }
    }

    #[test]
    fn ring_index_is_the_rule_mod_k() {
        for k in 1..70u64 {
            for pos in 0..k {
                for step in 0..2 * k - 1 {
                    assert_eq!(
                        ring_index_for_step(k, pos, step),
                        (2 * k + pos - 1 - step) % k,
                        "k {k} pos {pos} step {step}"
                    );
                }
            }
        }
    }

    #[test]
    fn permutations() {
        assert!(is_permutation(&[]));
        assert!(is_permutation(&[1, 2, 0, 3]));
        assert!(!is_permutation(&[1, 1, 0]));
        assert!(!is_permutation(&[0, 3]));
    }
}
