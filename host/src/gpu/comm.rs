//! The GPU backend and the GPU communicator's own API: creation on
//! devices, streams, kernels, and the collectives over cudarc buffers.
//! Validation, planning and state are the front end's ([`Comm`]).

use super::buffers::{Buffers, RawBuffers};
use super::checks::{check_devices, check_streams, check_views};
use super::inner::Inner;
use super::job;
use super::launch::enqueue;
use super::setup::{create, max_channels_for, resident_by_bounds};
use crate::channels::local_channels;
use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::front::{fold_entry, Alarm, Comm, Engine};
use crate::job::{Offer, Table};
use crate::memo::PlanMemo;
use crate::planner::BufferSpan;
use crate::planner::Plan;
use crate::region::{check_regions, Region};
use crate::state::CommState;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use ringreduce_kernels::abi::{LocalArgs, GPU_THREADS};
use ringreduce_kernels::catalogue::{self, Args, Kind};
use ringreduce_kernels::grad::abi::Task;
use ringreduce_kernels::types::Collective;
use ringreduce_kernels::{DataType, Op, StatusRecord};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;

/// The GPU communicator: `k` ranks, each with its own channels (staging ring,
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
pub type Communicator = Comm<GpuBackend>;

/// The GPU backend of [`Comm`]: each rank's memory on its device, the
/// kernels, and a stream per rank.
pub struct GpuBackend {
    inner: Arc<Inner>,
    /// A stream per rank, for callers (like the [`Collectives`] trait)
    /// that do not bring their own: the ranks of one launch share one, so
    /// such a call is a single launch with no events.
    ///
    /// [`Collectives`]: crate::Collectives
    streams: Vec<Arc<CudaStream>>,
}

