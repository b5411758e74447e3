//! Copy descriptors kept on the device between calls.
//!
//! A training loop packs the same tensors into the same buckets every step,
//! so its descriptor lists repeat. Uploading each list again cost an
//! allocation, a host-to-device copy from pageable memory and a free per
//! bucket, rank and direction; kept, a repeated list costs a comparison.

use super::backend::GradBackend;
use crate::error::Result;

/// Lists kept per rank: ResNet-50's fused call needs ten (five buckets,
/// both ways), a streamed step a few more.
pub(super) const KEEP: usize = 32;

/// One kept list: its words, the queue it was uploaded and used on, and
/// its device copy.
struct Kept<C: GradBackend> {
    words: Vec<u64>,
    queue: u64,
    buf: C::Buf<u64>,
}

/// Per rank, the lists most recently used last.
pub(super) struct DescCache<C: GradBackend> {
    ranks: Vec<Vec<Kept<C>>>,
}

impl<C: GradBackend> DescCache<C> {
    pub(super) fn new(k: usize) -> Self {
        DescCache {
            ranks: (0..k).map(|_| Vec::new()).collect(),
        }
    }

    /// Rank `u`'s device copy of `words` for a task on `q`: the kept one,
    /// or a new upload in order on `q`. A list is only reused on the queue
    /// it was uploaded on, so that an evicted copy, freed in order on that
    /// queue, outlives every task that read it.
    pub(super) fn get(
        &mut self,
        comm: &C,
        u: usize,
        q: &C::Queue,
        words: &[u64],
    ) -> Result<&C::Buf<u64>> {
        let queue = comm.queue_id(q);
        let kept = &mut self.ranks[u];
        match kept
            .iter()
            .position(|e| e.queue == queue && e.words == words)
        {
            Some(i) => {
                let e = kept.remove(i);
                kept.push(e);
            }
            None => {
                let mut buf = comm.alloc::<u64>(u, q, words.len())?;
                comm.write_on(u, q, &mut buf, words)?;
                if kept.len() == KEEP {
                    kept.remove(0);
                }
                kept.push(Kept {
                    words: words.to_vec(),
                    queue,
                    buf,
                });
            }
        }
        Ok(&kept.last().expect("just pushed").buf)
    }

    /// Lists kept for rank `u`.
    #[cfg(test)]
    fn len(&self, u: usize) -> usize {
        self.ranks[u].len()
    }

    /// Whether rank `u` keeps `words`.
    #[cfg(test)]
    fn keeps(&self, u: usize, words: &[u64]) -> bool {
        self.ranks[u].iter().any(|e| e.words == words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Collectives, CpuCommunicator};

    #[test]
    fn a_repeated_list_is_uploaded_once_and_the_oldest_goes_first() {
        let comm = CpuCommunicator::new(2).unwrap();
        let mut c = DescCache::<CpuCommunicator>::new(2);
        let first = comm.addr(0, c.get(&comm, 0, &(), &[1, 2, 3]).unwrap());
        assert_eq!(
            comm.addr(0, c.get(&comm, 0, &(), &[1, 2, 3]).unwrap()),
            first
        );
        assert_eq!((c.len(0), c.len(1)), (1, 0));
        let other = comm.addr(0, c.get(&comm, 0, &(), &[4, 5, 6]).unwrap());
        assert_ne!(other, first);
        assert_eq!(
            comm.download(0, c.get(&comm, 0, &(), &[4, 5, 6]).unwrap())
                .unwrap(),
            vec![4, 5, 6]
        );
        for i in 0..KEEP as u64 {
            c.get(&comm, 0, &(), &[i, 100]).unwrap();
        }
        assert_eq!(c.len(0), KEEP);
        // [1, 2, 3] was the least recently used, so it went first, then
        // [4, 5, 6].
        assert!(!c.keeps(0, &[1, 2, 3]) && !c.keeps(0, &[4, 5, 6]));
        assert!(c.keeps(0, &[2, 100]) && c.keeps(0, &[KEEP as u64 - 1, 100]));
        let again = c.get(&comm, 0, &(), &[1, 2, 3]).unwrap();
        assert_eq!(comm.download(0, again).unwrap(), vec![1, 2, 3]);
        assert_eq!(c.len(0), KEEP);
    }
}
