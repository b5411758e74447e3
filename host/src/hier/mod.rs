//! A rank of a job whose ranks span hosts: our kernels among the ranks of
//! its host, and the step between nodes among the ranks of its local
//! index, folded in node order. The schedule and its fold order are in
//! `docs/beyond-one-node.md`.

mod collectives;
mod wire;

use crate::across::{Across, Ticket};
use crate::bootstrap::{UniqueId, Watch, POLL};
use crate::collectives::Collectives;
use crate::config::CommConfig;
use crate::element::{DataType, RsElement};
use crate::error::{Error, Result};
use crate::front::{Backend, Comm, Engine, Joined};
use crate::grad::{
    goes_dense, selection_tasks, sparse_top_k, Precision, SparseSent, Sparsity, Wire, BEGUN_AT_ONCE,
};
use crate::nodes::Nodes;
use crate::region::Region;
use ringreduce_kernels::abi::{LocalArgs, BATCH_RANKS};
use ringreduce_kernels::grad::abi::{
    candidates_for, half_arg, tiles_for, SelectState, Task, TaskKind,
};
use ringreduce_kernels::plan::PACK_BYTES;
use ringreduce_kernels::Collective;
use ringreduce_kernels::Op;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
pub(crate) use wire::Step;

/// How long a failed step between nodes waits for the watch to name the
/// rank that went (see [`HierComm::cause_of`]): many of the watch's polls.
const CAUSE_GRACE: std::time::Duration = std::time::Duration::from_millis(1000);

/// One rank of a hierarchical job.
pub struct HierComm<B: Backend> {
    /// This rank's node's communicator: it holds the rank's local index.
    intra: Comm<B>,
    /// The step between nodes among the ranks of this local index.
    across: Arc<dyn Across>,
    nodes: Nodes,
    rank: usize,
    /// The whole job's watch: a lost peer anywhere stops every rank.
    watch: Option<Watch>,
    /// What the watch heard first: a failed step between nodes reports it.
    cause: Arc<OnceLock<Error>>,
    /// The step between nodes' staging in this rank's memory, grown on
    /// demand and kept: every node's owned elements (and, with a tail,
    /// the rank's own, gathered into one range to send). Two slots, so
    /// that one bucket's step may run while the next one's is queued.
    staging: [Mutex<Option<B::Buf<u8>>>; BEGUN_AT_ONCE],
}

/// A dense all-reduce whose step between nodes was queued by
/// `HierComm::begin_all_reduce_at` and may still be running;
/// `HierComm::end_all_reduce_at` finishes it.
pub struct Begun<'a, B: Backend> {
    /// Keeps the step's staging slot this all-reduce's.
    _staging: Option<Staging<'a, B>>,
    /// The step between nodes, to fold in once it has landed.
    crossing: Option<Crossing>,
    /// The node's whole shards, to all-gather after the fold.
    shards: Range<usize>,
}

/// A dense step between nodes, queued: where the rank's owned elements
/// are, where every node's landed, and what to fold them with.
struct Crossing {
    /// The shard's and the tail's first elements in the rank's buffer.
    out: u64,
    out_tail: u64,
    /// Their lengths, in elements.
    c: usize,
    t: usize,
    /// Every node's `shard ++ tail`, in node order, `bytes` each.
    all: u64,
    bytes: usize,
    op: Op,
    ticket: Ticket,
}

/// Where each part of the step's staging starts: a multiple of the wide
/// packs, so that the folds over it may take the wide path.
const STAGING_ALIGN: usize = 256;

/// The step's staging, held for one call.
type Staging<'a, B> = MutexGuard<'a, Option<<B as Engine>::Buf<u8>>>;

/// `bytes` rounded up to where the next part of the staging may start.
fn room(bytes: usize) -> usize {
    bytes.next_multiple_of(STAGING_ALIGN)
}

/// This rank among the node communicator's own ranks: a job's process
/// holds its rank alone.
const HERE: usize = 0;

impl<B: Backend> HierComm<B> {
    /// Rank `rank` of a job of `world` processes sharing `id`, whose
    /// ranks may span hosts: hosts come from the rendezvous (each rank's
    /// host name, or `RINGREDUCE_HOST_NAME`), every host must hold as many
    /// ranks ([`Error::UnevenNodes`]), and every rank fails with the same
    /// typed error as [`Comm::init_rank`] does.
    ///
    /// Between nodes, GPU ranks of a build with the `nccl` feature use
    /// NCCL (loaded at run time: [`Error::NcclUnavailable`] on every rank
    /// where any rank cannot load it); the CPU execution, and GPU ranks
    /// without the feature, use a test stand-in over loopback TCP, which
    /// reaches hosts simulated on one machine only. On one node, never
    /// NCCL.
    pub fn init_rank(
        id: &UniqueId,
        rank: usize,
        world: usize,
        device: usize,
        config: CommConfig,
    ) -> Result<Self> {
        let j = Joined::<B>::init_rank(id, rank, world, device, config)?;
        Ok(HierComm {
            intra: j.intra,
            across: j.across,
            nodes: j.nodes,
            rank,
            watch: Some(j.watch),
            cause: j.cause,
            staging: Default::default(),
        })
    }

