//! Gradients that live in the buckets (PyTorch DDP's
//! `gradient_as_bucket_view`): the layer allocates each rank's buckets once
//! and hands out each tensor's place in them, the backward pass writes the
//! gradients there, and the fused all-reduce then runs on the buckets in
//! place, with no packing or unpacking copy.
//!
//! ```rust
//! use ringreduce::{Collectives, CpuCommunicator, GradConfig, GradSync};
//! let comm = CpuCommunicator::new(2)?;
//! let mut sync = GradSync::new(&comm, GradConfig::default())?;
//! let mut grads = sync.bucketed(&[1000, 10, 300_000])?; // once, at model setup
//! // Each step: the backward pass writes every gradient into its place...
//! for t in (0..3).rev() {
//!     let p = grads.place(t).unwrap().clone();
//!     for u in 0..2 {
//!         let g = vec![1.0f32; p.at.len()];
//!         comm.write(u, &mut grads.bucket_mut(p.bucket)[u], p.at.start, &g)?;
//!     }
//! }
//! // ...then one in-place all-reduce per bucket (or `bucketed_session` and
//! // `ready(t)` as each gradient is written).
//! sync.all_reduce_bucketed(&mut grads)?;
//! let p = grads.place(1).unwrap().clone();
//! assert_eq!(comm.read(0, &grads.bucket(p.bucket)[0], p.at)?, vec![2.0; 10]);
//! # Ok::<(), ringreduce::Error>(())
//! ```

use super::backend::{GradBackend, BEGUN_AT_ONCE};
use super::bucket::{plan, Bucket};
use super::fused::{reduce_plain, Reduce};
use super::GradSync;
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::ops::Range;

/// Where one tensor lives: elements `at` of bucket `bucket`, on every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The bucket's index.
    pub bucket: usize,
    /// The tensor's elements in it.
    pub at: Range<usize>,
}

/// A list of gradients stored in buckets of the layer's cap, made by
/// [`GradSync::bucketed`]. A tensor longer than the cap has a bucket of its
/// own; an empty tensor has no place. Buckets start zeroed.
pub struct BucketedGrads<C: GradBackend> {
    places: Vec<Option<Place>>,
    /// Each bucket's tensors, in list order.
    members: Vec<Vec<usize>>,
    /// `bufs[b][u]`: bucket `b` on rank `u`, exactly as long as its contents.
    bufs: Vec<Vec<C::Buf<f32>>>,
}

impl<C: GradBackend> BucketedGrads<C> {
    /// Tensors in the list.
    pub fn tensors(&self) -> usize {
        self.places.len()
    }

    /// Buckets.
    pub fn buckets(&self) -> usize {
        self.bufs.len()
    }

    /// Tensor `t`'s place; `None` for an empty tensor (or a `t` past the
    /// list).
    pub fn place(&self, t: usize) -> Option<&Place> {
        self.places.get(t).and_then(Option::as_ref)
    }

    /// Bucket `b`'s buffers, one per rank (user rank order).
    pub fn bucket(&self, b: usize) -> &[C::Buf<f32>] {
        &self.bufs[b]
    }

    /// Bucket `b`'s buffers, to write gradients into (see [`place`](Self::place)).
    pub fn bucket_mut(&mut self, b: usize) -> &mut [C::Buf<f32>] {
        &mut self.bufs[b]
    }

    /// The tensors stored in bucket `b`, in list order.
    pub fn members(&self, b: usize) -> &[usize] {
        &self.members[b]
    }
}

impl<'c, C: GradBackend> GradSync<'c, C> {
    /// Storage for gradients of lengths `lens` (elements), laid out in
    /// buckets as [`fused_all_reduce`](Self::fused_all_reduce) packs them,
    /// zeroed on every rank. A setup call: it waits for the zeroing (and
    /// whatever the communicator had queued), so that any stream may write
    /// the buckets once it returns.
    pub fn bucketed(&mut self, lens: &[usize]) -> Result<BucketedGrads<C>> {
        let mut places = vec![None; lens.len()];
        let mut members = Vec::new();
        let mut bufs = Vec::new();
        for bucket in plan(lens, self.cap()) {
            let b = bufs.len();
            let (items, len): (Vec<(usize, usize)>, usize) = match bucket {
                Bucket::Packed { items, len } => {
                    (items.iter().map(|i| (i.tensor, i.offset)).collect(), len)
                }
                Bucket::Alone { tensor } => (vec![(tensor, 0)], lens[tensor]),
            };
            for &(t, offset) in &items {
                places[t] = Some(Place {
                    bucket: b,
                    at: offset..offset + lens[t],
                });
            }
            members.push(items.iter().map(|&(t, _)| t).collect());
            let per_rank = self
                .own
                .iter()
                .enumerate()
                .map(|(u, q)| self.comm.alloc::<f32>(u, q, len))
                .collect::<Result<Vec<_>>>()?;
            bufs.push(per_rank);
        }
        self.comm.synchronize()?;
        Ok(BucketedGrads {
            places,
            members,
            bufs,
        })
    }

