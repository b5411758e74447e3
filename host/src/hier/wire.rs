//! What the step between nodes carries of the elements a rank owns after
//! the reduce-scatter inside its node (its shard, then the tail past the
//! last whole shard), and how the nodes' contributions are folded: every
//! value, values rounded to half precision, or a sparse selection. Only
//! this step is compressed: inside a node the wire is the GPU's memory,
//! between nodes it is the network (see `docs/beyond-one-node.md`).

use crate::grad::{Precision, SparseSent, Sparsity, Wire};
use ringreduce_kernels::Op;

/// What the step between nodes sends of a rank's owned elements.
#[derive(Clone, Copy)]
pub(crate) enum Step {
    /// Every value, folded with the op (`Avg` divides once, by the job's
    /// size).
    Full(Op),
    /// Compressed as the gradient layer asks: half precision, folded in
    /// `f32`; or the shard's selection of `g' = owned + residual` (the
    /// tail always whole), folded from `+0.0`.
    Wire(Wire),
}

/// Index of a pair that pads a member's selection to the longest one.
pub(crate) const PAD: u32 = u32::MAX;

/// One `f32` as `precision`'s bits.
pub(crate) fn to_half(x: f32, precision: Precision) -> u16 {
    match precision {
        Precision::F16 => half::f16::from_f32(x).to_bits(),
        Precision::Bf16 => half::bf16::from_f32(x).to_bits(),
    }
}

/// `precision`'s bits as `f32`.
pub(crate) fn from_half(h: u16, precision: Precision) -> f32 {
    match precision {
        Precision::F16 => half::f16::from_bits(h).to_f32(),
        Precision::Bf16 => half::bf16::from_bits(h).to_f32(),
    }
}

/// Which of `g'`'s first `shard` elements `sparsity` selects, as the
/// flat sparse all-reduce selects them: top-K by magnitude (NaN largest,
/// ties to the lower index) or every `|x| >= t` (and NaN). The tail
/// (`g'[shard..]`) is always selected.
pub(crate) fn select(gp: &[f32], shard: usize, sparsity: Sparsity) -> Vec<bool> {
    let mut sel = vec![true; gp.len()];
    let head = &gp[..shard];
    match sparsity {
        Sparsity::Threshold(t) => {
            for (s, x) in sel.iter_mut().zip(head) {
                *s = x.abs() >= t || x.is_nan();
            }
        }
        Sparsity::TopK(f) => {
            if shard > 0 {
                let kk = Sparsity::k_of(f, shard as u64) as usize;
                let mag = |i: usize| head[i].to_bits() & 0x7fff_ffff;
                let mut idx: Vec<usize> = (0..shard).collect();
                if kk < shard {
                    idx.select_nth_unstable_by(kk, |&a, &b| mag(b).cmp(&mag(a)).then(a.cmp(&b)));
                }
                sel[..shard].fill(false);
                for &i in &idx[..kk] {
                    sel[i] = true;
                }
            }
        }
    }
    sel
}

/// Whether a selection of `count` of a shard of `shard` elements goes
/// dense: above `dense_above` of the shard, or no shard at all.
pub(crate) fn goes_dense(count: usize, shard: usize, dense_above: f64) -> bool {
    shard == 0 || count as f64 > dense_above * shard as f64
}

/// The fold of the nodes' sent values, `sent[m]` being node `m`'s
/// `(index, value)` pairs (any [`PAD`] skipped), into `len` elements:
/// each element from `+0.0`, adding in node order. Skipping an unsent
/// value is adding `+0.0`, so this equals the dense fold bit for bit.
pub(crate) fn fold_pairs<'a>(len: usize, sent: impl Iterator<Item = &'a [(u32, f32)]>) -> Vec<f32> {
    let mut out = vec![0.0f32; len];
    for pairs in sent {
        for &(i, v) in pairs {
            if i != PAD {
                out[i as usize] += v;
            }
        }
    }
    out
}

/// What a call that compressed nothing sent: on one node there is no
/// step between nodes.
pub(crate) const UNCOMPRESSED: SparseSent = SparseSent {
    pairs: 0,
    dense: true,
};
