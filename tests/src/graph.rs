//! Collectives captured in a CUDA graph: virtual ranks on one device share
//! one stream, ten mixed collectives are captured once, and every replay is
//! checked with fresh inputs, poisoned outputs and guard elements.

use cudarc::driver::{CudaGraph, CudaSlice, CudaStream, DevicePtr};
use ringreduce::{Collective, Communicator, DataType, Op, RawBuffers, Result};
use std::sync::Arc;

/// What fills every output element before a replay, and every guard.
const POISON: u32 = 0x7fc0_dead;
/// Elements after each output that no collective may write.
const GUARD: usize = 16;

/// One captured collective: its kind, count (the per-rank count of
/// `ringreduce::checked::lengths`) and whether it runs in place (all-reduce
/// only).
pub type GraphCase = (Collective, usize, bool);

/// Ten collectives that take every algorithm `Auto` picks at k = 4 with
/// the default direct staging: one-shot and two-shot all-reduce, in and out
/// of place, direct reduce-scatter and all-gather, and the ring for the
/// largest all-reduce and reduce-scatter.
pub const GRAPH_CASES: [GraphCase; 10] = [
    (Collective::AllReduce, 2, false),
    (Collective::AllReduce, 1000, true),
    (Collective::ReduceScatter, 7, false),
    (Collective::AllGather, 33, false),
    (Collective::AllReduce, 50_000, false),
    (Collective::ReduceScatter, 4096, false),
    (Collective::AllReduce, 200_000, true),
    (Collective::AllGather, 20_000, false),
    (Collective::AllReduce, 1_100_000, false),
    (Collective::ReduceScatter, 300_001, false),
];

/// Input element `i` of rank `r` in case `j` at round `round`: small
/// integers, so every fold order gives the same f32 sum.
fn input(j: usize, r: usize, i: usize, round: u64) -> f32 {
    ((r * 7 + i * 3 + j + round as usize) % 13) as f32 - 6.0
}

/// Every case's buffers on one stream, and the addresses the collectives
/// take (read once, so that nothing inside a capture touches cudarc's
/// event tracking).
pub struct Captured {
    pub stream: Arc<CudaStream>,
    k: usize,
    cases: Vec<GraphCase>,
    /// `[case][rank]`; empty for in-place cases.
    send: Vec<Vec<CudaSlice<f32>>>,
    /// `[case][rank]`: the output and [`GUARD`] elements after it.
    recv: Vec<Vec<CudaSlice<f32>>>,
    raw: Vec<Vec<RawBuffers>>,
}

impl Captured {
    /// Buffers for `cases` on a new stream of rank 0's device (every rank
    /// must be on it).
    pub fn new(comm: &Communicator, cases: &[GraphCase]) -> Result<Captured> {
        let k = comm.k();
        let stream = comm.context(0).new_stream()?;
        let (mut send, mut recv, mut raw) = (vec![], vec![], vec![]);
        for &(c, n, in_place) in cases {
            let (sl, rl) = crate::checked::lengths(c, k, n);
            let mut s_case = vec![];
            let mut r_case = vec![];
            let mut raw_case = vec![];
            for _ in 0..k {
                let r = stream.alloc_zeros::<f32>(rl + GUARD)?;
                let rp = r.device_ptr(&stream).0;
                let sp = if in_place {
                    rp
                } else {
                    let s = stream.alloc_zeros::<f32>(sl.max(1))?;
                    let p = s.device_ptr(&stream).0;
                    s_case.push(s);
                    p
                };
                raw_case.push(RawBuffers {
                    send: sp,
                    send_len: sl,
                    recv: rp,
                    recv_len: rl,
                });
                r_case.push(r);
            }
            send.push(s_case);
            recv.push(r_case);
            raw.push(raw_case);
        }
        stream.synchronize()?;
        Ok(Captured {
            stream,
            k,
            cases: cases.to_vec(),
            send,
            recv,
            raw,
        })
    }

    /// Writes round `round`'s inputs and poisons every output and guard.
    pub fn fill(&mut self, round: u64) -> Result<()> {
        let poison = f32::from_bits(POISON);
        for (j, &(c, n, in_place)) in self.cases.iter().enumerate() {
            let (sl, rl) = crate::checked::lengths(c, self.k, n);
            for r in 0..self.k {
                let data: Vec<f32> = (0..sl).map(|i| input(j, r, i, round)).collect();
                let mut out = vec![poison; rl + GUARD];
                if in_place {
                    out[..sl].copy_from_slice(&data);
                } else if sl > 0 {
                    self.stream.memcpy_htod(&data, &mut self.send[j][r])?;
                }
                self.stream.memcpy_htod(&out, &mut self.recv[j][r])?;
            }
        }
        self.stream.synchronize()?;
        Ok(())
    }

    /// Enqueues every case on the one stream, every rank on it.
    pub fn enqueue(&self, comm: &Communicator) -> Result<()> {
        let streams = vec![self.stream.clone(); self.k];
        for (&(c, _, _), raw) in self.cases.iter().zip(&self.raw) {
            // SAFETY: the buffers live as long as `self`, and only this
            // stream uses them.
            unsafe { comm.collective_raw(c, raw, DataType::F32, Op::Sum, &streams)? };
        }
        Ok(())
    }

    /// Captures [`enqueue`](Self::enqueue) into a graph.
    pub fn capture(&self, comm: &Communicator) -> Result<CudaGraph> {
        ringreduce::gpu::capture(&self.stream, || self.enqueue(comm))
    }

    /// Wrong elements (outputs and guards) after round `round` finished.
    pub fn wrong(&self, round: u64) -> Result<usize> {
        let mut wrong = 0;
        for (j, &(c, n, _)) in self.cases.iter().enumerate() {
            let k = self.k;
            for u in 0..k {
                let got = self.stream.clone_dtoh(&self.recv[j][u])?;
                let (_, rl) = crate::checked::lengths(c, k, n);
                let want = |i: usize| match c {
                    Collective::AllReduce => (0..k).map(|r| input(j, r, i, round)).sum(),
                    Collective::ReduceScatter => {
                        (0..k).map(|r| input(j, r, u * n + i, round)).sum()
                    }
                    Collective::AllGather => input(j, i / n, i % n, round),
                };
                wrong += (0..rl).filter(|&i| got[i] != want(i)).count();
                wrong += got[rl..].iter().filter(|x| x.to_bits() != POISON).count();
            }
        }
        Ok(wrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringreduce::{Algorithm, CommConfig, CpuCommunicator};

    /// The captured cases keep covering the ring and both direct forms
    /// when `Auto`'s thresholds move (the CPU execution picks as the GPU
    /// does), with the local algorithm off; with it on, `Auto` runs every
    /// case local.
    #[test]
    fn graph_cases_cover_every_algorithm() {
        let local = CpuCommunicator::with_config(4, CommConfig::default()).unwrap();
        assert!(GRAPH_CASES
            .iter()
            .all(|&(c, n, _)| local.algorithm_for::<f32>(c, n).unwrap() == Algorithm::Local));
        let comm = CpuCommunicator::with_config(4, CommConfig::default().local(false)).unwrap();
        let picked: Vec<Algorithm> = GRAPH_CASES
            .iter()
            .map(|&(c, n, _)| comm.algorithm_for::<f32>(c, n).unwrap())
            .collect();
        for a in [Algorithm::Ring, Algorithm::OneShot, Algorithm::TwoShot] {
            assert!(picked.contains(&a), "no {a:?} in {picked:?}");
        }
    }
}
