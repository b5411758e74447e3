//! The CPU backend: the same kernels, run by OS threads, under the one
//! front end ([`Comm`]).

use super::buffer::{HostBuffer, HostView, UseGuard};
use super::setup::{self, Inner};
use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::front::{fold_entry, Alarm, Comm, Engine};
use crate::job::{Offer, Table};
use crate::memo::PlanMemo;
use crate::planner::{BufferSpan, Plan};
use crate::region::{check_regions, Region};
use crate::state::CommState;
use ringreduce_kernels::abi::{LocalArgs, Work, CPU_THREADS, MAX_CHANNELS};
use ringreduce_kernels::catalogue;
use ringreduce_kernels::cpu::{run_local, run_rank, BlockSync, Lane, Trapped};
use ringreduce_kernels::grad::abi::Task;
use ringreduce_kernels::types::{Algorithm, Collective};
use ringreduce_kernels::{DataType, Op, StatusRecord};
use std::ops::Range;
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

/// The CPU execution's communicator: `k` ranks on CPU
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
pub type CpuCommunicator = Comm<CpuBackend>;

/// The CPU backend of [`Comm`]: each rank's memory in host memory, and a
/// worker thread per rank.
pub struct CpuBackend {
    inner: Arc<Inner>,
    /// Each rank's connection address (`ranks[u].conn`), as the planner
    /// takes them.
    conns: Vec<u64>,
    workers: Vec<Worker>,
}

impl CpuCommunicator {
    /// The most channels per rank ([`CommConfig::channels`]) the CPU
    /// execution takes, whatever `k`.
    pub const MAX_CHANNELS: usize = MAX_CHANNELS;

    /// `k` ranks in ring order `0..k` with the default configuration.
    pub fn new(k: usize) -> Result<Self> {
        Self::with_config(k, CommConfig::default())
    }

    /// `k` ranks on CPU threads, set up by `config` (as
    /// [`Comm::create`]).
    pub fn with_config(k: usize, config: CommConfig) -> Result<Self> {
        Self::create(k, config)
    }

    /// Enqueues a reduce-scatter: `bufs[u]` are user rank `u`'s buffers. It
    /// returns once every rank's work is queued; the buffers' host accessors
    /// wait for it, and [`synchronize`](Comm::synchronize) reports how it
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

    /// Any collective, like [`reduce_scatter`](Self::reduce_scatter) (an
    /// all-gather ignores `op`).
    pub fn collective<T: RsElement>(
        &self,
        c: Collective,
        bufs: &[CpuBuffers<T>],
        op: Op,
    ) -> Result<()> {
        self.begin(bufs.len())?;
        let (k, sz) = (self.k(), std::mem::size_of::<T>() as u64);
        let first = self.local_ranks().start;
        let mut spans = Vec::with_capacity(k);
        let mut holds = Vec::with_capacity(k);
        for (u, b) in bufs.iter().enumerate() {
            let (span, hold) = match b {
                CpuBuffers::OutOfPlace { send, recv } => (
                    BufferSpan {
                        send: send.addr(),
                        send_len: send.len() as u64,
                        recv: recv.addr(),
                        recv_len: recv.len() as u64,
                    },
                    vec![send.mem.begin_use(), recv.mem.begin_use()],
                ),
                CpuBuffers::InPlace(v) => (
                    BufferSpan::in_place(c, v.addr(), v.len() as u64, k, first + u, sz)?,
                    vec![v.mem.begin_use()],
                ),
            };
            spans.push(span);
            holds.push(hold);
        }
        self.run(c, &spans, T::DTYPE, op, holds)
    }

    /// Test hook: `rank`'s first lane panics at the start of every
    /// collective, as an internal bug would.
    #[doc(hidden)]
    pub fn inject_lane_panic(&self, rank: Option<usize>) {
        self.b.inner.state.set_hooks(|h| h.lane_panic = rank);
    }
}

