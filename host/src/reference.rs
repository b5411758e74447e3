//! Plain sequential collectives, for checking results. Each folds every
//! element in the order the ring folds it, so floats come out bit-identical
//! to the kernels'.

use crate::ring::RingOrder;
use ringreduce_kernels::plan::Geometry;
use ringreduce_kernels::types::{Algorithm, Collective};
use ringreduce_kernels::{Element, Op};

/// The order the ring folds block `u`'s inputs in: starting at the ring
/// position after `u`'s and ending with `u`'s own.
fn fold_order(ring: &RingOrder, u: usize) -> Vec<usize> {
    let k = ring.len();
    let ufr = ring.user_from_ring();
    let q = ring.ring_from_user(u);
    (1..=k).map(|j| ufr[(q + j) % k] as usize).collect()
}

/// `op` over the ranks' element `at`, in `order`, then finished (the
/// average divides).
fn fold<T: Element>(inputs: &[&[T]], order: &[usize], at: usize, op: Op) -> T {
    let mut acc = inputs[order[0]][at];
    for &r in &order[1..] {
        acc = op.apply(acc, inputs[r][at]);
    }
    if order.len() > 1 {
        op.finish(acc, order.len() as u32)
    } else {
        acc
    }
}

/// `(0..n).map(f)`, computed by every core on contiguous ranges: checking
/// a 1 GiB collective waits on the reference, and the order of each
/// element's own fold does not depend on how the range is split.
fn par_map<T: Element>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    const SERIAL_BELOW: usize = 1 << 16;
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    if n < SERIAL_BELOW || threads == 1 {
        return (0..n).map(f).collect();
    }
    let per = n.div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..n)
            .step_by(per)
            .map(|lo| s.spawn(move || (lo..(lo + per).min(n)).map(f).collect::<Vec<T>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("reference thread"))
            .collect()
    })
}

/// `out[u][i]` is `op` over all ranks of `inputs[r][u * n + i]`.
pub fn reduce_scatter<T: Element>(inputs: &[&[T]], ring: &RingOrder, op: Op) -> Vec<Vec<T>> {
    let k = inputs.len();
    assert_eq!(ring.len(), k, "one input per rank");
    if k == 0 {
        return Vec::new();
    }
    let n = inputs[0].len() / k;
    (0..k)
        .map(|u| {
            let order = fold_order(ring, u);
            par_map(n, |i| fold(inputs, &order, u * n + i, op))
        })
        .collect()
}

/// Every rank's output: the inputs one after another, in user-rank order.
pub fn all_gather<T: Element>(inputs: &[&[T]]) -> Vec<Vec<T>> {
    let all: Vec<T> = inputs.iter().flat_map(|v| v.iter().copied()).collect();
    vec![all; inputs.len()]
}

/// Every rank's output: `op` over all ranks of element `i`, folded as the
/// reduce-scatter folds the all-reduce block that holds `i` (blocks of
/// whole 16-byte packs, see [`Geometry`]).
pub fn all_reduce<T: Element>(inputs: &[&[T]], ring: &RingOrder, op: Op) -> Vec<Vec<T>> {
    let k = inputs.len();
    assert_eq!(ring.len(), k, "one input per rank");
    if k == 0 {
        return Vec::new();
    }
    let n = inputs[0].len();
    let g = Geometry::new(
        Collective::AllReduce,
        k as u64,
        n as u64,
        std::mem::size_of::<T>() as u64,
        1,
        1,
    );
    let orders: Vec<Vec<usize>> = (0..k).map(|u| fold_order(ring, u)).collect();
    let out = par_map(n, |i| {
        fold(inputs, &orders[i / g.block_elems as usize], i, op)
    });
    vec![out; k]
}

/// The direct algorithms' reference: `op` over all ranks in user-rank
/// order `0..k`, for every element; the all-gather is the ring's.
pub fn direct<T: Element>(c: Collective, inputs: &[&[T]], op: Op) -> Vec<Vec<T>> {
    let k = inputs.len();
    if k == 0 {
        return Vec::new();
    }
    let order: Vec<usize> = (0..k).collect();
    match c {
        Collective::AllGather => all_gather(inputs),
        Collective::ReduceScatter => {
            let n = inputs[0].len() / k;
            (0..k)
                .map(|u| par_map(n, |i| fold(inputs, &order, u * n + i, op)))
                .collect()
        }
        Collective::AllReduce => {
            let out = par_map(inputs[0].len(), |i| fold(inputs, &order, i, op));
            vec![out; k]
        }
    }
}

