//! Gradient synchronisation over any [`Collectives`](crate::Collectives)
//! backend, after Apache SINGA's communicator: a plain all-reduce of one tensor, a fused
//! all-reduce of many through buckets (with a streaming form that overlaps
//! the backward pass), a half-precision all-reduce of `f32` gradients, and a
//! sparse all-reduce by threshold or top-K with error feedback.
//!
//! A *tensor* here is one buffer per local rank (`Vec<C::Buf<f32>>`, in
//! the order of [`Collectives::local_ranks`](crate::Collectives::local_ranks)),
//! as every call of a [`Collectives`](crate::Collectives) backend takes:
//! every rank's in one process, or this process's own rank's in a job of
//! processes, where the layer runs unchanged. Queues and scratch buffers
//! are per local rank too (the backend's `rank` arguments below count
//! them).
//! Every call is queued on the communicator's own queues (its streams) and
//! returns without waiting, like a collective; read results through the
//! backend (`download`, `read`), which waits for them. The streaming
//! [`Session`] runs on the layer's own copy and communication queues, and
//! `wait` orders the caller's queues after them on the device.
//!
//! On a [`HierComm`](crate::HierComm) (ranks on several hosts) the layer
//! runs unchanged, and its half precision and sparse selection compress
//! only the step between hosts, where the wire is slow
//! ([`GradBackend::reduce_across`]; `docs/beyond-one-node.md`).
//!
//! Results are sums (or averages with [`GradConfig::average`]) folded as
//! the backend's all-reduce folds them. A fused all-reduce gives bitwise the
//! result of one all-reduce per tensor wherever the fold order does not
//! depend on an element's place in the buffer: always for the direct
//! algorithms (user-rank order), and for exactly representable sums.
//! The ring folds each block starting at a different rank, so with it a
//! packed element can differ from the unpacked one in its last bits, as
//! with NCCL and PyTorch DDP's buckets.
//!
//! A call that fails at run time (a timeout, an abort, a peer lost) breaks
//! the communicator, settles every bucket it began and leaves its tensors
//! unspecified, since a collective cut off half way cannot be completed
//! (`docs/usage.md`, *Gradient synchronisation*).
//!
//! A training step, on the CPU execution (the GPU communicator is the same):
//!
//! ```rust
//! use ringreduce::{CpuCommunicator, GradConfig, GradSync, HostBuffer, Precision, Sparsity};
//! use ringreduce::grad::GradBackend;
//! let k = 4;
//! let comm = CpuCommunicator::new(k)?;
//! let mut grads = GradSync::new(&comm, GradConfig::default())?; // 25 MiB buckets
//! let tensor = |n: usize| -> Vec<HostBuffer<f32>> {
//!     (0..k).map(|u| HostBuffer::from_slice(&vec![u as f32; n])).collect()
//! };
//! let mut layers = vec![tensor(1000), tensor(10), tensor(300_000)];
//!
//! // One step: as the backward pass produces each gradient (last layer
//! // first), push it; a full bucket is all-reduced while packing goes on.
//! let mut step = grads.session(comm.own_queues())?;
//! for g in layers.iter_mut().rev() {
//!     step.push(g)?;
//! }
//! step.wait(&comm.own_queues())?; // those queues now see every result
//! assert_eq!(layers[1][0].to_vec(), vec![6.0; 10]); // 0 + 1 + 2 + 3
//!
//! // The same in half precision, each divided by k first (an average).
//! grads.fused_all_reduce_half(&mut layers, Precision::Bf16, true)?;
//! // Top-1% sparse with error feedback: what is not sent stays in `residual`.
//! let mut residual = tensor(300_000);
//! grads.sparse_all_reduce(&mut layers[2], Sparsity::TopK(0.01), Some(&mut residual))?;
//! # Ok::<(), ringreduce::Error>(())
//! ```

mod backend;
pub mod bucket;
mod descs;
mod fused;
mod sparse;
mod view;

pub use crate::gpu::task_blocks;
pub(crate) use backend::BEGUN_AT_ONCE;
pub use backend::{GradBackend, Wire};
pub use fused::Session;
pub use sparse::SparseSent;
pub(crate) use sparse::{goes_dense, selection_tasks, sparse_top_k};
pub use view::{BucketSession, BucketedGrads, Place};

