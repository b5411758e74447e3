//! The CPU communicator: the same ring engine, run by OS threads.

use super::buffer::{HostMem, HostView, UseGuard};
use crate::channels::cpu_channels;
use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::memo::PlanMemo;
use crate::planner::{connect, BufferSpan, ChannelWiring, Plan, RankWiring};
use crate::ring::RingOrder;
use crate::state::CommState;
use ringreduce_kernels::abi::{
    DirectPeer, LocalArgs, RankConn, Work, CPU_THREADS, DIRECT_FLAG_STRIDE, MAX_CHANNELS,
};
use ringreduce_kernels::catalogue;
use ringreduce_kernels::cpu::{run_local, run_rank, BlockSync, Lane, Trap, Trapped};
use ringreduce_kernels::plan::DEFAULT_BUFFER_BYTES;
use ringreduce_kernels::types::{Algorithm, Collective};
use ringreduce_kernels::{Op, StatusRecord};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// One rank's buffers for a CPU collective; the lengths are as for
/// [`Buffers`](crate::Buffers).
#[derive(Clone)]
pub enum CpuBuffers<T> {
    /// Input and output apart.
    OutOfPlace {
        /// The input.
        send: HostView<T>,
        /// The output.
        recv: HostView<T>,
    },
    /// One buffer, input and output (see [`Buffers::InPlace`](crate::Buffers::InPlace)).
    InPlace(HostView<T>),
}

impl<T> CpuBuffers<T> {
    /// `send` and `recv`, apart.
    pub fn out_of_place(send: HostView<T>, recv: HostView<T>) -> Self {
        CpuBuffers::OutOfPlace { send, recv }
    }
    /// One buffer, input and output.
    pub fn in_place(buf: HostView<T>) -> Self {
        CpuBuffers::InPlace(buf)
    }
}

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// A rank's job queue and the thread that runs it.
type Worker = (Option<Sender<Job>>, Option<JoinHandle<()>>);

/// One channel's state, in host memory: the staging ring, the tail and
/// head words and the status record, as the GPU communicator keeps them in
/// device memory.
struct CpuChannel {
    staging: Arc<HostMem>,
    /// Tail, head.
    flags: Box<[AtomicU64; 2]>,
    status: Box<[AtomicU64; StatusRecord::WORDS]>,
}

/// Per-rank state: its channels, the ring table and the connection the
/// kernel reads (and whose `seq` words it advances).
struct CpuRank {
    channels: Vec<CpuChannel>,
    user_from_ring: Box<[u32]>,
    conn: Box<std::cell::UnsafeCell<RankConn>>,
    /// The direct staging (two halves) and the channels' ready words, a
    /// line apart.
    direct: Option<Arc<HostMem>>,
    ready: Box<[AtomicU64]>,
}

// SAFETY: `conn` is written by the planner before any job runs and
// afterwards only by the kernel code of that rank, one job at a time.
unsafe impl Sync for CpuRank {}

struct Inner {
    ranks: Vec<CpuRank>,
    /// Every rank's direct staging and ready words, in user-rank order: the
    /// table each rank's kernel code reads through a raw pointer, so it is
    /// only held here (empty without direct staging).
    #[allow(dead_code)]
    direct_peers: Box<[DirectPeer]>,
    abort: Box<AtomicU64>,
    state: CommState,
    /// The recent calls' plans (see [`PlanMemo`]).
    memo: Mutex<PlanMemo>,
    /// Raised by a lane that panics (see [`Trap`]).
    trap: Trap,
}