/// The reference of collective `c` as `algorithm` computes it: each rank's
/// output.
pub fn collective_by<T: Element>(
    c: Collective,
    algorithm: Algorithm,
    inputs: &[&[T]],
    ring: &RingOrder,
    op: Op,
) -> Vec<Vec<T>> {
    match algorithm {
        Algorithm::Ring => collective(c, inputs, ring, op),
        Algorithm::OneShot | Algorithm::TwoShot | Algorithm::Local => direct(c, inputs, op),
    }
}

/// Every job rank's output of `c` (with `n` as [`Collective::lengths`]
/// takes it) on a hierarchical job: [`hierarchical_all_reduce`] and
/// [`hierarchical_reduce_scatter`]; an all-gather reduces nothing, so its
/// output is the inputs in rank order. `inputs` are by job rank.
pub fn hierarchical_by<T: Element>(
    c: Collective,
    n: usize,
    inputs: &[&[T]],
    nodes: &crate::nodes::Nodes,
    algorithm_for: impl Fn(Collective, usize) -> Algorithm,
    ring: &RingOrder,
    op: Op,
) -> Vec<Vec<T>> {
    match c {
        Collective::AllReduce => {
            let out = hierarchical_all_reduce(inputs, nodes, algorithm_for, ring, op);
            vec![out; inputs.len()]
        }
        Collective::ReduceScatter => {
            let algorithm = algorithm_for(Collective::ReduceScatter, n);
            hierarchical_reduce_scatter(inputs, nodes, algorithm, ring, op)
        }
        Collective::AllGather => all_gather(inputs),
    }
}

/// The reference of [`HierComm::all_reduce`](crate::HierComm::all_reduce)
/// (every rank's output is the same). `algorithm_for(c, count)` is the
/// algorithm a host's call of `c` runs (`Comm::algorithm_for`). On one
/// host, the host's all-reduce. Across hosts: inside each node, the
/// reduce-scatter of the whole shards and the all-reduce of the tail, on
/// the node's `ring`; then across nodes in node order; `Avg` sums and
/// divides once by the job's size. `inputs` are by job rank.
pub fn hierarchical_all_reduce<T: Element>(
    inputs: &[&[T]],
    nodes: &crate::nodes::Nodes,
    algorithm_for: impl Fn(Collective, usize) -> Algorithm,
    ring: &RingOrder,
    op: Op,
) -> Vec<T> {
    let n = inputs.first().map_or(0, |x| x.len());
    if nodes.is_one_node() {
        let algorithm = algorithm_for(Collective::AllReduce, n);
        let mut out = collective_by(Collective::AllReduce, algorithm, inputs, ring, op);
        return out.swap_remove(0);
    }
    let inner = if op == Op::Avg { Op::Sum } else { op };
    let partials = node_partials(inputs, nodes, &algorithm_for, ring, inner);
    let world = nodes.world() as u32;
    par_map(n, |i| {
        let mut acc = partials[0][i];
        for p in &partials[1..] {
            acc = inner.apply(acc, p[i]);
        }
        if op == Op::Avg {
            op.finish(acc, world)
        } else {
            acc
        }
    })
}

/// Each node's partial of the hierarchical all-reduce of `inputs`: the
/// reduce-scatter (`op`) of its ranks' whole shards, concatenated in
/// local order, then the all-reduce of the tail past them.
fn node_partials<T: Element>(
    inputs: &[&[T]],
    nodes: &crate::nodes::Nodes,
    algorithm_for: &impl Fn(Collective, usize) -> Algorithm,
    ring: &RingOrder,
    op: Op,
) -> Vec<Vec<T>> {
    let n = inputs.first().map_or(0, |x| x.len());
    let per = nodes.per_node();
    let main = n / per * per;
    let shard_algorithm = algorithm_for(Collective::ReduceScatter, n / per);
    let tail_algorithm = algorithm_for(Collective::AllReduce, n - main);
    (0..nodes.count())
        .map(|m| {
            let ins: Vec<&[T]> = nodes.members(m).iter().map(|&r| inputs[r]).collect();
            let heads: Vec<&[T]> = ins.iter().map(|x| &x[..main]).collect();
            let tails: Vec<&[T]> = ins.iter().map(|x| &x[main..]).collect();
            let mut p: Vec<T> = if main > 0 {
                collective_by(Collective::ReduceScatter, shard_algorithm, &heads, ring, op).concat()
            } else {
                Vec::new()
            };
            if main < n {
                let t = collective_by(Collective::AllReduce, tail_algorithm, &tails, ring, op);
                p.extend_from_slice(&t[0]);
            }
            p
        })
        .collect()
}