    /// [`init_rank`](Self::init_rank) from the launcher's variables, with
    /// the device [`Comm::from_env`] would take: how a job that torchrun,
    /// mpirun or srun started on every host joins. On one host it is that
    /// host's communicator and never loads NCCL.
    ///
    /// ```no_run
    /// use ringreduce::{Collectives, CommConfig, GpuBackend, HierComm, Op};
    /// let comm = HierComm::<GpuBackend>::from_env(CommConfig::default())?;
    /// let mut grad = comm.upload(comm.rank(), &vec![1.0f32; 1 << 20])?;
    /// comm.all_reduce(&mut grad, Op::Sum)?;
    /// # Ok::<(), ringreduce::Error>(())
    /// ```
    pub fn from_env(config: CommConfig) -> Result<Self> {
        let (launch, id, device) = crate::front::launched::<B>(&config)?;
        Self::init_rank(&id, launch.rank, launch.world, device, config)
    }

    /// The job's nodes.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// This rank's node's communicator (its rank there is the local index).
    pub fn intra(&self) -> &Comm<B> {
        &self.intra
    }

    /// Makes every rank of the job give up.
    pub fn abort(&self) {
        self.intra.abort();
        self.across.abort();
        if let Some(w) = &self.watch {
            w.abort();
        }
    }

    /// In place, `op` over every rank's `buf` (the same length on every
    /// rank), and waits for it. On one host, the host's all-reduce; across
    /// hosts, a reduce-scatter inside the node, the rank's shard across
    /// nodes folded in node order, an all-gather inside the node. The
    /// elements past the last whole shard (fewer than a node's ranks) are
    /// all-reduced inside the node and folded across nodes the same way.
    /// `Avg` sums throughout and divides once, by the job's size.
    pub fn all_reduce<T: RsElement>(&self, buf: &mut B::Buf<T>, op: Op) -> Result<()> {
        let n = <Comm<B> as Collectives>::len_of(buf);
        self.all_reduce_at(buf, 0..n, Step::Full(op), None)
            .map(|_| ())
    }