impl Communicator {
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
        Ok(Comm {
            b: GpuBackend::start(create(devices, config)?)?,
            job: None,
        })
    }

    /// New streams, one per launch group, shared by its ranks: a call on
    /// them is one launch with no events (the gradient layer's own queues).
    pub(crate) fn new_group_streams(&self) -> Result<Vec<Arc<CudaStream>>> {
        group_streams(&self.b.inner)
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.b.inner
    }

    /// The device of each local rank ([`Comm::local_ranks`]).
    pub fn devices(&self) -> Vec<usize> {
        self.b.inner.ranks.iter().map(|r| r.ctx.ordinal()).collect()
    }

    /// The context of user rank `rank`'s device.
    ///
    /// # Panics
    /// For a rank this process does not hold ([`Comm::local_ranks`]).
    pub fn context(&self, rank: usize) -> &Arc<CudaContext> {
        let first = self.local_ranks().start;
        &self.b.inner.ranks[rank - first].ctx
    }

    /// One new non-blocking stream per local rank, on the rank's device.
    pub fn new_streams(&self) -> Result<Vec<Arc<CudaStream>>> {
        self.b
            .inner
            .ranks
            .iter()
            .map(|r| Ok(r.ctx.new_stream()?))
            .collect()
    }

    /// The communicator's own stream for each local rank (see
    /// [`Collectives`](crate::Collectives)).
    pub fn streams(&self) -> &[Arc<CudaStream>] {
        &self.b.streams
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
            for k in &self.b.inner.kernels {
                k.collective(entry)?;
            }
        }
        Ok(())
    }

    /// Blocks of the collective kernels that fit at once on (the smallest
    /// of) the ranks' devices. A collective keeps `ranks x channels` blocks
    /// resident until every rank arrives, so communicators that run
    /// collectives concurrently on one GPU must together stay within this,
    /// or they can stall each other until their timeouts (as with NCCL).
    pub fn resident_blocks(&self) -> usize {
        self.b.inner.resident_blocks
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

    /// Any collective over typed buffers (an all-gather ignores `op`).
    pub fn collective<T: RsElement>(
        &self,
        c: Collective,
        bufs: &mut [Buffers<'_, T>],
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.begin(bufs.len())?;
        let (k, first) = (self.k(), self.local_ranks().start);
        check_streams(&self.b.inner, streams)?;
        let sz = std::mem::size_of::<T>() as u64;
        check_views(&self.b.inner, bufs)?;
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
                    spans.push(BufferSpan::in_place(c, p, len, k, first + u, sz)?);
                }
            }
        }
        let r = self.run(c, &spans, T::DTYPE, op, streams);
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
        self.begin(bufs.len())?;
        check_streams(&self.b.inner, streams)?;
        let spans: Vec<BufferSpan> = bufs
            .iter()
            .map(|b| BufferSpan {
                send: b.send,
                send_len: b.send_len as u64,
                recv: b.recv,
                recv_len: b.recv_len as u64,
            })
            .collect();
        check_devices(&self.b.inner, &spans, dtype.size())?;
        self.run(c, &spans, dtype, op, streams)
    }

    /// A collective over regions of cudarc buffers, on `streams`: each
    /// region's addresses taken from its buffers, so that a split region's
    /// send and recv can be one allocation.
    pub(crate) fn regions_on<T: RsElement>(
        &self,
        c: Collective,
        regions: &mut [Region<'_, CudaSlice<T>>],
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        check_regions(regions, |b| b.len())?;
        self.begin(regions.len())?;
        check_streams(&self.b.inner, streams)?;
        let (k, sz) = (self.k(), std::mem::size_of::<T>() as u64);
        let first = self.local_ranks().start;
        let at = |base: u64, r: &Range<usize>| (base + r.start as u64 * sz, r.len() as u64);
        let mut spans = Vec::with_capacity(k);
        let mut guards = Vec::with_capacity(2 * k);
        for (u, (r, s)) in regions.iter_mut().zip(streams).enumerate() {
            let on_device = |which, buf: &CudaSlice<T>| self.check_buffer_device(u, which, buf);
            spans.push(match r {
                Region::OutOfPlace {
                    send,
                    send_at,
                    recv,
                    recv_at,
                } => {
                    on_device("send", send)?;
                    on_device("recv", recv)?;
                    let (sp, g1) = send.device_ptr(s);
                    let (rp, g2) = recv.device_ptr_mut(s);
                    guards.extend([g1, g2]);
                    let ((send, send_len), (recv, recv_len)) = (at(sp, send_at), at(rp, recv_at));
                    BufferSpan {
                        send,
                        send_len,
                        recv,
                        recv_len,
                    }
                }
                Region::Split {
                    buf,
                    send_at,
                    recv_at,
                } => {
                    on_device("send", buf)?;
                    let (p, g) = buf.device_ptr_mut(s);
                    guards.push(g);
                    let ((send, send_len), (recv, recv_len)) = (at(p, send_at), at(p, recv_at));
                    BufferSpan {
                        send,
                        send_len,
                        recv,
                        recv_len,
                    }
                }
                Region::InPlace { buf, at: r } => {
                    on_device("send", buf)?;
                    let (p, g) = buf.device_ptr_mut(s);
                    guards.push(g);
                    let (addr, len) = at(p, r);
                    BufferSpan::in_place(c, addr, len, k, first + u, sz)?
                }
            });
        }
        let r = self.run(c, &spans, T::DTYPE, op, streams);
        drop(guards);
        r
    }

    /// An error unless `buf` is on rank `rank`'s device.
    fn check_buffer_device<T>(
        &self,
        rank: usize,
        which: &'static str,
        buf: &CudaSlice<T>,
    ) -> Result<()> {
        let expected = self.b.inner.ranks[rank].ctx.ordinal();
        let found = buf.context().ordinal();
        if found != expected {
            return Err(Error::WrongDevice {
                rank,
                which,
                found: found as i64,
                expected,
            });
        }
        Ok(())
    }
}

impl GpuBackend {
    /// The backend over `inner`, with a stream per launch group.
    fn start(inner: Inner) -> Result<Self> {
        let streams = group_streams(&inner)?;
        Ok(GpuBackend {
            inner: Arc::new(inner),
            streams,
        })
    }

    fn status_records(&self) -> Vec<StatusRecord> {
        let per_rank = self.inner.state.max_channels;
        (0..self.inner.ranks.len() * per_rank)
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
}

impl Engine for GpuBackend {
    const THREADS: u64 = GPU_THREADS;
    const ON_DEVICE: bool = true;
    type Call<'a> = &'a [Arc<CudaStream>];
    type Buf<T: RsElement> = CudaSlice<T>;

