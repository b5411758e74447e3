//! All-reduce: `2k - 1` steps per chunk, NCCL's ring all-reduce. The first
//! `k` are a reduce-scatter whose last step also sends the finished block;
//! the other `k - 1` are an all-gather of the finished blocks.

use super::Prim;

pub fn steps(k: u64) -> u64 {
    2 * k - 1
}

#[inline(always)]
pub fn prim(k: u64, step: u64) -> Prim {
    if step == 0 {
        Prim::Send
    } else if step + 1 < k {
        Prim::RecvReduceSend
    } else if step + 1 == k {
        Prim::RecvReduceCopySend
    } else if step + 1 < 2 * k - 1 {
        Prim::RecvCopySend
    } else {
        Prim::RecvCopy
    }
}