use crate::element::RsElement;
use crate::error::{Error, Result};

/// How the layer packs and when the sparse path gives up.
#[derive(Debug, Clone, PartialEq)]
pub struct GradConfig {
    /// The bucket size of the fused all-reduce: 25 MiB as PyTorch DDP.
    pub bucket_bytes: usize,
    /// Averages instead of summing (one division by `k` at the end).
    pub average: bool,
    /// The sparse path sends dense (an all-reduce of the selection) when
    /// the selected share of the elements is above this.
    pub dense_above: f64,
}

impl Default for GradConfig {
    fn default() -> Self {
        GradConfig {
            bucket_bytes: 25 << 20,
            average: false,
            dense_above: DEFAULT_DENSE_ABOVE,
        }
    }
}

/// Where the sparse exchange stops paying: it all-gathers 8 bytes per
/// selected element from every rank (`k * 8 * d * n` bytes in), where the
/// ring all-reduce moves about `2 * 4 * n`; so sparse wins below `d = 1/k`
/// on bytes alone, less the selection's passes. That rule is for one rank
/// per GPU, where links bound the exchange (not yet measured). With
/// virtual ranks on one H200 sparse was slower than dense at every density
/// from 0.1% up, since there the passes over memory, not the exchange, set
/// its cost (`bench/NOTES.md`, 2026-12-04: the gradient layer measured part by part).
pub const DEFAULT_DENSE_ABOVE: f64 = 0.05;

/// The half-precision format of [`GradSync::all_reduce_half`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// IEEE binary16: 11 bits of precision, overflow above 65504.
    F16,
    /// bfloat16: `f32`'s range, 8 bits of precision.
    Bf16,
}

impl Precision {
    /// The kernels' name for it.
    pub(crate) fn format(self) -> ringreduce_kernels::grad::abi::HalfFormat {
        use ringreduce_kernels::grad::abi::HalfFormat;
        match self {
            Precision::F16 => HalfFormat::F16,
            Precision::Bf16 => HalfFormat::Bf16,
        }
    }
}

/// Which elements the sparse all-reduce sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sparsity {
    /// Every element with `|g'| >= t`.
    Threshold(f32),
    /// The `ceil(fraction * n)` elements of largest `|g'|`, ties to the
    /// lower index.
    TopK(f64),
}

impl Sparsity {
    /// A typed error for a NaN or negative threshold, or a fraction outside
    /// (0, 1].
    pub fn check(self) -> Result<()> {
        match self {
            Sparsity::Threshold(t) if t.is_nan() || t < 0.0 => Err(Error::BadThreshold(t)),
            Sparsity::TopK(f) if !(f > 0.0 && f <= 1.0) => Err(Error::BadFraction(f)),
            _ => Ok(()),
        }
    }

    /// Elements top-K selects of `n`.
    pub fn k_of(fraction: f64, n: u64) -> u64 {
        ((fraction * n as f64).ceil() as u64).clamp(1, n.max(1))
    }
}

/// The gradient layer over a communicator: its queues and scratch buffers.
pub struct GradSync<'c, C: GradBackend> {
    comm: &'c C,
    config: GradConfig,
    own: Vec<C::Queue>,
    copy: Vec<C::Queue>,
    net: Vec<C::Queue>,
    /// The two buckets the streaming form alternates between (allocated on
    /// first use, at the cap), and the fused call's.
    buckets: [Slots<C::Buf<f32>>; 2],
    /// Sparse scratch: g' and a packed residual.
    work: Slots<C::Buf<f32>>,
    packed_residual: Slots<C::Buf<f32>>,
    /// Selection state, tile counts, own pairs, gathered pairs, counts,
    /// the candidate list.
    words: [Slots<C::Buf<u64>>; 6],
    half: Slots<C::Buf<half::f16>>,
    bhalf: Slots<C::Buf<half::bf16>>,
    /// Copy descriptors uploaded once and reused while they repeat.
    descs: descs::DescCache<C>,
}