    /// [`all_reduce`](Self::all_reduce) of `at` of `buf`, with the step
    /// between nodes as `step` says; what that step sent.
    pub(crate) fn all_reduce_at<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        step: Step,
        residual: Option<&mut B::Buf<f32>>,
    ) -> Result<SparseSent> {
        self.all_reduce_steps(buf, at, step, residual)
            .map_err(|e| self.in_job(e))
    }

    fn all_reduce_steps<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        step: Step,
        mut residual: Option<&mut B::Buf<f32>>,
    ) -> Result<SparseSent> {
        if matches!(step, Step::Wire(_)) && T::DTYPE != DataType::F32 {
            return Err(Error::HalfNeedsF32(T::DTYPE.name()));
        }
        let (op, wire) = match step {
            Step::Full(op) => (op, None),
            Step::Wire(w @ Wire::Half { prescale: true, .. }) => (Op::Avg, Some(w)),
            Step::Wire(w) => (Op::Sum, Some(w)),
        };
        let Some(wire) = wire.filter(|_| !self.nodes.is_one_node()) else {
            // The dense step, or one host (where no step between nodes is
            // compressed: the host's own all-reduce, as a flat job runs
            // it): begun, ended and waited for.
            let begun = self.begin_steps(buf, at, op, 0)?;
            self.end_steps(buf, begun)?;
            self.settle_steps()?;
            return Ok(wire::UNCOMPRESSED);
        };
        let (shards, shard) = self.node_reduce(buf, &at, Op::Sum, residual.as_deref_mut())?;
        let tail = shards.end..at.end;
        let sent = match wire {
            Wire::Half {
                precision,
                prescale,
            } => {
                self.cross_half_in_place(buf, shard, tail, precision, prescale)?;
                wire::UNCOMPRESSED
            }
            Wire::Sparse {
                sparsity,
                dense_above,
            } => {
                let how = (sparsity, dense_above);
                let owned = (shard, tail);
                let (sent, node_done) =
                    self.cross_sparse_in_place(buf, shards.clone(), owned, how, residual)?;
                if node_done {
                    self.intra.synchronize()?;
                    return Ok(sent);
                }
                sent
            }
        };
        self.node_gather(buf, shards)?;
        self.intra.synchronize()?;
        Ok(sent)
    }

    /// The node's first steps over `at` of `buf`, queued: the
    /// reduce-scatter (`inner`) of its whole shards, then the all-reduce of
    /// the tail past them (fewer elements than the node's ranks), which
    /// `residual`, where given, joins first. Returns the node's whole
    /// shards and this rank's own.
    fn node_reduce<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: &Range<usize>,
        inner: Op,
        residual: Option<&mut B::Buf<f32>>,
    ) -> Result<(Range<usize>, Range<usize>)> {
        let per = self.nodes.per_node();
        let c = at.len() / per;
        let (o, main) = (at.start, at.start + c * per);
        let me = self.intra.local_ranks().start;
        if c > 0 {
            let mut r = [Region::InPlace {
                buf: &mut *buf,
                at: o..main,
            }];
            self.intra.reduce_scatter(&mut r, inner)?;
        }
        let t = at.end - main;
        if t > 0 {
            if let Some(r) = residual {
                // Every local rank carries the tail across, so it must be
                // the same on all of them: each rank's residual joins its
                // tail before the node's all-reduce and is all sent.
                let g = self.intra.read(me, buf, main..at.end)?;
                let kept = self.intra.read(me, r, main..at.end)?;
                let sum: Vec<f32> = bytemuck::cast_slice::<T, f32>(&g)
                    .iter()
                    .zip(&kept)
                    .map(|(g, r)| g + r)
                    .collect();
                self.intra
                    .write(me, buf, main, bytemuck::cast_slice::<f32, T>(&sum))?;
                self.intra.write(me, r, main, &vec![0.0; t])?;
            }
            let mut r = [Region::InPlace {
                buf: &mut *buf,
                at: main..at.end,
            }];
            self.intra.all_reduce(&mut r, inner)?;
        }
        let l = self.nodes.local_of(self.rank);
        Ok((o..main, o + l * c..o + (l + 1) * c))
    }

    /// The node's last step, queued: the all-gather of its whole shards.
    fn node_gather<T: RsElement>(&self, buf: &mut B::Buf<T>, shards: Range<usize>) -> Result<()> {
        if shards.is_empty() {
            return Ok(());
        }
        let mut r = [Region::InPlace { buf, at: shards }];
        self.intra.all_gather(&mut r)
    }

    /// Begins the dense all-reduce (`op`) of `at` of `buf`: the node's
    /// reduce-scatter and the step between nodes are queued, with staging
    /// slot `slot`, and the call returns without waiting for the bytes to
    /// move, so that the caller may queue another all-reduce's node steps
    /// while they do. [`end_all_reduce_at`](Self::end_all_reduce_at)
    /// queues the rest; [`settle`](Self::settle) waits. The fold order and
    /// the result are [`all_reduce`](Self::all_reduce)'s.
    pub(crate) fn begin_all_reduce_at<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        op: Op,
        slot: usize,
    ) -> Result<Begun<'_, B>> {
        self.begin_steps(buf, at, op, slot)
            .map_err(|e| self.in_job(e))
    }

    /// Ends an all-reduce of `buf` that
    /// [`begin_all_reduce_at`](Self::begin_all_reduce_at) began: once its
    /// step between nodes has landed (the rank's queue waits for it on the
    /// device), the fold in node order and the node's all-gather, queued.
    pub(crate) fn end_all_reduce_at<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        begun: Begun<'_, B>,
    ) -> Result<()> {
        self.end_steps(buf, begun).map_err(|e| self.in_job(e))
    }

    /// Waits for every all-reduce begun and ended: the steps between nodes
    /// (polled for errors, an abort and the timeout), then the rank's
    /// queue.
    pub(crate) fn settle(&self) -> Result<()> {
        self.settle_steps().map_err(|e| self.in_job(e))
    }

    fn begin_steps<T: RsElement>(
        &self,
        buf: &mut B::Buf<T>,
        at: Range<usize>,
        op: Op,
        slot: usize,
    ) -> Result<Begun<'_, B>> {
        if self.nodes.is_one_node() {
            let mut r = [Region::InPlace { buf, at }];
            self.intra.all_reduce(&mut r, op)?;
            return Ok(Begun {
                _staging: None,
                crossing: None,
                shards: 0..0,
            });
        }
        let inner = if op == Op::Avg { Op::Sum } else { op };
        let (shards, shard) = self.node_reduce(buf, &at, inner, None)?;
        let tail = shards.end..at.end;
        let (staging, crossing) = self.queue_cross(buf, shard, tail, op, slot)?;
        Ok(Begun {
            _staging: staging,
            crossing,
            shards,
        })
    }

    fn end_steps<T: RsElement>(&self, buf: &mut B::Buf<T>, begun: Begun<'_, B>) -> Result<()> {
        if let Some(x) = &begun.crossing {
            self.across.join(&x.ticket)?;
            let node = |at: usize| -> Vec<u64> {
                let m = self.nodes.count();
                (0..m).map(|u| x.all + (u * x.bytes + at) as u64).collect()
            };
            let sz = std::mem::size_of::<T>();
            self.fold_chain::<T>(x.out, &node(0), x.c, x.op)?;
            self.fold_chain::<T>(x.out_tail, &node(x.c * sz), x.t, x.op)?;
        }
        self.node_gather(buf, begun.shards.clone())
    }

    fn settle_steps(&self) -> Result<()> {
        self.across.settle().map_err(|e| self.cause_of(e))?;
        self.intra.synchronize()
    }

    /// The dense step between nodes in the rank's own memory, queued: its
    /// owned elements (`shard`, then `tail`, of `buf`) gathered from every
    /// node into staging slot `slot`, to be folded in node order back into
    /// place by the local engine, every node a rank of it (`Avg` sums and
    /// divides once, by the job's size), once they have landed. Nothing
    /// crosses to the host.
    fn queue_cross<T: RsElement>(
        &self,
        buf: &B::Buf<T>,
        shard: Range<usize>,
        tail: Range<usize>,
        op: Op,
        slot: usize,
    ) -> Result<(Option<Staging<'_, B>>, Option<Crossing>)> {
        let b = &self.intra.b;
        let sz = std::mem::size_of::<T>();
        let (c, t, m) = (shard.len(), tail.len(), self.nodes.count());
        let bytes = (c + t) * sz;
        if bytes == 0 {
            return Ok((None, None));
        }
        let out = b.addr_at(HERE, buf, shard.start);
        let out_tail = b.addr_at(HERE, buf, tail.start);
        // Send straight from the shard; with a tail, the two together from
        // staging, since NCCL sends one range.
        let send_room = if t == 0 { 0 } else { room(bytes) };
        let (staging, base) = self.staging_in(slot, send_room + m * bytes)?;
        let all = base + send_room as u64;
        let send = if t == 0 {
            out
        } else {
            self.fold_chain::<T>(base, &[out], c, Op::Sum)?;
            self.fold_chain::<T>(base + (c * sz) as u64, &[out_tail], t, Op::Sum)?;
            base
        };
        let drain = || self.intra.synchronize();
        // SAFETY: `send` holds `bytes` of the rank's owned elements, `all`
        // room for every node's: the caller's buffer and the staging slot
        // the returned guard holds, which nothing else uses until the
        // step has landed and been folded (`settle` waits for it).
        let queued = unsafe { self.across.queue_all_gather_at(send, bytes, all, &drain) };
        let ticket = queued.map_err(|e| self.cause_of(e))?;
        let crossing = Crossing {
            out,
            out_tail,
            c,
            t,
            all,
            bytes,
            op,
            ticket,
        };
        Ok((Some(staging), Some(crossing)))
    }

    /// The step's staging, at least `bytes` of it, and its address: the
    /// guard keeps it this call's.
    fn staging(&self, bytes: usize) -> Result<(Staging<'_, B>, u64)> {
        self.staging_in(0, bytes)
    }

    /// Slot `slot` of the step's staging, at least `bytes` of it, and its
    /// address. Growing it first waits for every step queued, which may
    /// still read or write the old one.
    fn staging_in(&self, slot: usize, bytes: usize) -> Result<(Staging<'_, B>, u64)> {
        let mut staging = self.staging[slot].lock().unwrap_or_else(|e| e.into_inner());
        let have = staging.as_ref().map_or(0, <Comm<B> as Collectives>::len_of);
        if have < bytes {
            self.settle_steps()?;
            let me = self.intra.local_ranks().start;
            *staging = Some(self.intra.upload(me, &vec![0u8; bytes])?);
        }
        let base = self
            .intra
            .b
            .addr_at(HERE, staging.as_ref().expect("just made"), 0);
        Ok((staging, base))
    }

    /// Once the rank's queue has run what it holds, every node's `bytes`
    /// at `send` into `all`, in node order; what the watch heard if the
    /// step was cut short.
    fn gather_in_place(&self, send: u64, bytes: usize, all: u64) -> Result<()> {
        self.intra.synchronize()?;
        // SAFETY: `send` holds `bytes` of the rank's owned elements, `all`
        // room for every node's: the caller's buffer and the staging it
        // holds, with nothing else queued on them.
        let moved = unsafe { self.across.all_gather_at(send, bytes, all) };
        moved.map_err(|e| self.cause_of(e))
    }

    /// The half-precision step in the rank's own memory: its owned `f32`
    /// elements (`shard`, then `tail`, of `buf`) rounded to `precision`
    /// (divided by the job's size first with `prescale`) by the gradient
    /// layer's task, every node's gathered, widened back to `f32` and
    /// summed in node order into place, as the reference folds them.
    fn cross_half_in_place<T: RsElement>(
        &self,
        buf: &B::Buf<T>,
        shard: Range<usize>,
        tail: Range<usize>,
        precision: Precision,
        prescale: bool,
    ) -> Result<()> {
        let b = &self.intra.b;
        let (c, t, m) = (shard.len(), tail.len(), self.nodes.count());
        let len = c + t;
        if len == 0 {
            return Ok(());
        }
        let (half, wide) = (len * 2, len * 4);
        let (send_room, all_room) = (room(half), room(m * half));
        let (_staging, send) = self.staging(send_room + all_room + m * wide)?;
        let all = send + send_room as u64;
        let widened = all + all_room as u64;
        let out = b.addr_at(HERE, buf, shard.start);
        let out_tail = b.addr_at(HERE, buf, tail.start);
        let div = if prescale {
            self.nodes.world() as f32
        } else {
            1.0
        };
        let format = precision.format();
        let task = |kind: TaskKind, src: u64, dst: u64, n: usize, arg: u64| -> Result<()> {
            if n == 0 {
                return Ok(());
            }
            let task = Task {
                kind: kind as u64,
                src,
                dst,
                n: n as u64,
                arg,
                ..Task::default()
            };
            // SAFETY: `src` and `dst` hold `n` elements of what the task
            // reads and writes, in `buf` or the staging held, until the
            // synchronize that ends the step.
            unsafe { b.task(HERE, task) }
        };
        let to = half_arg(format, div);
        task(TaskKind::ToHalf, out, send, c, to)?;
        task(TaskKind::ToHalf, out_tail, send + (c * 2) as u64, t, to)?;
        self.gather_in_place(send, half, all)?;
        for u in 0..m {
            let (from, into) = (all + (u * half) as u64, widened + (u * wide) as u64);
            task(TaskKind::FromHalf, from, into, len, format as u64)?;
        }
        let node =
            |at: usize| -> Vec<u64> { (0..m).map(|u| widened + (u * wide + at) as u64).collect() };
        self.fold_chain::<f32>(out, &node(0), c, Op::Sum)?;
        self.fold_chain::<f32>(out_tail, &node(c * 4), t, Op::Sum)
    }

    /// The sparse step in the rank's own memory, by the gradient layer's
    /// tasks: `g' = owned + residual` (the tail always whole), the shard's
    /// selection (the residual keeping what it leaves), every node's
    /// count, then either `(index, value)` pairs padded to the longest,
    /// gathered and scatter-added from `+0.0` in node order, or, above
    /// `dense_above`, the selection dense, gathered and summed from `+0.0`
    /// in node order: the reference's results, bit for bit. A member's
    /// pairs are its selected shard's, its padding, then its tail's; each
    /// element takes at most one pair from a member, so the order inside a
    /// member's list changes no bit.
    ///
    /// Top-K's lists are as long on every rank of the node, so the node
    /// all-gathers them and each rank rebuilds every shard of `node` (and
    /// the tail) from them: it writes its buffer once, where an all-gather
    /// of the dense shards would read and write it again. Whether it did
    /// so, leaving the node's all-gather nothing to do, comes back with
    /// what was sent.
    fn cross_sparse_in_place<T: RsElement>(
        &self,
        buf: &B::Buf<T>,
        node: Range<usize>,
        (shard, tail): (Range<usize>, Range<usize>),
        (sparsity, dense_above): (Sparsity, f64),
        residual: Option<&mut B::Buf<f32>>,
    ) -> Result<(SparseSent, bool)> {
        let b = &self.intra.b;
        let me = self.intra.local_ranks().start;
        let (c, t, m) = (shard.len(), tail.len(), self.nodes.count());
        let (l, per) = (self.nodes.local_of(self.rank), self.nodes.per_node());
        let node_wide = matches!(sparsity, Sparsity::TopK(_));
        let len = c + t;
        let (nn, tiles) = (c as u64, tiles_for(c as u64));
        // Pairs a sparse exchange may send: beyond the dense bound it goes
        // dense.
        let bound = (dense_above * c as f64).floor().clamp(0.0, c as f64) as usize;
        let cap = (bound + t).min(len);
        let rooms = [
            room(len * 4),
            room(SelectState::BYTES),
            room(tiles as usize * 16),
            room(candidates_for(nn) as usize * 4),
            room(len * 4),
            room(cap * 8),
            (m * len * 4).max(per * m * cap * 8),
        ];
        let mut at = [0usize; 7];
        for i in 1..7 {
            at[i] = at[i - 1] + rooms[i - 1];
        }
        let (mut staging, base) = self.staging(at[6] + rooms[6])?;
        let [work, state, tile_counts, listed, acc, pairs, all] = at.map(|a| base + a as u64);
        let out = b.addr_at(HERE, buf, shard.start);
        let out_tail = b.addr_at(HERE, buf, tail.start);
        let res = residual.map_or(0, |r| b.addr_at(HERE, r, shard.start));
        let task = |t: Task| -> Result<()> {
            // SAFETY: every address is `buf`'s, the residual's or the
            // staging held, each as long as the task's `n` and `tiles`
            // name, until the synchronize that ends the step.
            unsafe { b.task(HERE, t) }
        };
        let feedback = |src: u64, aux: u64, dst: u64, n: usize| Task {
            kind: TaskKind::Feedback as u64,
            src,
            aux,
            dst,
            n: n as u64,
            ..Task::default()
        };
        let fill = |dst: u64, n: usize| Task {
            kind: TaskKind::Fill as u64,
            dst,
            n: n as u64,
            ..Task::default()
        };
        let select = Task {
            src: work,
            state,
            aux: tile_counts,
            n: nn,
            tiles,
            ..Task::default()
        };
        // Top-K's pairs, where they stay sparse, come first in the member's
        // list either way, so their any-order pass joins the selection.
        let any_order = sparse_top_k(sparsity, nn, dense_above).map(|k| Task {
            dst: pairs,
            aux2: res,
            arg: k,
            ..select
        });
        if c > 0 {
            let feedback = feedback(out, res, work, c);
            for t in selection_tasks(select, feedback, sparsity, listed, any_order) {
                task(t)?;
            }
        }
        if t > 0 {
            task(feedback(out_tail, 0, work + (c * 4) as u64, t))?;
        }
        let count = match sparsity {
            _ if c == 0 => 0,
            Sparsity::TopK(f) => Sparsity::k_of(f, nn),
            Sparsity::Threshold(_) => {
                // Host reads wait for no task (tasks hold nothing here).
                self.intra.synchronize()?;
                let word = (state - base) as usize + 8 * SelectState::COUNT_WORD;
                let held = staging.as_ref().expect("made");
                let bytes = self.intra.read(me, held, word..word + 8)?;
                u64::from_le_bytes(bytes.try_into().expect("eight bytes"))
            }
        };
        // Top-K selects as many on every node (their shards are equal):
        // only a threshold's counts need to cross.
        let most = match sparsity {
            Sparsity::TopK(_) => count as usize + t,
            Sparsity::Threshold(_) => {
                let counts = self.gather_across(&[count + t as u64])?;
                counts.iter().copied().max().unwrap_or(0) as usize
            }
        };
        let dense = goes_dense((most - t) as u64, nn, dense_above);
        if dense {
            task(fill(acc, len))?;
            if c > 0 {
                task(Task {
                    kind: TaskKind::WriteSelected as u64,
                    dst: work,
                    aux2: res,
                    arg: u64::MAX,
                    ..select
                })?;
            }
            let bytes = len * 4;
            self.gather_in_place(work, bytes, all)?;
            let from = |at: usize| -> Vec<u64> {
                let node = (0..m).map(|u| all + (u * bytes + at) as u64);
                std::iter::once(acc + at as u64).chain(node).collect()
            };
            self.fold_chain::<f32>(out, &from(0), c, Op::Sum)?;
            self.fold_chain::<f32>(out_tail, &from(c * 4), t, Op::Sum)?;
            return Ok((SparseSent { pairs: 0, dense }, false));
        }
        // Without a tail the sums land in the shard itself; with one, in
        // `acc` first, since the shard and the tail are apart.
        let sums = if t == 0 { out } else { acc };
        if !node_wide {
            task(fill(sums, len))?;
        }
        let written = Task {
            kind: TaskKind::WriteSelected as u64,
            dst: pairs,
            aux2: res,
            arg: (most - t) as u64,
            ..select
        };
        if c > 0 {
            task(written)?;
            if res != 0 {
                task(Task {
                    kind: TaskKind::ResidualUntied as u64,
                    ..written
                })?;
            }
        }
        if t > 0 {
            // The tail's pairs, every element of it, after the padding,
            // written once the queued tasks are done with the staging.
            self.intra.synchronize()?;
            let values: Vec<T> = self.intra.read(me, buf, tail.clone())?;
            let words: Vec<u32> = bytemuck::cast_slice::<T, u32>(&values)
                .iter()
                .enumerate()
                .flat_map(|(i, &v)| [(c + i) as u32, v])
                .collect();
            let held = staging.as_mut().expect("made");
            let at = (pairs - base) as usize + (most - t) * 8;
            self.intra
                .write(me, held, at, bytemuck::cast_slice(&words))?;
        }
        // Node-wide, local rank `l`'s lists from every node are block `l`.
        let lists = m * most * 8;
        let mine = all + if node_wide { l * lists } else { 0 } as u64;
        self.gather_in_place(pairs, most * 8, mine)?;
        // The pairs at `src` in `first..end` of what they index, added to
        // `dst`, which holds that range.
        let scatter = |src: u64, dst: u64, (first, end): (usize, usize)| Task {
            kind: TaskKind::ScatterAdd as u64,
            src,
            dst,
            aux: first as u64,
            n: most as u64,
            arg: end as u64,
            ..Task::default()
        };
        let sent = SparseSent {
            pairs: most as u64,
            dense,
        };
        if node_wide {
            let at = (all - base) as usize;
            let held = staging.as_mut().expect("made");
            self.intra.all_gather(&mut [Region::InPlace {
                buf: held,
                at: at..at + per * lists,
            }])?;
            // Every element of the node's shards and the tail from `+0.0`,
            // each node's pair added in node order, as the reference folds.
            let whole = b.addr_at(HERE, buf, node.start);
            task(fill(whole, per * c))?;
            if t > 0 {
                task(fill(out_tail, t))?;
            }
            for k in 0..per {
                let from = |u: usize| all + (k * lists + u * most * 8) as u64;
                let into = whole + (k * c * 4) as u64;
                for u in 0..m {
                    task(scatter(from(u), into, (0, c)))?;
                    if k == l && t > 0 {
                        // Every rank of the node sends the same tail.
                        task(scatter(from(u), out_tail, (c, len)))?;
                    }
                }
            }
            return Ok((sent, true));
        }
        for u in 0..m {
            task(scatter(all + (u * most * 8) as u64, sums, (0, len)))?;
        }
        if t > 0 {
            self.fold_chain::<f32>(out, &[acc], c, Op::Sum)?;
            self.fold_chain::<f32>(out_tail, &[acc + (c * 4) as u64], t, Op::Sum)?;
        }
        Ok((sent, false))
    }

    /// Queues a copy of `src` of `from` into `dst` from element `at`, in
    /// this rank's memory (a fold of one source); the ranges must not
    /// overlap.
    pub(crate) fn copy_into<T: RsElement>(
        &self,
        dst: &B::Buf<T>,
        at: usize,
        from: &B::Buf<T>,
        src: Range<usize>,
    ) -> Result<()> {
        let b = &self.intra.b;
        let (to, from) = (b.addr_at(HERE, dst, at), b.addr_at(HERE, from, src.start));
        self.fold_chain::<T>(to, &[from], src.len(), Op::Sum)
    }

    /// Queues `op` over `sources` (each `n` elements of `T` in this rank's
    /// memory) folded in the order given into `dst`, `Avg` dividing by the
    /// job's size: one local fold per [`BATCH_RANKS`] sources, each after
    /// the first taking the running result as its first source, so the
    /// fold stays a left fold in source order whatever their number.
    fn fold_chain<T: RsElement>(&self, dst: u64, sources: &[u64], n: usize, op: Op) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let world = self.nodes.world() as u64;
        let mut rest = sources;
        let mut first = true;
        while !rest.is_empty() {
            let take = rest.len().min(BATCH_RANKS - usize::from(!first));
            let (now, later) = rest.split_at(take);
            let inputs: Vec<u64> = (!first)
                .then_some(dst)
                .into_iter()
                .chain(now.iter().copied())
                .collect();
            let step_op = if op == Op::Avg && !later.is_empty() {
                Op::Sum
            } else {
                op
            };
            let size = std::mem::size_of::<T>() as u64;
            let aligned = inputs.iter().chain([&dst]).all(|&a| a % PACK_BYTES == 0);
            let mut args = LocalArgs {
                collective: Collective::AllReduce as u64,
                ranks: inputs.len() as u64,
                blocks: 0,
                total: n as u64,
                segment: n as u64,
                aligned: u64::from(aligned && size <= PACK_BYTES),
                send: [0; BATCH_RANKS],
                recv: [0; BATCH_RANKS],
                divisor: world,
            };
            args.send[..inputs.len()].copy_from_slice(&inputs);
            args.recv[..inputs.len()].fill(dst);
            // SAFETY: every source and `dst` hold `n` elements of `T` in
            // this rank's memory (the caller's buffer or the staging it
            // holds), until the synchronize that ends the step.
            unsafe { self.intra.b.fold(HERE, T::DTYPE, step_op, args)? };
            rest = later;
            first = false;
        }
        Ok(())
    }

    /// Rank `g` gets `op` over every rank of block `g` of `send` (`world`
    /// blocks of `recv`'s length), and waits for it. On one host, the
    /// host's reduce-scatter. Across hosts: for each node `m`, the
    /// blocks of `m`'s ranks (in local order) are reduce-scattered inside
    /// this node, so local rank `l` holds this node's part of the block of
    /// `m`'s rank `l`; the step between nodes then brings every rank each
    /// node's part of its own block, folded in node order. `Avg` sums
    /// throughout and divides once.
    pub fn reduce_scatter<T: RsElement>(
        &self,
        send: &B::Buf<T>,
        recv: &mut B::Buf<T>,
        op: Op,
    ) -> Result<()> {
        self.reduce_scatter_steps(send, recv, op)
            .map_err(|e| self.in_job(e))
    }

    fn reduce_scatter_steps<T: RsElement>(
        &self,
        send: &B::Buf<T>,
        recv: &mut B::Buf<T>,
        op: Op,
    ) -> Result<()> {
        let c = <Comm<B> as Collectives>::len_of(recv);
        let (nodes, per) = (&self.nodes, self.nodes.per_node());
        if c == 0 {
            return Ok(());
        }
        if nodes.is_one_node() {
            let mut r = [Region::OutOfPlace {
                send,
                send_at: 0..per * c,
                recv,
                recv_at: 0..c,
            }];
            self.intra.reduce_scatter(&mut r, op)?;
            return self.intra.synchronize();
        }
        let mut region = Region::OutOfPlace {
            send,
            send_at: 0..c * nodes.world(),
            recv,
            recv_at: 0..c,
        };
        self.reduce_scatter_apart(&mut region, 0..c * nodes.world(), 0..c, op)
    }

    /// Every rank gets every rank's `send` (as long on every rank), in
    /// rank order, in `recv`, and waits for it: on one host the host's
    /// all-gather; across hosts an all-gather inside the node, then of the
    /// node's blocks across nodes.
    pub fn all_gather<T: RsElement>(&self, send: &B::Buf<T>, recv: &mut B::Buf<T>) -> Result<()> {
        self.all_gather_steps(send, recv)
            .map_err(|e| self.in_job(e))
    }

    fn all_gather_steps<T: RsElement>(&self, send: &B::Buf<T>, recv: &mut B::Buf<T>) -> Result<()> {
        let c = <Comm<B> as Collectives>::len_of(send);
        let mut region = Region::OutOfPlace {
            send,
            send_at: 0..c,
            recv,
            recv_at: 0..self.nodes.world() * c,
        };
        self.all_gather_apart(&mut region, 0..c, 0..self.nodes.world() * c)
    }

    /// The all-gather of `region`, whose input (`send_at`) and output
    /// (`recv_at`, every rank's block in rank order) lie apart, in the
    /// rank's memory: the node's all-gather into the head of the output
    /// (its scratch until the end), every node's run gathered into
    /// staging, then each block copied to its rank's place (a fold of one
    /// source, so bit for bit). Nothing crosses the host.
    pub(crate) fn all_gather_apart<T: RsElement>(
        &self,
        region: &mut Region<'_, B::Buf<T>>,
        send_at: Range<usize>,
        recv_at: Range<usize>,
    ) -> Result<()> {
        let (nodes, per, c) = (&self.nodes, self.nodes.per_node(), send_at.len());
        if c == 0 {
            return Ok(());
        }
        let head = recv_at.start..recv_at.start + per * c;
        let node = region.apart(send_at, head.clone());
        let mut node =
            [node.ok_or_else(|| Error::Broken("internal: an in-place all-gather".into()))?];
        self.intra.all_gather(&mut node)?;
        if nodes.is_one_node() {
            return self.intra.synchronize();
        }
        let out = region.output();
        let sz = std::mem::size_of::<T>();
        let bytes = per * c * sz;
        let (_staging, all) = self.staging(nodes.count() * bytes)?;
        let b = &self.intra.b;
        self.gather_in_place(b.addr_at(HERE, out, head.start), bytes, all)?;
        for m in 0..nodes.count() {
            for (l, &g) in nodes.members(m).iter().enumerate() {
                let from = all + ((m * per + l) * c * sz) as u64;
                let to = b.addr_at(HERE, out, recv_at.start + g * c);
                self.fold_chain::<T>(to, &[from], c, Op::Sum)?;
            }
        }
        self.intra.synchronize()
    }

    /// The reduce-scatter of `region` (input and output apart) in the
    /// rank's memory: each node's run of the input (its ranks' blocks in
    /// local order: one range where they are consecutive job ranks, as
    /// torchrun and srun's block distribution place them, else gathered
    /// into device scratch first) reduce-scattered inside this node into
    /// the output, whose result, this node's part of that node's rank's
    /// block, is copied to staging; every node's parts gathered; this
    /// rank's block folded from them in node order (`Avg` sums and divides
    /// once, by the job's size).
    pub(crate) fn reduce_scatter_apart<T: RsElement>(
        &self,
        region: &mut Region<'_, B::Buf<T>>,
        send_at: Range<usize>,
        recv_at: Range<usize>,
        op: Op,
    ) -> Result<()> {
        let inner = if op == Op::Avg { Op::Sum } else { op };
        let (nodes, per, c) = (&self.nodes, self.nodes.per_node(), recv_at.len());
        if c == 0 {
            return Ok(());
        }
        let (count, sz) = (nodes.count(), std::mem::size_of::<T>());
        let bytes = count * c * sz;
        let (_staging, parts) = self.staging(room(bytes) + count * bytes)?;
        let all = parts + room(bytes) as u64;
        let b = &self.intra.b;
        let scratch = if (0..count).all(|m| nodes.is_run(m)) {
            None
        } else {
            Some(b.zeroed::<T>(HERE, per * c)?)
        };
        for m in 0..count {
            let members = nodes.members(m);
            let node = match &scratch {
                Some(run) if !nodes.is_run(m) => {
                    // One scratch for every such node: the queue runs these
                    // copies after the previous node's step has taken its run.
                    for (l, &g) in members.iter().enumerate() {
                        let at = send_at.start + g * c;
                        self.copy_into(run, l * c, region.input(), at..at + c)?;
                    }
                    Some(region.with_input(run, 0..per * c, recv_at.clone()))
                }
                _ => {
                    let first = send_at.start + members[0] * c;
                    region.apart(first..first + per * c, recv_at.clone())
                }
            };
            let mut node =
                [node
                    .ok_or_else(|| Error::Broken("internal: an in-place reduce-scatter".into()))?];
            self.intra.reduce_scatter(&mut node, inner)?;
            let out = node[0].output();
            let to = parts + (m * c * sz) as u64;
            self.fold_chain::<T>(to, &[b.addr_at(HERE, out, recv_at.start)], c, Op::Sum)?;
        }
        self.gather_in_place(parts, bytes, all)?;
        let node = nodes.node_of(self.rank);
        let from: Vec<u64> = (0..count)
            .map(|m| all + ((m * count + node) * c * sz) as u64)
            .collect();
        let out = region.output();
        self.fold_chain::<T>(b.addr_at(HERE, out, recv_at.start), &from, c, op)?;
        self.intra.synchronize()
    }

    /// Every node's `mine` (as long on every node), in node order: the
    /// step between nodes, reporting what the watch heard if it cut the
    /// step short.
    fn gather_across<T: bytemuck::Pod>(&self, mine: &[T]) -> Result<Vec<T>> {
        let mut all = vec![T::zeroed(); mine.len() * self.across.members()];
        let moved = self.across.all_gather(
            bytemuck::cast_slice(mine),
            bytemuck::cast_slice_mut(&mut all),
        );
        moved.map_err(|e| self.cause_of(e))?;
        Ok(all)
    }

    /// `e` with the node communicator's ranks (local indices) named as
    /// the job's ranks, so an error names the ranks the user started.
    fn in_job(&self, e: Error) -> Error {
        let node = self.nodes.members(self.nodes.node_of(self.rank));
        let job = |local: usize| node.get(local).copied().unwrap_or(local);
        match e {
            Error::Timeout(mut t) => {
                t.rank = job(t.rank);
                t.peer = job(t.peer);
                Error::Timeout(t)
            }
            e => e,
        }
    }

    /// The error to report for a failed step between nodes: what the
    /// watch heard, if it hears something within a grace of many of its
    /// polls. A member of this rank's group that gave up because a rank
    /// elsewhere died closes its links before this rank's watch may have
    /// heard of that death, and the death is what every rank must name.
    fn cause_of(&self, e: Error) -> Error {
        let grace = std::time::Instant::now() + CAUSE_GRACE;
        loop {
            if let Some(c) = self.cause.get() {
                return c.clone();
            }
            if std::time::Instant::now() >= grace {
                return e;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Leaves in order, as [`Comm`] does: the node's work ends and it lets go
/// of its peers, then waits for every rank of the job.
impl<B: Backend> Drop for HierComm<B> {
    fn drop(&mut self) {
        if let Some(watch) = self.watch.take() {
            self.intra.leave(watch);
        }
    }
}
