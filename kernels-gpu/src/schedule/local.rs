//! The local collectives as one fold per segment: every rank's buffers are
//! in reach of one launch, so segment `s` of the collective's elements is
//! folded from its sources straight into its destinations (`crate::local`).

use crate::types::Collective;

/// Whose buffers a fold's sources or destinations are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranks {
    /// Segment `s`'s rank only.
    Segment,
    /// Every rank, in user-rank order.
    Every,
}

/// Where in a rank's buffer the segment's elements sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// At their place in the whole collective (block `s` of `k`).
    Block,
    /// At their place in the segment (a buffer of one block).
    Segment,
}

/// Segment `s` of a local collective: from the inputs (`send`) of
/// `from` at `from_at`, into the outputs (`recv`) of `to` at `to_at`,
/// folded with the op when `reduce` (else copied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    pub from: Ranks,
    pub from_at: At,
    pub to: Ranks,
    pub to_at: At,
    pub reduce: bool,
}

/// Collective `c`'s fold of a segment.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn local(c: Collective) -> Local {
    match c {
        // Segment `s` is rank `s`'s output, folded from block `s` of every
        // input.
        Collective::ReduceScatter => Local {
            from: Ranks::Every,
            from_at: At::Block,
            to: Ranks::Segment,
            to_at: At::Segment,
            reduce: true,
        },
        // Segment `s` is rank `s`'s input, copied to block `s` of every
        // output.
        Collective::AllGather => Local {
            from: Ranks::Segment,
            from_at: At::Segment,
            to: Ranks::Every,
            to_at: At::Block,
            reduce: false,
        },
        // One segment, every input folded into every output.
        Collective::AllReduce => Local {
            from: Ranks::Every,
            from_at: At::Segment,
            to: Ranks::Every,
            to_at: At::Segment,
            reduce: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reduction reads every rank; a copy reads one and writes every
    /// rank; the block-sized side of a reduce-scatter and an all-gather is
    /// placed by block.
    #[test]
    fn folds_match_the_collectives() {
        for c in Collective::ALL {
            let l = local(c);
            assert_eq!(l.reduce, c != Collective::AllGather);
            if l.reduce {
                assert_eq!(l.from, Ranks::Every);
            } else {
                assert_eq!((l.from, l.to), (Ranks::Segment, Ranks::Every));
            }
            let (send_len, recv_len) = c.lengths(4, 10);
            assert_eq!(l.from_at == At::Block, send_len > recv_len, "{c:?}");
            assert_eq!(l.to_at == At::Block, recv_len > send_len, "{c:?}");
        }
    }
}
