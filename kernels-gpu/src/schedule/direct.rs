//! The direct collectives as phases over every peer's staging: stage →
//! exchange → fold (sources into destinations) → exchange → gather. One
//! block runs one channel's share of each phase (`crate::direct`).

use crate::types::{Algorithm, Collective};

/// Which blocks of the own input a rank stages, or of the output it folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    /// Its own block only.
    Own,
    /// Every block.
    Every,
}

/// What the phase after the first exchange does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Fold `blocks` of every peer's staged input, in user-rank order, into
    /// the output; with `keep`, also into the own result region, for the
    /// peers to gather after a second exchange.
    Reduce { blocks: Blocks, keep: bool },
    /// Copy every peer's staged block into its block of the output.
    Gather,
}

/// One direct collective, phase by phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Direct {
    /// What the rank copies into its own staging first.
    pub stage: Blocks,
    /// The phase after the first exchange.
    pub fold: Fold,
    /// Whether a second exchange follows, and every other block is copied
    /// from its owner's result region.
    pub gather_results: bool,
}

/// Collective `c` with direct algorithm `a` (the one-shot unless `a` is the
/// two-shot all-reduce: every other collective is one shot).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub fn direct(c: Collective, a: Algorithm) -> Direct {
    let two_shot = a == Algorithm::TwoShot;
    match c {
        Collective::ReduceScatter => Direct {
            stage: Blocks::Every,
            fold: Fold::Reduce {
                blocks: Blocks::Own,
                keep: false,
            },
            gather_results: false,
        },
        Collective::AllGather => Direct {
            stage: Blocks::Own,
            fold: Fold::Gather,
            gather_results: false,
        },
        Collective::AllReduce => Direct {
            stage: Blocks::Every,
            fold: Fold::Reduce {
                blocks: if two_shot { Blocks::Own } else { Blocks::Every },
                keep: two_shot,
            },
            gather_results: two_shot,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's output is written exactly once: by the fold for the
    /// blocks it folds, by the gather for the others.
    #[test]
    fn every_output_block_is_written_once() {
        for c in Collective::ALL {
            for a in [Algorithm::OneShot, Algorithm::TwoShot] {
                let s = direct(c, a);
                let (own, others) = match (c, s.fold) {
                    (Collective::ReduceScatter, Fold::Reduce { blocks, .. }) => {
                        (blocks == Blocks::Own, false)
                    }
                    (_, Fold::Gather) => (true, true),
                    (_, Fold::Reduce { blocks, .. }) => {
                        (true, blocks == Blocks::Every || s.gather_results)
                    }
                };
                assert!(own, "{c:?} {a:?}");
                // A reduce-scatter has only its own block to write.
                assert_eq!(others, c != Collective::ReduceScatter, "{c:?} {a:?}");
                // Results are gathered only where they were kept.
                let keeps = matches!(s.fold, Fold::Reduce { keep: true, .. });
                assert_eq!(keeps, s.gather_results, "{c:?} {a:?}");
            }
        }
        // Only the all-gather stages less than every block.
        assert_eq!(
            direct(Collective::AllGather, Algorithm::OneShot).stage,
            Blocks::Own
        );
    }
}