/// A communicator over `k` ranks that runs the ring reduce-scatter on CPU
/// threads: each rank is a worker thread (its "stream") that runs every
/// collective's block as `CPU_THREADS + 1` OS threads. The protocol, the
/// sizing and the kernel code are the GPU's; only the [`Device`] differs.
///
/// Unlike [`Communicator`](crate::Communicator), it takes host buffers
/// ([`HostBuffer`](crate::HostBuffer) and its views) and no streams: each rank's worker thread
/// is its stream, and the views' accessors wait for the queued work.
///
/// ```
/// use ringreduce::{CpuBuffers, CpuCommunicator, HostBuffer, Op};
/// let (k, n) = (4, 1000);
/// let comm = CpuCommunicator::new(k)?;
/// // Rank r sends k blocks of n values, all equal to r.
/// let send: Vec<HostBuffer<f32>> = (0..k)
///     .map(|r| HostBuffer::from_slice(&vec![r as f32; k * n]))
///     .collect();
/// let recv: Vec<HostBuffer<f32>> = (0..k).map(|_| HostBuffer::zeroed(n)).collect();
/// let bufs: Vec<CpuBuffers<f32>> = (0..k)
///     .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view()))
///     .collect();
/// comm.reduce_scatter(&bufs, Op::Sum)?; // queued on the ranks' threads
/// comm.synchronize()?;                   // reports timeouts and aborts
/// assert!(recv.iter().all(|r| r.to_vec() == vec![6.0; n])); // 0 + 1 + 2 + 3
/// # Ok::<(), ringreduce::Error>(())
/// ```
///
/// [`Device`]: ringreduce_kernels::Device
pub struct CpuCommunicator {
    inner: Arc<Inner>,
    workers: Vec<Worker>,
}

impl CpuCommunicator {
    /// The least staging per channel ([`CommConfig::buffer_bytes`]) the CPU
    /// execution takes: a slot for one unrolled round of its lanes.
    pub const MIN_BUFFER_BYTES: u64 = ringreduce_kernels::plan::min_buffer_bytes(CPU_THREADS);

    /// The most channels per rank ([`CommConfig::channels`]) the CPU
    /// execution takes, whatever `k`.
    pub const MAX_CHANNELS: usize = MAX_CHANNELS;

    /// `k` ranks in ring order `0..k` with the default configuration.
    pub fn new(k: usize) -> Result<Self> {
        Self::with_config(k, CommConfig::default())
    }

