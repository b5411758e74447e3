//! The GPU communicator's API: creation, the collectives (validated,
//! planned, then launched) and the run-time controls.

use super::buffers::{Buffers, RawBuffers};
use super::checks::{check_devices, check_streams, check_views};
use super::inner::Inner;
use super::launch::enqueue;
use super::setup::{create, max_channels_for};
use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::planner::BufferSpan;
use crate::ring::RingOrder;
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use ringreduce_kernels::abi::GPU_THREADS;
use ringreduce_kernels::catalogue::{self, Kind};
use ringreduce_kernels::types::Collective;
use ringreduce_kernels::{DataType, Op, StatusRecord};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A communicator over `k` ranks, each with its own channels (staging ring,
/// flags and block) in its device's memory. With [`Communicator::new`] all
/// ranks are virtual ranks on one GPU; with [`Communicator::with_placement`]
/// they can be one per GPU.
///
/// Launches: the ranks of one device run as one grid of `C` blocks (their
/// channels) per rank, one launch per collective for up to
/// [`BATCH_RANKS`](ringreduce_kernels::abi::BATCH_RANKS) ranks, as one grid
/// per GPU runs on several GPUs. That launch goes on the first of those
/// ranks' streams, ordered after and before every other one by events, so
/// the ranks may share a stream (as a CUDA graph capture needs) or each
/// have their own.
///
/// Co-residency: the blocks must all run at once; the communicator checks
/// at creation that the ranks' blocks fit on each device (occupancy times
/// multiprocessors), and refuses streams that would serialise two launches
/// on one device (more than `BATCH_RANKS` ranks there sharing a stream, or
/// the legacy default stream). Communicators that share a GPU and run
/// collectives at the same time must together fit too (see
/// [`Communicator::resident_blocks`]).
///
/// ```no_run
/// use ringreduce::{Buffers, Communicator, Op};
/// let comm = Communicator::new(0, 4)?; // 4 virtual ranks on GPU 0
/// let streams = comm.new_streams()?;   // one stream per rank
/// let n = 1 << 20;
/// let send: Vec<_> = streams
///     .iter()
///     .map(|s| s.alloc_zeros::<f32>(4 * n))
///     .collect::<Result<_, _>>()?;
/// let mut recv: Vec<_> = streams
///     .iter()
///     .map(|s| s.alloc_zeros::<f32>(n))
///     .collect::<Result<_, _>>()?;
/// let mut bufs: Vec<Buffers<f32>> = send
///     .iter()
///     .zip(recv.iter_mut())
///     .map(|(s, r)| Buffers::out_of_place(s.as_view(), r.as_view_mut()))
///     .collect();
/// comm.reduce_scatter(&mut bufs, Op::Sum, &streams)?; // asynchronous
/// comm.synchronize()?;                                // reports timeouts and aborts
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Communicator {
    inner: Arc<Inner>,
    /// A stream per rank, for callers (like the [`Collectives`] trait)
    /// that do not bring their own: the ranks of one launch share one, so
    /// such a call is a single launch with no events.
    ///
    /// [`Collectives`]: crate::Collectives
    streams: Vec<Arc<CudaStream>>,
}

impl Communicator {
    /// The least staging per channel ([`CommConfig::buffer_bytes`]) a GPU
    /// communicator takes: a slot for one unrolled round of its 256 lanes.
    pub const MIN_BUFFER_BYTES: u64 = ringreduce_kernels::plan::min_buffer_bytes(GPU_THREADS);

    /// The most channels per rank ([`CommConfig::channels`]) a communicator
    /// of this placement can run, before creating one: every block of every
    /// rank of a device must be resident at once, so it is the fewest, over
    /// the devices, of the blocks that fit over the ranks there (at most
    /// [`MAX_CHANNELS`](ringreduce_kernels::abi::MAX_CHANNELS)). Opens the
    /// devices and loads nothing.
    pub fn max_channels_for(devices: &[usize]) -> Result<usize> {
        max_channels_for(devices)
    }

    /// `k` virtual ranks on device `device`, default configuration.
    pub fn new(device: usize, k: usize) -> Result<Self> {
        Self::with_config(device, k, CommConfig::default())
    }

    /// `k` virtual ranks on device `device`.
    pub fn with_config(device: usize, k: usize, config: CommConfig) -> Result<Self> {
        Self::with_placement(&vec![device; k], config)
    }

    /// One rank per entry of `devices`: user rank `u` runs on device
    /// `devices[u]`. Distinct devices give one rank per GPU, with each rank
    /// writing straight into its successor's memory (peer-to-peer); a device
    /// listed several times holds that many virtual ranks. The kernel is the
    /// same either way.
    ///
    /// Without a ring order in `config`, the ring follows the links between
    /// the devices, as `cuDeviceGetP2PAttribute` ranks them (ordinal order
    /// when all links are equal); ring neighbours on two
    /// devices that cannot reach each other are [`Error::NoPeerAccess`].
    pub fn with_placement(devices: &[usize], config: CommConfig) -> Result<Self> {
        let inner = create(devices, config)?;
        let streams = group_streams(&inner)?;
        Ok(Communicator {
            inner: Arc::new(inner),
            streams,
        })
    }

    /// New streams, one per launch group, shared by its ranks: a call on
    /// them is one launch with no events (the gradient layer's own queues).
    pub(crate) fn new_group_streams(&self) -> Result<Vec<Arc<CudaStream>>> {
        group_streams(&self.inner)
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The device of each user rank.
    pub fn devices(&self) -> Vec<usize> {
        self.inner.ranks.iter().map(|r| r.ctx.ordinal()).collect()
    }

    /// Ranks in the communicator.
    pub fn k(&self) -> usize {
        self.inner.state.ring.len()
    }

    /// The ring the collectives run on.
    pub fn ring_order(&self) -> &RingOrder {
        &self.inner.state.ring
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &CommConfig {
        &self.inner.state.config
    }

    /// The context of user rank `rank`'s device.
    pub fn context(&self, rank: usize) -> &Arc<CudaContext> {
        &self.inner.ranks[rank].ctx
    }

    /// One new non-blocking stream per rank, on the rank's device.
    pub fn new_streams(&self) -> Result<Vec<Arc<CudaStream>>> {
        self.inner
            .ranks
            .iter()
            .map(|r| Ok(r.ctx.new_stream()?))
            .collect()
    }

    /// The communicator's own stream for each rank (see
    /// [`Collectives`](crate::Collectives)).
    pub fn streams(&self) -> &[Arc<CudaStream>] {
        &self.streams
    }

    /// The algorithm a call of `c` with count `n` of `T` runs: the
    /// configured one, or the automatic choice by size (see
    /// [`CommConfig::algorithm`](crate::CommConfig::algorithm)).
    pub fn algorithm_for<T: crate::RsElement>(
        &self,
        c: Collective,
        n: usize,
    ) -> Result<ringreduce_kernels::Algorithm> {
        self.inner
            .state
            .algorithm_for(c, n as u64, std::mem::size_of::<T>() as u64)
    }

    /// Blocks per rank a call of `c` with count `n` of `T` runs: the
    /// configured number, or one chosen by algorithm and size.
    pub fn channels_for<T: crate::RsElement>(&self, c: Collective, n: usize) -> Result<usize> {
        let size = std::mem::size_of::<T>() as u64;
        Ok(self.inner.state.channels_for(c, n as u64, size)? as usize)
    }

    /// Loads, on every device of the communicator, the kernels a call of
    /// `c` on `dtype` with `op` can run (ring, direct and local), so that
    /// no later call of that kind loads one. A call loads its own kernel the
    /// first time anyway; this is for a call that must not, such as one
    /// captured into a CUDA graph, where the driver may refuse a module
    /// load.
    pub fn load_kernels(&self, c: Collective, dtype: DataType, op: Op) -> Result<()> {
        for kind in Kind::COLLECTIVE {
            let entry = catalogue::collective_index(kind, c, dtype, op)
                .ok_or_else(|| Error::Broken(format!("internal: no {kind:?} entry")))?;
            for k in &self.inner.kernels {
                k.collective(entry)?;
            }
        }
        Ok(())
    }

    /// Channels each rank has; a call uses at most this many.
    pub fn max_channels(&self) -> usize {
        self.inner.state.max_channels
    }

    /// Blocks of the collective kernels that fit at once on (the smallest
    /// of) the ranks' devices. A collective keeps `ranks x channels` blocks
    /// resident until every rank arrives, so communicators that run
    /// collectives concurrently on one GPU must together stay within this,
    /// or they can stall each other until their timeouts (as with NCCL).
    pub fn resident_blocks(&self) -> usize {
        self.inner.resident_blocks
    }

    /// Staging bytes per channel (see [`CommConfig::buffer_bytes`]).
    pub fn staging_bytes(&self) -> u64 {
        self.inner.state.staging_bytes
    }

    fn status_records(&self) -> Vec<StatusRecord> {
        (0..self.k() * self.inner.state.max_channels)
            .map(|r| {
                let w: [u64; StatusRecord::WORDS] = std::array::from_fn(|i| {
                    self.inner
                        .host
                        .word(1 + r * StatusRecord::WORDS + i)
                        .load(Ordering::Acquire)
                });
                StatusRecord::from_words(w)
            })
            .collect()
    }

    /// Every collective starts here, so it first reads only each record's
    /// outcome word (written last, zero while a record says nothing), and
    /// only of the channels a launch with waits has run: decoding all
    /// `k x channels` records costs microseconds per call.
    fn check_broken(&self) -> Result<()> {
        let (per_rank, used) = (
            self.inner.state.max_channels,
            self.inner.state.status_channels(),
        );
        let quiet = (0..self.k())
            .flat_map(|u| (0..used).map(move |c| u * per_rank + c))
            .all(|r| {
                let outcome = self.inner.host.word(1 + r * StatusRecord::WORDS);
                outcome.load(Ordering::Acquire) == 0
            });
        let recs = if quiet {
            Vec::new()
        } else {
            self.status_records()
        };
        self.inner.state.check(&recs)
    }

    /// Enqueues a reduce-scatter: `bufs[u]` and `streams[u]` are user rank
    /// `u`'s. Returns once every rank's grid is launched; results are ready
    /// when the streams are. Buffers that are still being written by earlier
    /// work on other streams are waited for (cudarc's event tracking).
    pub fn reduce_scatter<T: RsElement>(
        &self,
        bufs: &mut [Buffers<'_, T>],
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.collective(Collective::ReduceScatter, bufs, op, streams)
    }

    /// Enqueues an all-gather, like [`reduce_scatter`](Self::reduce_scatter):
    /// block `u` of every rank's `recv` is user rank `u`'s `send`.
    pub fn all_gather<T: RsElement>(
        &self,
        bufs: &mut [Buffers<'_, T>],
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.collective(Collective::AllGather, bufs, Op::Sum, streams)
    }

    /// Enqueues an all-reduce, like [`reduce_scatter`](Self::reduce_scatter):
    /// every rank's `recv` is `op` over all ranks' `send`, bitwise the same
    /// on every rank.
    pub fn all_reduce<T: RsElement>(
        &self,
        bufs: &mut [Buffers<'_, T>],
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.collective(Collective::AllReduce, bufs, op, streams)
    }

    /// Any collective over typed buffers.
    pub fn collective<T: RsElement>(
        &self,
        c: Collective,
        bufs: &mut [Buffers<'_, T>],
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.check_broken()?;
        let k = self.k();
        if bufs.len() != k {
            return Err(Error::WrongBufferCount { got: bufs.len(), k });
        }
        check_streams(&self.inner, streams)?;
        let sz = std::mem::size_of::<T>() as u64;
        check_views(&self.inner, bufs)?;
        let mut spans = Vec::with_capacity(k);
        let mut guards = Vec::with_capacity(2 * k);
        for (u, (b, s)) in bufs.iter_mut().zip(streams).enumerate() {
            match b {
                Buffers::OutOfPlace { send, recv } => {
                    let (send_len, recv_len) = (send.len() as u64, recv.len() as u64);
                    let (sp, g1) = send.device_ptr(s);
                    let (rp, g2) = recv.device_ptr_mut(s);
                    guards.push(g1);
                    guards.push(g2);
                    spans.push(BufferSpan {
                        send: sp,
                        send_len,
                        recv: rp,
                        recv_len,
                    });
                }
                Buffers::InPlace(buf) => {
                    let len = buf.len() as u64;
                    let (p, g) = buf.device_ptr_mut(s);
                    guards.push(g);
                    spans.push(BufferSpan::in_place(c, p, len, k, u, sz)?);
                }
            }
        }
        let r = self.enqueue(c, &spans, T::DTYPE, op, streams);
        drop(guards);
        r
    }

    /// [`collective`](Self::collective) over raw device addresses, for
    /// buffers cudarc does not own. Every address is checked to lie in a
    /// device allocation on the rank's device.
    ///
    /// # Safety
    /// The caller must keep the memory alive, and not touch it from other
    /// streams, until the collective has finished.
    pub unsafe fn collective_raw(
        &self,
        c: Collective,
        bufs: &[RawBuffers],
        dtype: DataType,
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.check_broken()?;
        let k = self.k();
        if bufs.len() != k {
            return Err(Error::WrongBufferCount { got: bufs.len(), k });
        }
        check_streams(&self.inner, streams)?;
        let spans: Vec<BufferSpan> = bufs
            .iter()
            .map(|b| BufferSpan {
                send: b.send,
                send_len: b.send_len as u64,
                recv: b.recv,
                recv_len: b.recv_len as u64,
            })
            .collect();
        check_devices(&self.inner, &spans, dtype.size())?;
        self.enqueue(c, &spans, dtype, op, streams)
    }

    fn enqueue(
        &self,
        c: Collective,
        spans: &[BufferSpan],
        dtype: DataType,
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        let mut memo = self.inner.memo.lock().unwrap_or_else(|e| e.into_inner());
        let plan = memo.plan(
            c,
            &self.inner.conns,
            spans,
            dtype,
            self.inner.state.call_opts(GPU_THREADS),
        )?;
        enqueue(&self.inner, plan, dtype, op, streams)
    }

    /// Waits for all work on the ranks' devices, then reports the first
    /// error any rank recorded. After an error the communicator is broken.
    pub fn synchronize(&self) -> Result<()> {
        for (u, r) in self.inner.ranks.iter().enumerate() {
            if u == 0 || r.ctx.ordinal() != self.inner.ranks[u - 1].ctx.ordinal() {
                r.ctx.synchronize()?;
            }
        }
        self.check_broken()
    }

    /// Makes every rank's kernel give up its waits and return; safe to call
    /// from any thread while collectives run. They end with
    /// [`Error::Aborted`] (one that had already finished keeps its results),
    /// and every later call, a collective or
    /// [`synchronize`](Self::synchronize), returns `Aborted` with nothing
    /// launched: the communicator is done.
    pub fn abort(&self) {
        self.inner.state.abort();
        self.inner.host.word(0).store(1, Ordering::SeqCst);
    }

    /// Test hook: from (chunk, step) on, `rank` drops its "new data"
    /// signals. Only effective with the `fault-injection` feature.
    #[doc(hidden)]
    pub fn inject_lost_signal(&self, rank: usize, chunk: u64, step: u64) {
        self.inner
            .state
            .set_hooks(|h| h.lost_signal = Some((rank, chunk, step)));
    }

    /// Test hook: collectives launch every rank but `rank`, as if its
    /// process never arrived.
    #[doc(hidden)]
    pub fn withhold_rank(&self, rank: Option<usize>) {
        self.inner.state.set_hooks(|h| h.withhold_rank = rank);
    }

    /// Each user rank's recorded error, if any (for diagnostics: the error
    /// [`synchronize`](Self::synchronize) returns is the likeliest cause).
    pub fn rank_errors(&self) -> Vec<Option<Error>> {
        self.inner.state.rank_errors(&self.status_records())
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // Kernels may still use the buffers; wait before freeing them.
        for r in &self.inner.ranks {
            let _ = r.ctx.synchronize();
        }
    }
}

/// One new stream per launch group, as each of its ranks' stream.
fn group_streams(inner: &Inner) -> Result<Vec<Arc<CudaStream>>> {
    let mut streams = vec![None; inner.ranks.len()];
    for g in &inner.groups {
        let s = inner.ranks[g.ranks[0]].ctx.new_stream()?;
        for &u in &g.ranks {
            streams[u] = Some(s.clone());
        }
    }
    Ok(streams.into_iter().flatten().collect())
}