/// One scratch buffer per rank, grown on demand.
struct Slots<B> {
    bufs: Vec<Option<(B, usize)>>,
}

impl<B> Slots<B> {
    fn new(k: usize) -> Self {
        Slots {
            bufs: (0..k).map(|_| None).collect(),
        }
    }

    /// Every rank's buffer, each allocated by [`slot`] before.
    fn all_mut(&mut self) -> Vec<&mut B> {
        self.bufs
            .iter_mut()
            .map(|b| &mut b.as_mut().expect("allocated").0)
            .collect()
    }
}

impl<'c, C: GradBackend> GradSync<'c, C> {
    /// The layer over `comm`, with its own copy and communication queues.
    pub fn new(comm: &'c C, config: GradConfig) -> Result<Self> {
        let k = comm.local_ranks().len();
        Ok(GradSync {
            comm,
            own: comm.own_queues(),
            copy: comm.new_queues()?,
            net: comm.new_queues()?,
            config,
            buckets: [Slots::new(k), Slots::new(k)],
            work: Slots::new(k),
            packed_residual: Slots::new(k),
            words: std::array::from_fn(|_| Slots::new(k)),
            half: Slots::new(k),
            bhalf: Slots::new(k),
            descs: descs::DescCache::new(k),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &GradConfig {
        &self.config
    }

    /// Elements of a bucket.
    fn cap(&self) -> usize {
        (self.config.bucket_bytes / 4).max(1)
    }

    fn op(&self) -> ringreduce_kernels::Op {
        if self.config.average {
            ringreduce_kernels::Op::Avg
        } else {
            ringreduce_kernels::Op::Sum
        }
    }

    /// One buffer per rank, all of one length and on their ranks' devices:
    /// that length.
    fn check_tensor<T: RsElement>(&self, t: &[C::Buf<T>]) -> Result<usize> {
        let n = t.first().map_or(0, |b| C::len_of(b));
        self.check_lengths(t, n, |rank, got, want| Error::CountMismatch {
            rank,
            got,
            want,
        })?;
        Ok(n)
    }

    /// One buffer per rank, each `n` long and on its rank's device; a
    /// length that differs is `mismatch(rank, got, want)`.
    fn check_lengths<T: RsElement>(
        &self,
        t: &[C::Buf<T>],
        n: usize,
        mismatch: fn(usize, u64, u64) -> Error,
    ) -> Result<()> {
        let here = self.comm.local_ranks();
        if t.len() != here.len() {
            return Err(Error::WrongBufferCount {
                got: t.len(),
                k: here.len(),
            });
        }
        for (u, b) in t.iter().enumerate() {
            if C::len_of(b) != n {
                return Err(mismatch(here.start + u, C::len_of(b) as u64, n as u64));
            }
            self.comm.check_placement(u, b)?;
        }
        Ok(())
    }
}

/// The backend's own compressed step between nodes
/// ([`GradBackend::reduce_across`]) over `bufs`, where it has one: `None`
/// leaves the whole all-reduce to the layer. A backend across nodes holds
/// one rank per process, so only a single buffer is offered.
fn across<C: GradBackend, T: RsElement>(
    comm: &C,
    bufs: &mut [&mut C::Buf<T>],
    n: usize,
    wire: Wire,
    residual: Option<&mut C::Buf<f32>>,
    q: &[C::Queue],
) -> Option<Result<SparseSent>> {
    match (bufs, q) {
        ([buf], [q]) => comm.reduce_across(buf, n, wire, residual, q),
        _ => None,
    }
}

/// Rank `rank`'s slot of `slots`, at least `n` long, allocated on `queue`.
fn slot<'s, C: GradBackend, T: RsElement>(
    comm: &C,
    slots: &'s mut Slots<C::Buf<T>>,
    rank: usize,
    queue: &C::Queue,
    n: usize,
) -> Result<&'s mut C::Buf<T>> {
    let s = &mut slots.bufs[rank];
    if s.as_ref().is_none_or(|(_, len)| *len < n) {
        *s = Some((comm.alloc::<T>(rank, queue, n)?, n));
    }
    Ok(&mut s.as_mut().expect("just set").0)
}
