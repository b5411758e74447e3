//! The local collectives' ABI: their own entries, with their own launch
//! bounds and a small by-value argument (see [`crate::local`]).

use super::{Batch, Work, BATCH_RANKS};

/// Threads per block of a local launch: every one moves data (no control
/// lane, since nothing waits).
pub const LOCAL_THREADS: u32 = 256;

/// Blocks of a local launch that must fit on one SM at once, its launch
/// bounds: two keep ptxas within 128 registers, room for a round of eight
/// packs per source and the fold, while two blocks per SM keep twice the
/// loads in flight that one block of the collective entry could.
pub const LOCAL_MIN_BLOCKS_PER_SM: u32 = 2;

/// A local call, passed by value to its entry: every rank's buffers in
/// user-rank order and the element space the grid cuts, 312 bytes instead
/// of the collective entry's 2,576-byte [`Batch`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalArgs {
    /// A [`Collective`](super::Collective).
    pub collective: u64,
    /// Ranks, at most [`BATCH_RANKS`].
    pub ranks: u64,
    /// Blocks of the grid.
    pub blocks: u64,
    /// Elements the grid cuts: `k n` for reduce-scatter and all-gather,
    /// `n` for all-reduce.
    pub total: u64,
    /// Elements of one segment (one rank's output block of a
    /// reduce-scatter, one rank's input of an all-gather; `total` for an
    /// all-reduce).
    pub segment: u64,
    /// Nonzero when the wide-pack path may run (see `plan::common_residue`).
    pub aligned: u64,
    pub send: [u64; BATCH_RANKS],
    pub recv: [u64; BATCH_RANKS],
    /// What `Avg` divides by: the call's ranks, or the whole job's where
    /// the call folds one step of a larger collective (the hierarchical
    /// step between nodes, which folds one rank per node).
    pub divisor: u64,
}

const _: () = assert!(core::mem::size_of::<LocalArgs>() == 312);

impl LocalArgs {
    /// The local call of `works` (one per rank, user-rank order, as the
    /// planner made them) on a grid of `blocks`, or `None` past
    /// [`BATCH_RANKS`] ranks or with no work.
    pub fn new(works: &[Work], blocks: u64) -> Option<LocalArgs> {
        let w = works.first()?;
        if works.len() > BATCH_RANKS {
            return None;
        }
        let all_reduce = w.collective == super::Collective::AllReduce as u64;
        let mut a = LocalArgs {
            collective: w.collective,
            ranks: works.len() as u64,
            blocks,
            total: w.geometry.total,
            segment: if all_reduce {
                w.geometry.total
            } else {
                w.geometry.block_elems
            },
            aligned: w.aligned,
            divisor: works.len() as u64,
            send: [0; BATCH_RANKS],
            recv: [0; BATCH_RANKS],
        };
        for (u, w) in works.iter().enumerate() {
            a.send[u] = w.send;
            a.recv[u] = w.recv;
        }
        Some(a)
    }
}

const _: () = assert!(core::mem::size_of::<LocalArgs>() < core::mem::size_of::<Batch>());

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Geometry;
    use crate::types::Collective;

    fn works(c: Collective, k: u64, n: u64) -> [Work; 3] {
        core::array::from_fn(|u| Work {
            collective: c as u64,
            send: 1000 + u as u64,
            recv: 2000 + u as u64,
            geometry: Geometry::new(c, k, n, 4, 1, 1),
            aligned: 1,
            ..Work::default()
        })
    }

    #[test]
    fn segments_are_blocks_except_for_all_reduce() {
        let a = LocalArgs::new(&works(Collective::ReduceScatter, 3, 10), 6).unwrap();
        assert_eq!((a.ranks, a.blocks, a.total, a.segment), (3, 6, 30, 10));
        assert_eq!((a.send[2], a.recv[2], a.send[3]), (1002, 2002, 0));
        assert_eq!(a.divisor, 3, "Avg divides by the call's ranks");
        let a = LocalArgs::new(&works(Collective::AllGather, 3, 10), 6).unwrap();
        assert_eq!((a.total, a.segment), (30, 10));
        let a = LocalArgs::new(&works(Collective::AllReduce, 3, 10), 6).unwrap();
        assert_eq!((a.total, a.segment, a.aligned), (10, 10, 1));
        assert!(LocalArgs::new(&[], 1).is_none());
        let many = [Work::default(); BATCH_RANKS + 1];
        assert!(LocalArgs::new(&many, 1).is_none());
    }
}