/// Which elements of `g'` a rank sends: the reference of the sparse
/// selection (the kernels' and the hierarchical step's), by a full sort
/// (magnitude descending, NaN largest, index ascending) or the threshold.
pub fn selected(gp: &[f32], s: crate::grad::Sparsity) -> Vec<bool> {
    use crate::grad::Sparsity;
    let mut sel = vec![false; gp.len()];
    match s {
        Sparsity::Threshold(t) => {
            for (i, x) in gp.iter().enumerate() {
                sel[i] = x.abs() >= t || x.is_nan();
            }
        }
        Sparsity::TopK(f) => {
            let kk = Sparsity::k_of(f, gp.len() as u64) as usize;
            let mut idx: Vec<usize> = (0..gp.len()).collect();
            let mag = |i: usize| gp[i].to_bits() & 0x7fff_ffff;
            idx.sort_by(|&a, &b| mag(b).cmp(&mag(a)).then(a.cmp(&b)));
            for &i in idx.iter().take(kk) {
                sel[i] = true;
            }
        }
    }
    sel
}

/// The reference of the gradient layer's half-precision and sparse
/// all-reduce on a [`HierComm`](crate::HierComm), which compress only the
/// step between nodes: each node's partial sum (as
/// [`hierarchical_all_reduce`]'s), then for each local index `l` the
/// elements it owns (shard `l`, then the tail) across nodes:
/// - half: each node's value divided by the job's size with `prescale`,
///   rounded, and the halves summed in `f32` in node order;
/// - sparse: `g' = value + residual` of the rank of index `l` on each
///   node; top-K of the shard by a full sort (magnitude descending, NaN
///   largest, index ascending) or the threshold, the tail always; the
///   sent values summed from `+0.0` in node order, and `residuals` (by
///   job rank, as long as the input) keep `g'` where not sent, `0.0`
///   where sent. The tail is carried by every local rank, so each rank's
///   residual there joins its input before the node's all-reduce, and
///   becomes `0.0`.
///
/// On one node nothing is compressed: the node's all-reduce (an average
/// with `prescale`), residuals untouched. Returns every rank's output.
pub fn hierarchical_all_reduce_wire(
    inputs: &[&[f32]],
    nodes: &crate::nodes::Nodes,
    algorithm_for: impl Fn(Collective, usize) -> Algorithm,
    ring: &RingOrder,
    wire: crate::grad::Wire,
    mut residuals: Option<&mut [Vec<f32>]>,
) -> Vec<f32> {
    use crate::grad::Wire;
    let n = inputs.first().map_or(0, |x| x.len());
    if nodes.is_one_node() {
        let op = match wire {
            Wire::Half { prescale: true, .. } => Op::Avg,
            _ => Op::Sum,
        };
        return hierarchical_all_reduce(inputs, nodes, algorithm_for, ring, op);
    }
    let per = nodes.per_node();
    let (c, main) = (n / per, n / per * per);
    // A sparse step's residuals join the tail before the node's
    // all-reduce, and are all sent.
    let with_tails: Vec<Vec<f32>> = match (&wire, residuals.as_deref_mut()) {
        (Wire::Sparse { .. }, Some(res)) => inputs
            .iter()
            .zip(res.iter_mut())
            .map(|(x, r)| {
                let mut x = x.to_vec();
                for i in main..n {
                    x[i] += r[i];
                    r[i] = 0.0;
                }
                x
            })
            .collect(),
        _ => inputs.iter().map(|x| x.to_vec()).collect(),
    };
    let inputs: Vec<&[f32]> = with_tails.iter().map(Vec::as_slice).collect();
    let partials = node_partials(&inputs, nodes, &algorithm_for, ring, Op::Sum);
    let world = nodes.world() as f32;
    let mut out = vec![0f32; n];
    for l in 0..per {
        let at: Vec<usize> = (l * c..(l + 1) * c).chain(main..n).collect();
        let mut acc = vec![0f32; at.len()];
        for (m, partial) in partials.iter().enumerate() {
            let g = nodes.members(m)[l];
            let owned: Vec<f32> = at.iter().map(|&i| partial[i]).collect();
            match wire {
                Wire::Half {
                    precision,
                    prescale,
                } => {
                    let div = if prescale { world } else { 1.0 };
                    for (j, &x) in owned.iter().enumerate() {
                        let h = match precision {
                            crate::grad::Precision::F16 => half::f16::from_f32(x / div).to_f32(),
                            crate::grad::Precision::Bf16 => half::bf16::from_f32(x / div).to_f32(),
                        };
                        acc[j] = if m == 0 { h } else { acc[j] + h };
                    }
                }
                Wire::Sparse { sparsity, .. } => {
                    let res = residuals.as_deref_mut().map(|r| &mut r[g]);
                    let gp: Vec<f32> = match &res {
                        Some(r) => owned
                            .iter()
                            .zip(&at)
                            .map(|(x, &i)| if i < main { x + r[i] } else { *x })
                            .collect(),
                        None => owned,
                    };
                    // The shard's selection; the tail always goes.
                    let mut sent = selected(&gp[..c], sparsity);
                    sent.resize(gp.len(), true);
                    for j in 0..gp.len() {
                        if sent[j] {
                            acc[j] += gp[j];
                        }
                    }
                    if let Some(r) = res {
                        for (j, &i) in at.iter().enumerate().take(c) {
                            r[i] = if sent[j] { 0.0 } else { gp[j] };
                        }
                    }
                }
            }
        }
        for (j, &i) in at.iter().enumerate() {
            out[i] = acc[j];
        }
    }
    out
}