    /// `k` ranks on CPU threads, set up by `config`.
    pub fn with_config(k: usize, config: CommConfig) -> Result<Self> {
        if k == 0 {
            return Err(Error::ZeroRanks);
        }
        let ring = RingOrder::for_ranks(config.ring_order.as_deref(), k)?;
        // Fail early on a staging buffer that cannot hold even one slice.
        let staging = config.buffer_bytes.unwrap_or(DEFAULT_BUFFER_BYTES);
        crate::planner::sizing(ringreduce_kernels::DataType::U8, staging, CPU_THREADS, true)?;
        let channels = cpu_channels(config.channels)?;
        let half = config.effective_direct_bytes();
        let ready_words = MAX_CHANNELS * (DIRECT_FLAG_STRIDE / 8) as usize;
        let ranks: Vec<CpuRank> = (0..k)
            .map(|_| CpuRank {
                direct: (half > 0).then(|| HostMem::new(2 * half as usize)),
                ready: (0..ready_words).map(|_| AtomicU64::new(0)).collect(),
                channels: (0..channels)
                    .map(|_| CpuChannel {
                        staging: HostMem::new(staging as usize),
                        flags: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
                        status: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
                    })
                    .collect(),
                user_from_ring: ring.user_from_ring().into(),
                conn: Box::new(std::cell::UnsafeCell::new(RankConn::default())),
            })
            .collect();
        let abort = Box::new(AtomicU64::new(0));
        let direct_peers: Box<[DirectPeer]> = if half > 0 {
            ranks
                .iter()
                .map(|r| DirectPeer {
                    area: r.direct.as_ref().map_or(0, |m| m.addr()),
                    ready: r.ready.as_ptr() as u64,
                })
                .collect()
        } else {
            Box::new([])
        };
        let peers_at = if half > 0 {
            direct_peers.as_ptr() as u64
        } else {
            0
        };
        let wiring: Vec<RankWiring> = ranks
            .iter()
            .map(|r| RankWiring {
                user_from_ring: r.user_from_ring.as_ptr() as u64,
                channels: r
                    .channels
                    .iter()
                    .map(|c| ChannelWiring {
                        staging: c.staging.addr(),
                        tail: c.flags[0].as_ptr() as u64,
                        head: c.flags[1].as_ptr() as u64,
                        status: c.status.as_ptr() as u64,
                    })
                    .collect(),
                direct_peers: peers_at,
            })
            .collect();
        // Every rank's job of a local call meets the others before and after
        // it, as one launch would run them (`CpuCommunicator::collective`).
        let local_blocks = (k * channels) as u64;
        let state = CommState::new(ring, config, channels, staging, half, local_blocks)?;
        let conns = connect(
            &state.ring,
            &wiring,
            state.statics(abort.as_ptr() as u64, false),
        );
        for (r, c) in ranks.iter().zip(conns) {
            // SAFETY: no job exists yet.
            unsafe { *r.conn.get() = c };
        }
        let inner = Arc::new(Inner {
            state,
            ranks,
            direct_peers,
            abort,
            memo: Mutex::new(PlanMemo::default()),
            trap: Trap::default(),
        });
        let workers = (0..k)
            .map(|rank| {
                let (tx, rx) = channel::<Job>();
                let inner = inner.clone();
                let h = std::thread::Builder::new()
                    .name(format!("ringreduce-cpu-rank{rank}"))
                    .spawn(move || {
                        // A job that panics breaks the communicator; the
                        // worker lives on, so later calls and
                        // `synchronize` still get an answer.
                        for job in rx {
                            if let Err(p) = catch_unwind(AssertUnwindSafe(job)) {
                                inner.state.mark_broken(&Error::Broken(format!(
                                    "internal: rank {rank}'s CPU worker panicked: {}",
                                    panic_text(&*p)
                                )));
                            }
                        }
                    })
                    .expect("spawn rank worker");
                (Some(tx), Some(h))
            })
            .collect();
        Ok(CpuCommunicator { inner, workers })
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

    /// Channels each rank has; a call uses at most this many.
    pub fn max_channels(&self) -> usize {
        self.inner.state.max_channels
    }

    /// Staging bytes per channel.
    pub fn staging_bytes(&self) -> u64 {
        self.inner.state.staging_bytes
    }

    pub(super) fn check_broken(&self) -> Result<()> {
        self.inner.state.check(&self.status_records())
    }

    fn status_records(&self) -> Vec<StatusRecord> {
        self.inner
            .ranks
            .iter()
            .flat_map(|r| r.channels.iter().map(|c| read_status(&c.status)))
            .collect()
    }

    /// Enqueues a reduce-scatter: `bufs[u]` are user rank `u`'s buffers. It
    /// returns once every rank's work is queued; the buffers' host accessors
    /// wait for it, and [`synchronize`](Self::synchronize) reports how it
    /// ended.
    pub fn reduce_scatter<T: RsElement>(&self, bufs: &[CpuBuffers<T>], op: Op) -> Result<()> {
        self.collective(Collective::ReduceScatter, bufs, op)
    }

    /// Enqueues an all-gather, like [`reduce_scatter`](Self::reduce_scatter).
    pub fn all_gather<T: RsElement>(&self, bufs: &[CpuBuffers<T>]) -> Result<()> {
        self.collective(Collective::AllGather, bufs, Op::Sum)
    }

    /// Enqueues an all-reduce, like [`reduce_scatter`](Self::reduce_scatter).
    pub fn all_reduce<T: RsElement>(&self, bufs: &[CpuBuffers<T>], op: Op) -> Result<()> {
        self.collective(Collective::AllReduce, bufs, op)
    }

    /// Any collective, like [`reduce_scatter`](Self::reduce_scatter).
    pub fn collective<T: RsElement>(
        &self,
        c: Collective,
        bufs: &[CpuBuffers<T>],
        op: Op,
    ) -> Result<()> {
        self.check_broken()?;
        let k = self.k();
        if bufs.len() != k {
            return Err(Error::WrongBufferCount { got: bufs.len(), k });
        }
        let sz = std::mem::size_of::<T>() as u64;
        let mut spans = Vec::with_capacity(k);
        for (u, b) in bufs.iter().enumerate() {
            spans.push(match b {
                CpuBuffers::OutOfPlace { send, recv } => BufferSpan {
                    send: send.addr(),
                    send_len: send.len() as u64,
                    recv: recv.addr(),
                    recv_len: recv.len() as u64,
                },
                CpuBuffers::InPlace(v) => {
                    BufferSpan::in_place(c, v.addr(), v.len() as u64, k, u, sz)?
                }
            });
        }
        let conns: Vec<u64> = self
            .inner
            .ranks
            .iter()
            .map(|r| r.conn.get() as u64)
            .collect();
        // As on the GPU, so that every CPU test runs the memo; the plan is
        // cloned out so the lock is not held while jobs are queued.
        let plan = self
            .inner
            .memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .plan(
                c,
                &conns,
                &spans,
                T::DTYPE,
                self.inner.state.call_opts(CPU_THREADS),
            )?
            .clone();
        let guards_for = |b: &CpuBuffers<T>| -> Vec<UseGuard> {
            match b {
                CpuBuffers::OutOfPlace { send, recv } => {
                    vec![send.mem.begin_use(), recv.mem.begin_use()]
                }
                CpuBuffers::InPlace(v) => vec![v.mem.begin_use()],
            }
        };
        // The catalogue entry the GPU would launch: the CPU runs its code.
        let entry = |works: &[Work]| {
            works
                .first()
                .and_then(|w| catalogue::entry_of_work(w, T::DTYPE, op))
                .ok_or_else(|| Error::Broken("internal: a launch no entry runs".into()))
        };
        match plan {
            Plan::Nothing => Ok(()),
            Plan::Copy { send, recv, bytes } => {
                let guards = guards_for(&bufs[0]);
                self.submit(
                    0,
                    Box::new(move || {
                        let _g = guards;
                        // SAFETY: validated, non-overlapping, in use by us.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                send as *const u8,
                                recv as *mut u8,
                                bytes as usize,
                            )
                        }
                    }),
                )
            }
            Plan::Launch {
                algorithm: Algorithm::Local,
                works,
                ..
            } => {
                // One launch's grid, cut by rank: each rank's worker runs its
                // own blocks once every rank's earlier work is done, and goes
                // on only when every block has ended, as the launch's events
                // order a GPU's streams.
                let entry = entry(&works)?;
                let blocks = works.len() as u64 * works[0].channels;
                let args = Arc::new(LocalArgs::new(&works, blocks).ok_or_else(|| {
                    Error::Broken("internal: a local call does not fit its arguments".into())
                })?);
                let (start, end) = (Arc::new(Barrier::new(k)), Arc::new(Barrier::new(k)));
                let panics = self.inner.state.hooks().lane_panic;
                for (u, w) in works.iter().copied().enumerate() {
                    let guards = guards_for(&bufs[u]);
                    let (inner, args, start, end) =
                        (self.inner.clone(), args.clone(), start.clone(), end.clone());
                    let first = u as u64 * w.channels;
                    self.submit(
                        u,
                        Box::new(move || {
                            let _g = guards;
                            start.wait();
                            // A trap ends the grid, not the job: every rank
                            // still reaches the second barrier.
                            run_grid(&inner, w.channels, &|lane| {
                                injected_panic(panics, u, lane);
                                // SAFETY: the arguments come from the
                                // planner for this call, whose buffers every
                                // rank's job holds between the two barriers.
                                unsafe { run_local(entry, lane, &args, first + lane.block) }
                            });
                            end.wait();
                        }),
                    )?;
                }
                Ok(())
            }
            Plan::Launch { works, .. } => {
                let entry = entry(&works)?;
                let hooks = self.inner.state.hooks();
                for (u, w) in works.into_iter().enumerate() {
                    if hooks.withhold_rank == Some(u) {
                        continue;
                    }
                    let guards = guards_for(&bufs[u]);
                    let inner = self.inner.clone();
                    self.submit(
                        u,
                        Box::new(move || {
                            let _g = guards;
                            run_grid(&inner, w.channels, &|lane| {
                                injected_panic(hooks.lane_panic, u, lane);
                                // SAFETY: `w` comes from the planner for this
                                // communicator, whose memory outlives the job.
                                unsafe { run_rank(entry, lane, &w) }
                            });
                        }),
                    )?;
                }
                Ok(())
            }
        }
    }

    pub(super) fn submit(&self, rank: usize, job: Job) -> Result<()> {
        let tx = self.workers[rank].0.as_ref().expect("worker alive");
        tx.send(job)
            .map_err(|_| Error::Broken(format!("rank {rank}'s worker thread has exited")))
    }

    /// Waits for every queued collective, then reports the first error any
    /// rank recorded. After an error the communicator stays broken.
    pub fn synchronize(&self) -> Result<()> {
        let (tx, rx) = channel::<()>();
        for rank in 0..self.k() {
            let tx = tx.clone();
            self.submit(
                rank,
                Box::new(move || {
                    let _ = tx.send(());
                }),
            )?;
        }
        drop(tx);
        for _ in 0..self.k() {
            rx.recv()
                .map_err(|_| Error::Broken("a rank's worker thread has exited".into()))?;
        }
        self.check_broken()
    }

    /// Makes every rank's waits give up; safe from any thread. Queued and
    /// running collectives end with [`Error::Aborted`] (one that had already
    /// finished keeps its results), and every later call, a collective or
    /// [`synchronize`](Self::synchronize), returns `Aborted` with nothing
    /// run: the communicator is done.
    pub fn abort(&self) {
        self.inner.state.abort();
        self.inner.abort.store(1, Ordering::SeqCst);
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

    /// Test hook: `rank`'s first lane panics at the start of every
    /// collective, as an internal bug would.
    #[doc(hidden)]
    pub fn inject_lane_panic(&self, rank: Option<usize>) {
        self.inner.state.set_hooks(|h| h.lane_panic = rank);
    }

    /// Each user rank's recorded error, if any (for diagnostics: the error
    /// [`synchronize`](Self::synchronize) returns is the likeliest cause).
    pub fn rank_errors(&self) -> Vec<Option<Error>> {
        self.inner.state.rank_errors(&self.status_records())
    }
}