    /// The fused all-reduce of gradients stored in their buckets: one
    /// in-place all-reduce per bucket on the communicator's own queues, no
    /// copy. The same result as [`fused_all_reduce`](Self::fused_all_reduce)
    /// of the same values, since the buckets are laid out as it packs them.
    pub fn all_reduce_bucketed(&mut self, grads: &mut BucketedGrads<C>) -> Result<()> {
        self.bucketed_with(grads, Reduce::Plain)
    }

    /// [`all_reduce_bucketed`](Self::all_reduce_bucketed) with each bucket
    /// in half precision, as [`all_reduce_half`](Self::all_reduce_half).
    pub fn all_reduce_bucketed_half(
        &mut self,
        grads: &mut BucketedGrads<C>,
        precision: super::Precision,
        prescale: bool,
    ) -> Result<()> {
        self.bucketed_with(grads, Reduce::Half(precision, prescale))
    }

    fn bucketed_with(&mut self, grads: &mut BucketedGrads<C>, mode: Reduce) -> Result<()> {
        self.check_bucketed(grads)?;
        let own = self.own.clone();
        let done = self.bucketed_in_order(grads, mode, &own);
        // Nothing runs on into the buckets once the call has returned.
        let settled = self.comm.settle();
        done.and(settled)
    }

    /// Each bucket in order. Where the backend begins an all-reduce
    /// ([`GradBackend::begin_all_reduce`]: ranks on several nodes), a
    /// bucket's step between nodes runs while the next one is reduced
    /// inside the node, as the fused call's buckets do.
    fn bucketed_in_order(
        &mut self,
        grads: &mut BucketedGrads<C>,
        mode: Reduce,
        own: &[C::Queue],
    ) -> Result<()> {
        let (comm, op) = (self.comm, self.op());
        let mut flight: VecDeque<(usize, C::Begun<'c>)> = VecDeque::new();
        let land = |grads: &mut BucketedGrads<C>, (b, begun): (usize, C::Begun<'c>)| match (
            grads.bufs[b].as_mut_slice(),
            own,
        ) {
            ([buf], [q]) => comm.end_all_reduce(buf, begun, q),
            _ => Ok(()),
        };
        for b in 0..grads.bufs.len() {
            let n = C::len_of(&grads.bufs[b][0]);
            let begun = match (mode, grads.bufs[b].as_mut_slice(), own) {
                (Reduce::Plain, [buf], [q]) if n > 0 => {
                    comm.begin_all_reduce(buf, n, op, q, b % BEGUN_AT_ONCE)
                }
                _ => None,
            };
            match begun {
                Some(begun) => {
                    flight.push_back((b, begun?));
                    if flight.len() == BEGUN_AT_ONCE {
                        land(grads, flight.pop_front().expect("in flight"))?;
                    }
                }
                None => {
                    while let Some(f) = flight.pop_front() {
                        land(grads, f)?;
                    }
                    self.reduce_tensor(&mut grads.bufs[b], n, mode, own)?;
                }
            }
        }
        while let Some(f) = flight.pop_front() {
            land(grads, f)?;
        }
        Ok(())
    }

    /// Buckets made for this communicator: one buffer per rank, each on its
    /// rank's device, all of one length.
    fn check_bucketed(&self, grads: &BucketedGrads<C>) -> Result<()> {
        for bucket in &grads.bufs {
            self.check_tensor(bucket)?;
        }
        Ok(())
    }

    /// Starts the streaming form over gradients stored in `grads`: the
    /// backward pass writes them on `producers` (one queue per rank) and
    /// marks each [`ready`](BucketSession::ready); a bucket is all-reduced,
    /// in place on the layer's communication queue, as soon as all its
    /// tensors are ready, as DDP does.
    pub fn bucketed_session<'s>(
        &'s mut self,
        grads: &'s mut BucketedGrads<C>,
        producers: Vec<C::Queue>,
    ) -> Result<BucketSession<'s, 'c, C>> {
        let k = self.comm.local_ranks().len();
        if producers.len() != k {
            return Err(Error::WrongStreamCount {
                got: producers.len(),
                k,
            });
        }
        self.check_bucketed(grads)?;
        // The buckets may still be read by calls queued on the own queues.
        self.comm.order(&self.net, &self.own)?;
        let missing = grads.members.iter().map(Vec::len).collect();
        let ready = vec![false; grads.places.len()];
        let reduced = vec![false; grads.bufs.len()];
        Ok(BucketSession {
            g: self,
            grads,
            producers,
            missing,
            ready,
            reduced,
            done: false,
        })
    }
}

