//! All-reduce: `2k - 1` steps per chunk, NCCL's ring all-reduce. The first
//! `k` are a reduce-scatter whose last step also sends the finished block;
//! the other `k - 1` are the all-gather's last `k - 1` steps.

use super::prim::Prim;
use super::{all_gather, reduce_scatter};

/// Every primitive [`prim`] returns.
pub const PRIMS: [Prim; 5] = [
    Prim::Send,
    Prim::RecvReduceSend,
    Prim::RecvReduceCopySend,
    Prim::RecvCopySend,
    Prim::RecvCopy,
];

pub fn steps(k: u64) -> u64 {
    2 * k - 1
}

#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn prim(k: u64, step: u64) -> Prim {
    if step + 1 < k {
        reduce_scatter::prim(k, step)
    } else if step + 1 == k {
        Prim::RecvReduceCopySend
    } else {
        all_gather::prim(k, step + 1 - k)
    }
}
