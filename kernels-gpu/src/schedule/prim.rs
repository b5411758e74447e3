//! The ring's step primitives as a schedule names them: what each step of
//! a chunk does with the slice it receives and the one it sends.

/// The step primitives (see [`crate::primitives`]). "Recv" reads the
/// slice the predecessor put in our staging; "send" writes one into the
/// successor's; "copy" writes the output; "reduce" folds in the own input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// Own input to the successor.
    Send,
    /// Incoming op own input, to the successor.
    RecvReduceSend,
    /// Incoming op own input, finished, into the output: the last step of a
    /// reduction.
    RecvReduceCopy,
    /// As [`Prim::RecvReduceCopy`], and to the successor: the all-reduce's
    /// turn from reduce-scatter to all-gather.
    RecvReduceCopySend,
    /// Own input into the output and to the successor.
    CopySend,
    /// Incoming into the output and to the successor.
    RecvCopySend,
    /// Incoming into the output.
    RecvCopy,
}

impl Prim {
    /// The primitive as a word of [`SliceWork`](crate::device::SliceWork).
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn index(self) -> u64 {
        self as u64
    }

    /// The primitive of [`Prim::index`] `i`, if it is in `set` (a mask of
    /// indices, such as [`prims_of`](super::prims_of) gives): with a constant `set`, the
    /// producers' dispatch keeps only the primitives an entry can meet.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn from_index_in(i: u64, set: u64) -> Option<Prim> {
        if i < 64 && set & (1 << i) != 0 {
            Prim::from_index(i)
        } else {
            None
        }
    }

    /// The primitive of [`Prim::index`] `i`, if any.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn from_index(i: u64) -> Option<Prim> {
        Some(match i {
            0 => Prim::Send,
            1 => Prim::RecvReduceSend,
            2 => Prim::RecvReduceCopy,
            3 => Prim::RecvReduceCopySend,
            4 => Prim::CopySend,
            5 => Prim::RecvCopySend,
            6 => Prim::RecvCopy,
            _ => return None,
        })
    }

    /// Whether the step fills a slot of the successor's staging.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn sends(self) -> bool {
        !matches!(self, Prim::RecvReduceCopy | Prim::RecvCopy)
    }

    /// Whether the step consumes a slot of our staging.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn recvs(self) -> bool {
        !matches!(self, Prim::Send | Prim::CopySend)
    }
}
