//! Reduce-scatter: `k` steps. The first sends a block, the middle ones add
//! the own part and pass it on, the last finishes the rank's own block.

use super::prim::Prim;

/// Every primitive [`prim`] returns.
pub const PRIMS: [Prim; 3] = [Prim::Send, Prim::RecvReduceSend, Prim::RecvReduceCopy];

pub fn steps(k: u64) -> u64 {
    k
}

#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn prim(k: u64, step: u64) -> Prim {
    if step == 0 {
        Prim::Send
    } else if step + 1 < k {
        Prim::RecvReduceSend
    } else {
        Prim::RecvReduceCopy
    }
}
