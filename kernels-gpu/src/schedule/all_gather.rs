//! All-gather: `k` steps. The first copies the own input into its place in
//! the output and sends it; each later step stores what arrives and, but
//! for the last, passes it on.

use super::prim::Prim;

/// Every primitive [`prim`] returns.
pub const PRIMS: [Prim; 3] = [Prim::CopySend, Prim::RecvCopySend, Prim::RecvCopy];

pub fn steps(k: u64) -> u64 {
    k
}

#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn prim(k: u64, step: u64) -> Prim {
    if step == 0 {
        Prim::CopySend
    } else if step + 1 < k {
        Prim::RecvCopySend
    } else {
        Prim::RecvCopy
    }
}