impl Drop for CpuCommunicator {
    fn drop(&mut self) {
        for (tx, _) in &mut self.workers {
            tx.take();
        }
        for (_, h) in &mut self.workers {
            if let Some(h) = h.take() {
                let _ = h.join();
            }
        }
    }
}

fn read_status(words: &[AtomicU64; StatusRecord::WORDS]) -> StatusRecord {
    StatusRecord::from_words(std::array::from_fn(|i| words[i].load(Ordering::Acquire)))
}

/// `blocks` blocks, each of `CPU_THREADS` producer lanes and the control
/// lane, all at once, as a GPU runs them; every lane runs `body`.
///
/// A lane that panics raises the communicator's trap and wakes the grid's
/// barriers: every other lane, here or in another rank's grid, unwinds at
/// its next wait, so the grid ends instead of hanging, and the
/// communicator is broken with the panic's message.
fn run_grid(inner: &Inner, blocks: u64, body: &(dyn Fn(&Lane<'_>) + Sync)) {
    let syncs: Vec<BlockSync> = (0..blocks)
        .map(|_| BlockSync::new(CPU_THREADS as usize))
        .collect();
    let (epoch, trap, all) = (Instant::now(), &inner.trap, &syncs);
    std::thread::scope(|s| {
        for (block, sync) in syncs.iter().enumerate() {
            for tid in 0..=CPU_THREADS {
                s.spawn(move || {
                    let lane = Lane {
                        tid,
                        block: block as u64,
                        sync,
                        epoch,
                        trap,
                    };
                    if let Err(p) = catch_unwind(AssertUnwindSafe(|| body(&lane))) {
                        if !p.is::<Trapped>() {
                            trap.raise(panic_text(&*p));
                        }
                        all.iter().for_each(BlockSync::wake);
                    }
                });
            }
        }
    });
    if let Some(what) = trap.what() {
        inner.state.mark_broken(&Error::Broken(format!(
            "internal: a lane of the CPU execution panicked: {what}"
        )));
    }
}

/// The message of a panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The `lane_panic` test hook: the first lane of rank `u`'s first block.
fn injected_panic(hook: Option<usize>, u: usize, lane: &Lane<'_>) {
    if hook == Some(u) && lane.block == 0 && lane.tid == 0 {
        panic!("injected lane panic on rank {u}");
    }
}