/// The reference of [`HierComm::reduce_scatter`](crate::HierComm::reduce_scatter),
/// each rank's output: inside each node, for every node `m`, the
/// reduce-scatter (as `algorithm` folds it, on the node's `ring`) of the
/// blocks of `m`'s ranks in local order; then each rank's block across
/// nodes in node order; `Avg` sums and divides once. `inputs` are by job
/// rank, `world` blocks each.
pub fn hierarchical_reduce_scatter<T: Element>(
    inputs: &[&[T]],
    nodes: &crate::nodes::Nodes,
    algorithm: Algorithm,
    ring: &RingOrder,
    op: Op,
) -> Vec<Vec<T>> {
    let inner = if op == Op::Avg { Op::Sum } else { op };
    let world = nodes.world();
    let c = inputs.first().map_or(0, |x| x.len() / world.max(1));
    // part[n][g]: node n's fold of block g.
    let part: Vec<Vec<Vec<T>>> = (0..nodes.count())
        .map(|n| {
            let mut by_rank = vec![Vec::new(); world];
            for m in 0..nodes.count() {
                let runs: Vec<Vec<T>> = nodes
                    .members(n)
                    .iter()
                    .map(|&r| {
                        let x = inputs[r];
                        let blocks = nodes.members(m).iter();
                        blocks
                            .flat_map(|&g| x[g * c..(g + 1) * c].to_vec())
                            .collect()
                    })
                    .collect();
                let runs: Vec<&[T]> = runs.iter().map(|v| v.as_slice()).collect();
                let out = collective_by(Collective::ReduceScatter, algorithm, &runs, ring, inner);
                for (l, &g) in nodes.members(m).iter().enumerate() {
                    by_rank[g] = out[l].clone();
                }
            }
            by_rank
        })
        .collect();
    (0..world)
        .map(|g| {
            (0..c)
                .map(|i| {
                    let mut acc = part[0][g][i];
                    for p in &part[1..] {
                        acc = inner.apply(acc, p[g][i]);
                    }
                    if op == Op::Avg {
                        op.finish(acc, world as u32)
                    } else {
                        acc
                    }
                })
                .collect()
        })
        .collect()
}

/// The reference of any collective on the ring: each rank's output.
pub fn collective<T: Element>(
    c: Collective,
    inputs: &[&[T]],
    ring: &RingOrder,
    op: Op,
) -> Vec<Vec<T>> {
    match c {
        Collective::ReduceScatter => reduce_scatter(inputs, ring, op),
        Collective::AllGather => all_gather(inputs),
        Collective::AllReduce => all_reduce(inputs, ring, op),
    }
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
    fn direct_folds_in_user_rank_order() {
        let x0 = [1e20f32, 1.0];
        let x1 = [-1e20f32, 0.0];
        let x2 = [1.0f32, 0.0];
        let inputs: [&[f32]; 3] = [&x0, &x1, &x2];
        // (1e20 + -1e20) + 1 = 1; the ring's order for block 0 would give 0.
        let ar = direct(Collective::AllReduce, &inputs, Op::Sum);
        assert_eq!(ar, vec![vec![1.0, 1.0]; 3]);
        let ring = RingOrder::identity(3);
        let by_ring = collective_by(
            Collective::AllReduce,
            Algorithm::Ring,
            &inputs,
            &ring,
            Op::Sum,
        );
        assert_eq!(by_ring[0][0], 0.0);
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

    #[test]
    fn all_reduce_folds_each_block_like_the_reduce_scatter() {
        let ring = RingOrder::new(&[1, 0, 2]).unwrap();
        // 12 f32 over 3 ranks: blocks of 4 (one pack each).
        let x: Vec<Vec<f32>> = (0..3)
            .map(|r| (0..12).map(|i| (r * 100 + i) as f32 * 0.1).collect())
            .collect();
        let refs: Vec<&[f32]> = x.iter().map(|v| v.as_slice()).collect();
        let ar = all_reduce(&refs, &ring, Op::Sum);
        let rs = reduce_scatter(&refs, &ring, Op::Sum);
        let flat: Vec<f32> = rs.concat();
        for out in &ar {
            assert_eq!(
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                flat.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
        assert_eq!(
            all_gather(&[&[1u8, 2][..], &[3u8][..]]),
            vec![vec![1, 2, 3]; 2]
        );
    }
}
