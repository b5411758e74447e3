//! Test cases and the matrix they are drawn from.

use crate::checked::{lengths, run, Spec};
use crate::data::inputs;
use crate::data::with_type;
use ringreduce::{Collective, Collectives, DataType, Op, Result};

/// How buffers sit relative to 16-byte packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offsets {
    /// Every buffer that holds all blocks `o` elements in, and every one that
    /// holds a rank's own block where that block's residue matches: the
    /// wide-pack path runs (with a scalar head when `o` is odd).
    Congruent(usize),
    /// Offsets that differ between ranks: usually the scalar path.
    Scattered(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub collective: Collective,
    pub dtype: DataType,
    pub op: Op,
    pub n: usize,
    pub in_place: bool,
    pub offsets: Offsets,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    pub elements: usize,
    pub wrong: usize,
}

impl Case {
    pub fn offsets(&self, k: usize) -> (Vec<usize>, Vec<usize>) {
        let lanes = 16 / self.dtype.size() as usize;
        let own: Vec<usize> = (0..k)
            .map(|u| (o_of(self.offsets) + u * self.n) % lanes)
            .collect();
        match self.offsets {
            Offsets::Congruent(o) => match self.collective {
                Collective::ReduceScatter => (vec![o; k], own),
                Collective::AllGather => (own, vec![o; k]),
                Collective::AllReduce => (vec![o; k], vec![o; k]),
            },
            Offsets::Scattered(o) => (
                (0..k).map(|u| (o + u) % 4).collect(),
                (0..k).map(|u| (o + 2 * u + 1) % 4).collect(),
            ),
        }
    }
}

fn o_of(o: Offsets) -> usize {
    match o {
        Offsets::Congruent(o) | Offsets::Scattered(o) => o,
    }
}

/// Runs one case on a backend and compares every element (and every guard
/// element around the buffers) with the sequential reference.
pub fn run_case<C: Collectives>(comm: &C, c: &Case) -> Result<Outcome> {
    let k = comm.k();
    let (send_off, recv_off) = c.offsets(k);
    let send_len = lengths(c.collective, k, c.n).0;
    let wrong = with_type!(c.dtype, T => {
        let spec = Spec::<T> {
            collective: c.collective,
            inputs: inputs::<T>(c.seed, k, send_len),
            n: c.n,
            op: c.op,
            in_place: c.in_place,
            send_off,
            recv_off,
        };
        run(comm, spec, c.seed)?
    });
    Ok(Outcome {
        elements: k * send_len,
        wrong,
    })
}

/// The counts every backend runs.
pub const COUNTS: [usize; 13] = [0, 1, 2, 3, 7, 8, 9, 255, 256, 257, 1023, 4097, 65537];

/// A sample of the (type, op, count, placement, offset) matrix of one
/// collective for one `k`: every type meets every op, every count meets
/// several types and both placements, and offsets cycle through 0..3 in
/// both kinds. `stride` thins the sample (1 = every type x op at every
/// count).
pub fn matrix(collective: Collective, k: usize, counts: &[usize], stride: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut i = 0usize;
    for (ci, &n) in counts.iter().enumerate() {
        for (di, &dtype) in DataType::ALL.iter().enumerate() {
            for (oi, &op) in Op::ALL.iter().enumerate() {
                i += 1;
                if !(di * 5 + oi + ci * 7 + k).is_multiple_of(stride) {
                    continue;
                }
                let o = i % 4;
                out.push(Case {
                    collective,
                    dtype,
                    op,
                    n,
                    in_place: (i / 3).is_multiple_of(2),
                    offsets: if (i / 2).is_multiple_of(3) {
                        Offsets::Scattered(o)
                    } else {
                        Offsets::Congruent(o)
                    },
                    seed: (collective as u64) << 56 | (k as u64) << 40 | (n as u64) << 8 | i as u64,
                });
            }
        }
    }
    out
}