/// The streaming all-reduce of a [`BucketedGrads`] (see
/// [`GradSync::bucketed_session`]). The buckets stay borrowed until
/// [`wait`](Self::wait).
pub struct BucketSession<'s, 'c, C: GradBackend> {
    g: &'s mut GradSync<'c, C>,
    grads: &'s mut BucketedGrads<C>,
    producers: Vec<C::Queue>,
    /// Per bucket, its tensors not yet ready.
    missing: Vec<usize>,
    ready: Vec<bool>,
    reduced: Vec<bool>,
    done: bool,
}

impl<C: GradBackend> BucketSession<'_, '_, C> {
    /// Marks tensor `t` written (by the work queued on the producers so
    /// far); the last tensor of a bucket starts that bucket's all-reduce.
    /// A `t` past the list, or one already marked, is a typed error.
    pub fn ready(&mut self, t: usize) -> Result<()> {
        let tensors = self.ready.len();
        match self.ready.get(t) {
            None => return Err(Error::NoSuchTensor { tensor: t, tensors }),
            Some(true) => return Err(Error::AlreadyReady(t)),
            Some(false) => {}
        }
        self.ready[t] = true;
        let Some(b) = self.grads.place(t).map(|p| p.bucket) else {
            return Ok(()); // empty: nothing to reduce
        };
        self.missing[b] -= 1;
        if self.missing[b] == 0 {
            self.reduce(b)?;
        }
        Ok(())
    }

    /// All-reduces every bucket not yet reduced (with its gradients as
    /// they stand: an unmarked tensor counts as written, as DDP's unused
    /// parameters), then makes each of `queues` (one per rank) wait on the
    /// device for every result; no host synchronisation. With nothing
    /// marked it does nothing, as [`Session::wait`](super::Session::wait)
    /// with nothing pushed. Producers of the next step must run after
    /// `queues` (usually they are the same streams).
    pub fn wait(mut self, queues: &[C::Queue]) -> Result<()> {
        let k = self.g.comm.local_ranks().len();
        if queues.len() != k {
            // Dropping the session still finishes and orders the buckets.
            return Err(Error::WrongStreamCount {
                got: queues.len(),
                k,
            });
        }
        self.done = true;
        if !self.ready.contains(&true) {
            return Ok(());
        }
        self.finish()?;
        let g = &*self.g;
        g.comm.order(queues, &g.net)?;
        // Later calls on the own queues may read or reduce the buckets.
        g.comm.order(&g.own, &g.net)
    }

    fn finish(&mut self) -> Result<()> {
        for b in 0..self.reduced.len() {
            if !self.reduced[b] {
                self.reduce(b)?;
            }
        }
        Ok(())
    }

    /// Bucket `b`, in place on the communication queue after the producers.
    fn reduce(&mut self, b: usize) -> Result<()> {
        self.reduced[b] = true;
        let g = &*self.g;
        g.comm.order(&g.net, &self.producers)?;
        let n = C::len_of(&self.grads.bufs[b][0]);
        let mut bufs: Vec<&mut C::Buf<f32>> = self.grads.bufs[b].iter_mut().collect();
        reduce_plain(g.comm, &mut bufs, n, g.op(), &g.net)
    }
}

impl<C: GradBackend> Drop for BucketSession<'_, '_, C> {
    /// A session dropped without `wait` still reduces its buckets and
    /// orders the communicator's own queues after them, so the buckets are
    /// never read there half reduced.
    fn drop(&mut self) {
        if !self.done && self.ready.contains(&true) {
            let _ = self.finish();
            let g = &*self.g;
            let _ = g.comm.order(&g.own, &g.net);
        }
    }
}