impl CpuBackend {
    /// A worker thread for each rank of `inner`.
    fn start(inner: Inner) -> Result<Self> {
        let inner = Arc::new(inner);
        let conns = inner.ranks.iter().map(|r| r.conn.get() as u64).collect();
        let first = inner.state.local.start;
        let workers = (0..inner.ranks.len())
            .map(|i| -> Result<Worker> {
                let rank = first + i;
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
                    .map_err(|e| {
                        Error::Broken(format!("cannot start rank {rank}'s worker thread: {e}"))
                    })?;
                Ok((Some(tx), Some(h)))
            })
            .collect::<Result<_>>()?;
        Ok(CpuBackend {
            inner,
            conns,
            workers,
        })
    }

    pub(super) fn submit(&self, rank: usize, job: Job) -> Result<()> {
        let tx = self.workers[rank].0.as_ref();
        tx.ok_or_else(|| Error::Broken(format!("rank {rank}'s worker thread has exited")))?
            .send(job)
            .map_err(|_| Error::Broken(format!("rank {rank}'s worker thread has exited")))
    }
}

impl Engine for CpuBackend {
    const THREADS: u64 = CPU_THREADS;
    /// Each rank's holds on its buffers, kept by its job until it has run.
    type Call<'a> = Vec<Vec<UseGuard>>;
    type Buf<T: RsElement> = HostBuffer<T>;