    fn create(k: usize, config: CommConfig) -> Result<Self> {
        let devices = config.devices_for(k)?;
        GpuBackend::start(create(&devices, config)?)
    }
    type Joining = job::Joining;
    fn device_of_local_rank(local: usize) -> usize {
        local % super::driver::device_count().unwrap_or(1).max(1)
    }
    fn prepare(
        rank: usize,
        device: usize,
        config: &CommConfig,
        id: u64,
    ) -> Result<(job::Joining, Offer, [u8; 16])> {
        job::prepare(rank, device, config, id)
    }
    fn join(joining: job::Joining, table: &Table, config: CommConfig) -> Result<Self> {
        GpuBackend::start(job::join(joining, table, config)?)
    }
    fn device_context(&self) -> Option<Arc<cudarc::driver::CudaContext>> {
        self.inner.ranks.first().map(|r| r.ctx.clone())
    }
    fn device_stream(&self) -> Option<Arc<CudaStream>> {
        self.streams.first().cloned()
    }
    fn alarm(&self) -> Alarm {
        let inner = self.inner.clone();
        Box::new(move |e| {
            inner.state.peer_fault(e);
            inner.host.word(0).store(1, Ordering::SeqCst);
        })
    }
    /// Waits for this rank's work, then closes its mappings of the peers'
    /// areas.
    fn release_peers(&self) {
        let _ = self.wait_idle();
        self.inner
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
    /// Keeps every allocation for the life of the process.
    fn abandon(&mut self) {
        std::mem::forget(self.inner.clone());
    }
    fn state(&self) -> &CommState {
        &self.inner.state
    }
    fn conns(&self) -> &[u64] {
        &self.inner.conns
    }
    fn memo(&self) -> &Mutex<PlanMemo> {
        &self.inner.memo
    }
    fn status_records(&self) -> Vec<StatusRecord> {
        GpuBackend::status_records(self)
    }
    /// Reads only each record's outcome word (written last, zero while a
    /// record says nothing), and only of the channels a launch with waits
    /// has run: decoding all `k x channels` records costs microseconds per
    /// call.
    fn quiet(&self) -> bool {
        let state = &self.inner.state;
        let (per_rank, used) = (state.max_channels, state.status_channels());
        (0..self.inner.ranks.len())
            .flat_map(|u| (0..used).map(move |c| u * per_rank + c))
            .all(|r| {
                let outcome = self.inner.host.word(1 + r * StatusRecord::WORDS);
                outcome.load(Ordering::Acquire) == 0
            })
    }
    fn execute(
        &self,
        plan: &Plan,
        dtype: DataType,
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        enqueue(&self.inner, plan, dtype, op, streams)
    }
    fn wait_idle(&self) -> Result<()> {
        let ranks = &self.inner.ranks;
        for (u, r) in ranks.iter().enumerate() {
            if u == 0 || r.ctx.ordinal() != ranks[u - 1].ctx.ordinal() {
                r.ctx.synchronize()?;
            }
        }
        Ok(())
    }
    fn raise_abort(&self) {
        self.inner.host.word(0).store(1, Ordering::SeqCst);
    }

    fn addr_at<T: RsElement>(&self, rank: usize, buf: &CudaSlice<T>, at: usize) -> u64 {
        let (p, _sync) = buf.device_ptr(&self.streams[rank]);
        p + (at * std::mem::size_of::<T>()) as u64
    }
    /// On the rank's own stream, as many blocks as its traffic asks of a
    /// local call, up to the device's resident grid.
    unsafe fn fold(&self, rank: usize, dtype: DataType, op: Op, mut args: LocalArgs) -> Result<()> {
        let r = &self.inner.ranks[rank];
        r.ctx.bind_to_thread()?;
        let entry = fold_entry(dtype, op)?;
        let f = self.inner.kernels[rank].collective(entry)?;
        let grid = resident_by_bounds(&r.ctx, Args::Local)? as u64;
        let (c, k) = (Collective::AllReduce, args.ranks);
        args.blocks = k * local_channels(c, k, args.total, dtype.size(), None, grid);
        let threads = catalogue::COLLECTIVE_ENTRIES[entry].threads;
        let on = self.streams[rank].cu_stream();
        // SAFETY: the caller's promise; the argument is copied at launch.
        unsafe { super::driver::launch(f, args.blocks as u32, threads, on, &mut args) }
    }
    unsafe fn task(&self, rank: usize, task: Task) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { super::launch_task(&self.inner, rank, &self.streams[rank], task) }
    }
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.streams[rank].clone_htod(data)?)
    }
    /// Zeroed on the device, in the rank's stream order: no host copy.
    fn zeroed<T: RsElement>(&self, rank: usize, n: usize) -> Result<CudaSlice<T>> {
        Ok(self.streams[rank].alloc_zeros::<T>(n)?)
    }
    fn len_of<T: RsElement>(buf: &CudaSlice<T>) -> usize {
        buf.len()
    }
    fn read<T: RsElement>(
        &self,
        rank: usize,
        buf: &CudaSlice<T>,
        at: Range<usize>,
    ) -> Result<Vec<T>> {
        Ok(self.streams[rank].clone_dtoh(&buf.slice(at))?)
    }
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut CudaSlice<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        let r = at..at + data.len();
        Ok(self.streams[rank].memcpy_htod(data, &mut buf.slice_mut(r))?)
    }
    fn regions<T: RsElement>(
        comm: &Communicator,
        c: Collective,
        regions: &mut [Region<'_, CudaSlice<T>>],
        op: Op,
    ) -> Result<()> {
        comm.regions_on(c, regions, op, comm.streams())
    }
}

impl Drop for GpuBackend {
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
