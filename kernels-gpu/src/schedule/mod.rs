//! Each collective as a schedule: for the ring engine, how many steps one
//! chunk takes, which step primitive each step is, and which ring step of
//! the all-reduce it plays (that decides the block it moves); for the
//! direct engine, its phases ([`direct`](direct::direct)); for the local
//! one, the fold of a segment ([`local`](local::local)).

mod all_gather;
mod all_reduce;
pub mod direct;
pub mod local;
mod prim;
mod reduce_scatter;

pub use prim::Prim;

use crate::types::Collective;

/// The primitives the collectives of `set` (a mask of
/// [`Collective::bit`](crate::types::Collective::bit)s) use, as a mask of
/// [`Prim::index`]es.
pub const fn prims_of(set: u64) -> u64 {
    const fn bits(ps: &[Prim]) -> u64 {
        let mut m = 0;
        let mut i = 0;
        while i < ps.len() {
            m |= 1 << ps[i] as u64;
            i += 1;
        }
        m
    }
    let mut m = 0;
    if set & Collective::ReduceScatter.bit() != 0 {
        m |= bits(&reduce_scatter::PRIMS);
    }
    if set & Collective::AllGather.bit() != 0 {
        m |= bits(&all_gather::PRIMS);
    }
    if set & Collective::AllReduce.bit() != 0 {
        m |= bits(&all_reduce::PRIMS);
    }
    m
}

/// One collective on `k` ranks, as the engine runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub collective: Collective,
    pub k: u64,
}

impl Schedule {
    pub fn new(collective: Collective, k: u64) -> Self {
        Schedule { collective, k }
    }

    /// Steps per chunk.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn steps(&self) -> u64 {
        match self.collective {
            Collective::ReduceScatter => reduce_scatter::steps(self.k),
            Collective::AllGather => all_gather::steps(self.k),
            Collective::AllReduce => all_reduce::steps(self.k),
        }
    }

    /// The primitive of step `step`.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn prim(&self, step: u64) -> Prim {
        match self.collective {
            Collective::ReduceScatter => reduce_scatter::prim(self.k, step),
            Collective::AllGather => all_gather::prim(self.k, step),
            Collective::AllReduce => all_reduce::prim(self.k, step),
        }
    }

    /// The all-reduce step that step `step` plays. The all-reduce's ring
    /// step `s` at ring position `p` moves block `ring[(p - 1 - s) mod k]`
    /// ([`crate::ring::block_for_step`]); a reduce-scatter is its first `k`
    /// steps and an all-gather its last `k`.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn ring_step(&self, step: u64) -> u64 {
        match self.collective {
            Collective::AllGather => step + self.k - 1,
            _ => step,
        }
    }

    /// Slices sent (and as many received) per chunk and subchunk.
    pub fn sends_per_chunk(&self) -> u64 {
        (0..self.steps()).filter(|&s| self.prim(s).sends()).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schedule_receives_what_it_sends() {
        for c in Collective::ALL {
            for k in 2..10 {
                let s = Schedule::new(c, k);
                let recvs = (0..s.steps()).filter(|&t| s.prim(t).recvs()).count() as u64;
                assert_eq!(s.sends_per_chunk(), recvs, "{c:?} k={k}");
                // A step receives exactly what the step before sent.
                assert!(!s.prim(0).recvs());
                assert!(!s.prim(s.steps() - 1).sends());
                for t in 1..s.steps() {
                    assert!(s.prim(t - 1).sends() && s.prim(t).recvs());
                }
            }
        }
    }

    #[test]
    fn every_step_uses_a_primitive_its_collective_lists() {
        for c in Collective::ALL {
            let set = prims_of(c.bit());
            for k in 2..12 {
                let s = Schedule::new(c, k);
                for t in 0..s.steps() {
                    let p = s.prim(t);
                    assert_eq!(Prim::from_index_in(p.index(), set), Some(p), "{c:?} k={k}");
                }
            }
        }
        assert_eq!(prims_of(0), 0);
        assert_eq!(
            Prim::from_index_in(Prim::Send.index(), prims_of(Collective::AllGather.bit())),
            None
        );
        assert_eq!(Prim::from_index_in(64, u64::MAX), None);
    }

    #[test]
    fn every_primitive_survives_its_index() {
        let all = [
            Prim::Send,
            Prim::RecvReduceSend,
            Prim::RecvReduceCopy,
            Prim::RecvReduceCopySend,
            Prim::CopySend,
            Prim::RecvCopySend,
            Prim::RecvCopy,
        ];
        for (i, p) in all.into_iter().enumerate() {
            assert_eq!(p.index(), i as u64);
            assert_eq!(Prim::from_index(p.index()), Some(p));
        }
        assert_eq!(Prim::from_index(all.len() as u64), None);
        assert_eq!(Prim::from_index(u64::MAX), None);
    }

    #[test]
    fn all_reduce_is_reduce_scatter_then_all_gather() {
        for k in 2..10 {
            let ar = Schedule::new(Collective::AllReduce, k);
            let rs = Schedule::new(Collective::ReduceScatter, k);
            let ag = Schedule::new(Collective::AllGather, k);
            assert_eq!(ar.steps(), 2 * k - 1);
            for t in 0..k - 1 {
                assert_eq!(ar.prim(t), rs.prim(t));
                assert_eq!(ar.ring_step(t), rs.ring_step(t));
            }
            assert_eq!(ar.prim(k - 1), Prim::RecvReduceCopySend);
            for t in 1..k {
                assert_eq!(ar.prim(k - 1 + t), ag.prim(t));
                assert_eq!(ar.ring_step(k - 1 + t), ag.ring_step(t));
            }
        }
    }
}