    fn create(k: usize, config: CommConfig) -> Result<Self> {
        CpuBackend::start(setup::local(k, config)?)
    }
    type Joining = setup::Joining;
    fn prepare(
        rank: usize,
        _device: usize,
        config: &CommConfig,
        job: u64,
    ) -> Result<(setup::Joining, Offer, [u8; 16])> {
        let (j, offer) = setup::prepare(rank, config, job)?;
        Ok((j, offer, [0; 16]))
    }
    fn join(joining: setup::Joining, table: &Table, config: CommConfig) -> Result<Self> {
        CpuBackend::start(setup::join(joining, table, config)?)
    }
    /// Every peer has mapped this rank's area: its name goes, and the
    /// memory lives as long as some process maps it.
    fn mapped(&mut self) {
        for r in &self.inner.ranks {
            r.area.unlink();
        }
    }
    fn alarm(&self) -> Alarm {
        let inner = self.inner.clone();
        Box::new(move |e| {
            inner.state.peer_fault(e);
            inner.abort.store(1, Ordering::SeqCst);
        })
    }
    fn state(&self) -> &CommState {
        &self.inner.state
    }
    fn conns(&self) -> &[u64] {
        &self.conns
    }
    fn memo(&self) -> &Mutex<PlanMemo> {
        &self.inner.memo
    }
    fn status_records(&self) -> Vec<StatusRecord> {
        let channels = self.inner.state.max_channels as u64;
        self.inner
            .ranks
            .iter()
            .flat_map(|r| (0..channels).map(|c| read_status(r.status(c))))
            .collect()
    }
    fn execute(
        &self,
        plan: &Plan,
        dtype: DataType,
        op: Op,
        holds: Vec<Vec<UseGuard>>,
    ) -> Result<()> {
        let k = self.inner.ranks.len();
        // Each rank's holds go with its own job (a withheld rank's are
        // dropped with the call).
        let mut holds: Vec<Option<Vec<UseGuard>>> = holds.into_iter().map(Some).collect();
        let mut guards_for = |rank: usize| {
            holds
                .get_mut(rank)
                .and_then(Option::take)
                .unwrap_or_default()
        };
        // The catalogue entry the GPU would launch: the CPU runs its code.
        let entry = |works: &[Work]| {
            works
                .first()
                .and_then(|w| catalogue::entry_of_work(w, dtype, op))
                .ok_or_else(|| Error::Broken("internal: a launch no entry runs".into()))
        };
        match plan {
            Plan::Nothing => Ok(()),
            &Plan::Copy { send, recv, bytes } => {
                let guards = guards_for(0);
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
                let entry = entry(works)?;
                let blocks = works.len() as u64 * works[0].channels;
                let args = Arc::new(LocalArgs::new(works, blocks).ok_or_else(|| {
                    Error::Broken("internal: a local call does not fit its arguments".into())
                })?);
                let (start, end) = (Arc::new(Barrier::new(k)), Arc::new(Barrier::new(k)));
                let panics = self.inner.state.hooks().lane_panic;
                for (u, w) in works.iter().copied().enumerate() {
                    let guards = guards_for(u);
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
                let entry = entry(works)?;
                let hooks = self.inner.state.hooks();
                for (u, w) in works.iter().copied().enumerate() {
                    if hooks.withhold_rank == Some(self.inner.state.local.start + u) {
                        continue;
                    }
                    let guards = guards_for(u);
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
    fn wait_idle(&self) -> Result<()> {
        let k = self.inner.ranks.len();
        let (tx, rx) = channel::<()>();
        for rank in 0..k {
            let tx = tx.clone();
            self.submit(
                rank,
                Box::new(move || {
                    let _ = tx.send(());
                }),
            )?;
        }
        drop(tx);
        for _ in 0..k {
            rx.recv()
                .map_err(|_| Error::Broken("a rank's worker thread has exited".into()))?;
        }
        Ok(())
    }
    fn raise_abort(&self) {
        self.inner.abort.store(1, Ordering::SeqCst);
    }

    fn addr_at<T: RsElement>(&self, _rank: usize, buf: &HostBuffer<T>, at: usize) -> u64 {
        buf.as_view().addr() + (at * std::mem::size_of::<T>()) as u64
    }
    /// On the rank's worker, a block per source, as a local call of one
    /// channel runs.
    unsafe fn fold(&self, rank: usize, dtype: DataType, op: Op, mut args: LocalArgs) -> Result<()> {
        let entry = fold_entry(dtype, op)?;
        args.blocks = args.ranks;
        let inner = self.inner.clone();
        self.submit(
            rank,
            Box::new(move || {
                run_grid(&inner, args.blocks, &|lane| {
                    // SAFETY: the caller's promise.
                    unsafe { run_local(entry, lane, &args, lane.block) }
                })
            }),
        )
    }
    unsafe fn task(&self, rank: usize, task: Task) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.run_task_job(rank, task, Vec::new()) }
    }
    fn upload<T: RsElement>(&self, _rank: usize, data: &[T]) -> Result<HostBuffer<T>> {
        Ok(HostBuffer::from_slice(data))
    }
    fn len_of<T: RsElement>(buf: &HostBuffer<T>) -> usize {
        buf.len()
    }
    fn read<T: RsElement>(
        &self,
        _rank: usize,
        buf: &HostBuffer<T>,
        at: Range<usize>,
    ) -> Result<Vec<T>> {
        buf.read(at)
    }
    fn write<T: RsElement>(
        &self,
        _rank: usize,
        buf: &mut HostBuffer<T>,
        at: usize,
        data: &[T],
    ) -> Result<()> {
        buf.write(at, data)
    }
    fn regions<T: RsElement>(
        comm: &CpuCommunicator,
        c: Collective,
        regions: &mut [Region<'_, HostBuffer<T>>],
        op: Op,
    ) -> Result<()> {
        check_regions(regions, |b| b.len())?;
        let bufs: Vec<CpuBuffers<T>> = regions
            .iter()
            .map(|r| match r {
                Region::OutOfPlace {
                    send,
                    send_at,
                    recv,
                    recv_at,
                } => CpuBuffers::out_of_place(
                    send.view_within(send_at.clone()),
                    recv.view_within(recv_at.clone()),
                ),
                Region::Split {
                    buf,
                    send_at,
                    recv_at,
                } => CpuBuffers::out_of_place(
                    buf.view_within(send_at.clone()),
                    buf.view_within(recv_at.clone()),
                ),
                Region::InPlace { buf, at } => CpuBuffers::in_place(buf.view_within(at.clone())),
            })
            .collect();
        comm.collective(c, &bufs, op)
    }
}

impl Drop for CpuBackend {
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
