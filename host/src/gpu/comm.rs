//! The GPU communicator: per-rank staging buffers, flags and slots in device
//! memory, and one block of `BLOCK_THREADS` launched per rank per collective.

use super::driver::{
    enable_peer_access, open_device, p2p_link, pointer_device, within_allocation, DeviceAlloc,
    MappedHost,
};
use super::module::Kernels;
use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::planner::{plan_reduce_scatter, BufferSpan, Plan, RankWiring};
use crate::ring::RingOrder;
use crate::state::CommState;
use crate::topology::{check_ring, ring_from_topology};
use cudarc::driver::{result, sys, CudaContext, CudaStream, CudaView, CudaViewMut};
use cudarc::driver::{DevicePtr, DevicePtrMut, DeviceSlice};
use ringreduce_kernels::plan::{BLOCK_THREADS, GPU_THREADS};
use ringreduce_kernels::{DataType, KernelArgs, Op, StatusRecord};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Kernels that can be resident on one device at once (compute capability
/// 7.0 and newer).
const MAX_RESIDENT_GRIDS: usize = 128;

/// One rank's buffers for a GPU collective.
pub enum RsBuffers<'a, T> {
    /// `send` holds `k * n` elements, `recv` holds `n`.
    OutOfPlace {
        /// The input, `k` blocks of `n` elements.
        send: CudaView<'a, T>,
        /// The output, `n` elements.
        recv: CudaViewMut<'a, T>,
    },
    /// One buffer of `k * n` elements; the result lands in this rank's block
    /// (`recv = send + rank * n`).
    InPlace(CudaViewMut<'a, T>),
}

impl<'a, T> RsBuffers<'a, T> {
    /// `send` (`k * n` elements) and `recv` (`n`), apart.
    pub fn out_of_place(send: CudaView<'a, T>, recv: CudaViewMut<'a, T>) -> Self {
        RsBuffers::OutOfPlace { send, recv }
    }
    /// One buffer of `k * n` elements; the result lands in this rank's block.
    pub fn in_place(buf: CudaViewMut<'a, T>) -> Self {
        RsBuffers::InPlace(buf)
    }
}

/// One rank's buffers as raw device addresses, lengths in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBuffers {
    /// Device address of the input.
    pub send: u64,
    /// Elements of the input, `k * recv_len`.
    pub send_len: usize,
    /// Device address of the output.
    pub recv: u64,
    /// Elements of the output.
    pub recv_len: usize,
}

/// Offsets of the per-rank flag words inside one small allocation.
const NEW_DATA: u64 = 0;
const CHUNK_DONE: u64 = 8;
const SLOT: u64 = 16;
const FLAG_BYTES: usize = 256;

struct Rank {
    ctx: Arc<CudaContext>,
    staging: DeviceAlloc,
    flags: DeviceAlloc,
    user_from_ring: DeviceAlloc,
}

struct Inner {
    ranks: Vec<Rank>,
    kernels: Vec<Arc<Kernels>>,
    /// Word 0: abort; then one status record per rank.
    host: MappedHost,
    /// Held while one collective's blocks are launched, so that concurrent
    /// callers cannot interleave two collectives' launches across ranks;
    /// holds each rank's last stream.
    launch: Mutex<Vec<Option<Arc<CudaStream>>>>,
    state: CommState,
}

/// A communicator over `k` ranks, each with its own staging buffer, flags
/// and slot in its device's memory, and its own block. With
/// [`Communicator::new`] all ranks are virtual ranks on one GPU; with
/// [`Communicator::with_placement`] they can be one per GPU.
///
/// Co-residency of the `k` blocks: every collective launches one block per
/// rank, each on that rank's own stream, exactly as one block per GPU would
/// be launched on several GPUs. The blocks must all run at once; the
/// communicator checks at creation that `k` blocks of `BLOCK_THREADS` fit on the
/// device (occupancy times multiprocessors, and at most 128 resident
/// kernels) and refuses streams that would serialise the launches (two
/// ranks on one stream, or the legacy default stream). A cooperative launch
/// of one k-block grid would guarantee residency too, but would need a
/// different launch (and argument passing) from the multi-GPU path; keeping
/// one launch per rank keeps the two paths one.
///
/// ```no_run
/// use ringreduce::{Communicator, Op, RsBuffers};
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
/// let mut bufs: Vec<RsBuffers<f32>> = send
///     .iter()
///     .zip(recv.iter_mut())
///     .map(|(s, r)| RsBuffers::out_of_place(s.as_view(), r.as_view_mut()))
///     .collect();
/// comm.reduce_scatter(&mut bufs, Op::Sum, &streams)?; // asynchronous
/// comm.synchronize()?;                                // reports timeouts and aborts
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Communicator {
    inner: Arc<Inner>,
}

