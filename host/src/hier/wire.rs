//! What the step between nodes carries of the elements a rank owns after
//! the reduce-scatter inside its node (its shard, then the tail past the
//! last whole shard), and how the nodes' contributions are folded: every
//! value, values rounded to half precision, or a sparse selection. Only
//! this step is compressed: inside a node the wire is the GPU's memory,
//! between nodes it is the network (see `docs/beyond-one-node.md`).

use crate::grad::{SparseSent, Wire};
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

/// What a call that compressed nothing sent: on one node there is no
/// step between nodes.
pub(crate) const UNCOMPRESSED: SparseSent = SparseSent {
    pairs: 0,
    dense: true,
};