impl Communicator {
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
        let k = devices.len();
        if k == 0 {
            return Err(Error::ZeroRanks);
        }
        // Validated before any device is opened; kept when the config names it.
        let given = RingOrder::for_ranks(config.ring_order.as_deref(), k)?;
        crate::planner::sizing(k, 0, DataType::U8, config.buffer_bytes, GPU_THREADS, true)?;
        let mut ctxs: BTreeMap<usize, Arc<CudaContext>> = BTreeMap::new();
        for &d in devices {
            if let Entry::Vacant(e) = ctxs.entry(d) {
                e.insert(open_device(d)?);
            }
        }
        let mut links = HashMap::new();
        for (&a, ca) in &ctxs {
            for (&b, cb) in &ctxs {
                if a != b {
                    links.insert((a, b), p2p_link(ca, cb)?);
                }
            }
        }
        let link = |a: usize, b: usize| links[&(a, b)];
        let ring = if config.ring_order.is_some() {
            check_ring(devices, &given, link)?;
            given
        } else {
            ring_from_topology(devices, link)?
        };
        let ufr = ring.user_from_ring();
        for p in 0..k {
            let (a, b) = (devices[ufr[p] as usize], devices[ufr[(p + 1) % k] as usize]);
            if a != b {
                enable_peer_access(&ctxs[&a], &ctxs[&b])?;
                enable_peer_access(&ctxs[&b], &ctxs[&a])?;
            }
        }
        let mut kernels_of = HashMap::new();
        for (&d, ctx) in &ctxs {
            let kernels = Arc::new(Kernels::load(ctx)?);
            let here = devices.iter().filter(|&&x| x == d).count();
            check_residency(ctx, &kernels, here)?;
            kernels_of.insert(d, kernels);
        }
        let table: Vec<u8> = ufr.iter().flat_map(|u| u.to_ne_bytes()).collect();
        let mut ranks = Vec::with_capacity(k);
        for &d in devices {
            let ctx = &ctxs[&d];
            let staging = DeviceAlloc::zeroed(ctx, config.buffer_bytes as usize)?;
            let flags = DeviceAlloc::zeroed(ctx, FLAG_BYTES)?;
            let ufr = DeviceAlloc::zeroed(ctx, table.len())?;
            // SAFETY: `ufr` holds exactly the table.
            unsafe { result::memcpy_htod_sync(ufr.ptr, &table)? };
            ranks.push(Rank {
                ctx: ctx.clone(),
                staging,
                flags,
                user_from_ring: ufr,
            });
        }
        // Portable, and at one address in every context (unified
        // addressing), so every rank's kernel reaches the same words.
        let host = MappedHost::zeroed(&ctxs[&devices[0]], 1 + k * StatusRecord::WORDS)?;
        Ok(Communicator {
            inner: Arc::new(Inner {
                state: CommState::new(ring, config),
                ranks,
                kernels: devices.iter().map(|d| kernels_of[d].clone()).collect(),
                host,
                launch: Mutex::new(vec![None; k]),
            }),
        })
    }

    /// The device of each user rank.
    pub fn devices(&self) -> Vec<usize> {
        self.inner.ranks.iter().map(|r| r.ctx.ordinal()).collect()
    }

    /// Whether the ranks run on more than one device, so that their flags
    /// need system-scope fences.
    fn spans_devices(&self) -> bool {
        let d = self.devices();
        d.iter().any(|&x| x != d[0])
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

    fn wiring(&self) -> Vec<RankWiring> {
        let status0 = self.inner.host.device + 8;
        self.inner
            .ranks
            .iter()
            .enumerate()
            .map(|(u, r)| RankWiring {
                staging: r.staging.ptr,
                new_data: r.flags.ptr + NEW_DATA,
                chunk_done: r.flags.ptr + CHUNK_DONE,
                slot: r.flags.ptr + SLOT,
                user_from_ring: r.user_from_ring.ptr,
                status: status0 + (u * StatusRecord::WORDS * 8) as u64,
            })
            .collect()
    }

    fn status_records(&self) -> Vec<StatusRecord> {
        (0..self.k())
            .map(|u| {
                let w: [u64; StatusRecord::WORDS] = std::array::from_fn(|i| {
                    self.inner
                        .host
                        .word(1 + u * StatusRecord::WORDS + i)
                        .load(Ordering::Acquire)
                });
                StatusRecord::from_words(w)
            })
            .collect()
    }

    fn check_broken(&self) -> Result<()> {
        self.inner.state.check(&self.status_records())
    }

    /// Enqueues a reduce-scatter: `bufs[u]` and `streams[u]` are user rank
    /// `u`'s. Returns once every rank's block is launched; results are ready
    /// when the streams are. Buffers that are still being written by earlier
    /// work on other streams are waited for (cudarc's event tracking).
    pub fn reduce_scatter<T: RsElement>(
        &self,
        bufs: &mut [RsBuffers<'_, T>],
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        self.check_broken()?;
        let k = self.k();
        if bufs.len() != k {
            return Err(Error::WrongBufferCount { got: bufs.len(), k });
        }
        self.check_streams(streams)?;
        let sz = std::mem::size_of::<T>() as u64;
        // Views know their device through their stream, with no driver
        // call: cheaper than the pointer queries of the raw path.
        for (u, b) in bufs.iter().enumerate() {
            let expected = self.inner.ranks[u].ctx.ordinal();
            let views: [(&'static str, usize); 2] = match b {
                RsBuffers::OutOfPlace { send, recv } => [
                    ("send", send.stream().context().ordinal()),
                    ("recv", recv.stream().context().ordinal()),
                ],
                RsBuffers::InPlace(buf) => [
                    ("send", buf.stream().context().ordinal()),
                    ("recv", buf.stream().context().ordinal()),
                ],
            };
            for (which, found) in views {
                if found != expected {
                    return Err(Error::WrongDevice {
                        rank: u,
                        which,
                        found: found as i64,
                        expected,
                    });
                }
            }
        }
        let mut spans = Vec::with_capacity(k);
        let mut guards = Vec::with_capacity(2 * k);
        for (u, (b, s)) in bufs.iter_mut().zip(streams).enumerate() {
            match b {
                RsBuffers::OutOfPlace { send, recv } => {
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
                RsBuffers::InPlace(buf) => {
                    let len = buf.len() as u64;
                    let (p, g) = buf.device_ptr_mut(s);
                    guards.push(g);
                    spans.push(BufferSpan::in_place(p, len, k, u, sz)?);
                }
            }
        }
        let r = self.enqueue(&spans, T::DTYPE, op, streams);
        drop(guards);
        r
    }

    /// [`reduce_scatter`](Self::reduce_scatter) over raw device addresses,
    /// for buffers cudarc does not own. Every address is checked to lie in a
    /// device allocation on the rank's device.
    ///
    /// # Safety
    /// The caller must keep the memory alive, and not touch it from other
    /// streams, until the collective has finished.
    pub unsafe fn reduce_scatter_raw(
        &self,
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
        self.check_streams(streams)?;
        let spans: Vec<BufferSpan> = bufs
            .iter()
            .map(|b| BufferSpan {
                send: b.send,
                send_len: b.send_len as u64,
                recv: b.recv,
                recv_len: b.recv_len as u64,
            })
            .collect();
        self.check_devices(&spans, dtype.size())?;
        self.enqueue(&spans, dtype, op, streams)
    }

    fn check_streams(&self, streams: &[Arc<CudaStream>]) -> Result<()> {
        let k = self.k();
        if streams.len() != k {
            return Err(Error::WrongStreamCount {
                got: streams.len(),
                k,
            });
        }
        for (u, s) in streams.iter().enumerate() {
            let expected = self.inner.ranks[u].ctx.ordinal();
            let found = s.context().ordinal();
            if found != expected {
                return Err(Error::StreamDevice {
                    rank: u,
                    found,
                    expected,
                });
            }
            let shares_device =
                (0..k).any(|v| v != u && self.inner.ranks[v].ctx.ordinal() == expected);
            if shares_device && s.cu_stream().is_null() {
                return Err(Error::DefaultStream { rank: u });
            }
            for (v, other) in streams.iter().enumerate().take(u) {
                if other.cu_stream() == s.cu_stream() && other.context().ordinal() == found {
                    return Err(Error::SharedStream { a: v, b: u });
                }
            }
        }
        Ok(())
    }

    fn check_devices(&self, spans: &[BufferSpan], sz: u64) -> Result<()> {
        for (u, s) in spans.iter().enumerate() {
            if s.recv_len == 0 {
                continue;
            }
            let expected = self.inner.ranks[u].ctx.ordinal();
            for (which, addr, len) in [("send", s.send, s.send_len), ("recv", s.recv, s.recv_len)] {
                let found = pointer_device(addr);
                if found != expected as i64 {
                    return Err(Error::WrongDevice {
                        rank: u,
                        which,
                        found,
                        expected,
                    });
                }
                let bytes = len.saturating_mul(sz);
                if !within_allocation(addr, bytes) {
                    return Err(Error::BufferOutOfBounds {
                        rank: u,
                        which,
                        addr,
                        bytes,
                    });
                }
            }
        }
        Ok(())
    }

    fn enqueue(
        &self,
        spans: &[BufferSpan],
        dtype: DataType,
        op: Op,
        streams: &[Arc<CudaStream>],
    ) -> Result<()> {
        let plan = plan_reduce_scatter(
            &self.inner.state.ring,
            &self.wiring(),
            spans,
            dtype,
            self.inner.state.config.buffer_bytes,
            GPU_THREADS,
            self.inner
                .state
                .control(self.inner.host.device, self.spans_devices()),
        )?;
        let mut last = self.inner.launch.lock().unwrap_or_else(|e| e.into_inner());
        match plan {
            Plan::Nothing => Ok(()),
            Plan::Copy { send, recv, bytes } => {
                hand_over(&mut last[0], &streams[0])?;
                self.inner.ranks[0].ctx.bind_to_thread()?;
                // SAFETY: validated addresses on this device.
                unsafe {
                    result::memcpy_dtod_async(recv, send, bytes as usize, streams[0].cu_stream())?
                };
                Ok(())
            }
            Plan::Launch { args, .. } => {
                let withhold = self.inner.state.hooks().withhold_rank;
                for (u, a) in args.iter().enumerate() {
                    if withhold == Some(u) {
                        continue;
                    }
                    let r = hand_over(&mut last[u], &streams[u])
                        .and_then(|()| self.launch(u, a, dtype, op, &streams[u]));
                    if let Err(e) = r {
                        // Ranks already launched cannot finish; they will
                        // time out. Nothing later may run on this state.
                        self.inner.state.mark_broken(&e);
                        return Err(e);
                    }
                }
                Ok(())
            }
        }
    }

    fn launch(
        &self,
        u: usize,
        a: &KernelArgs,
        dtype: DataType,
        op: Op,
        stream: &CudaStream,
    ) -> Result<()> {
        let f = self.inner.kernels[u].get(dtype, op);
        self.inner.ranks[u].ctx.bind_to_thread()?;
        let mut args = *a;
        let mut params = [&mut args as *mut KernelArgs as *mut std::ffi::c_void];
        // SAFETY: the kernel takes one `KernelArgs` by value; the driver
        // copies it at launch.
        unsafe {
            result::launch_kernel(
                f.cu_function(),
                (1, 1, 1),
                (BLOCK_THREADS, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )?
        };
        Ok(())
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

/// Keeps one rank's collectives in order when the caller switches streams:
/// the new stream waits for everything the last one had queued. With the
/// same stream every time, stream order already does this.
fn hand_over(last: &mut Option<Arc<CudaStream>>, next: &Arc<CudaStream>) -> Result<()> {
    if let Some(prev) = last.as_ref() {
        if prev.cu_stream() != next.cu_stream() {
            let e = prev.record_event(None)?;
            next.wait(&e)?;
        }
    }
    *last = Some(next.clone());
    Ok(())
}

fn check_residency(ctx: &Arc<CudaContext>, kernels: &Kernels, k: usize) -> Result<()> {
    let sms =
        ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
    let threads = BLOCK_THREADS as usize;
    let mut per_sm = usize::MAX;
    for f in kernels.all() {
        // SAFETY: valid function handle.
        let n = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(
                f.cu_function(),
                threads as i32,
                0,
            )?
        };
        per_sm = per_sm.min(n.max(0) as usize);
    }
    let max = (per_sm * sms).min(MAX_RESIDENT_GRIDS);
    if k > max {
        return Err(Error::TooManyRanks {
            k,
            max,
            device: ctx.ordinal(),
            threads,
        });
    }
    Ok(())
}
