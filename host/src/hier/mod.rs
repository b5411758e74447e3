//! A rank of a job whose ranks span hosts: our kernels among the ranks of
//! its host, and the step between nodes among the ranks of its local
//! index, folded in node order. The schedule and its fold order are in
//! `docs/beyond-one-node.md`.

mod all_reduce;
mod collectives;
mod compress;
mod scatter_gather;
mod steps;
mod wire;

use crate::across::Across;
use crate::bootstrap::{UniqueId, Watch, POLL};
use crate::config::CommConfig;
use crate::error::{Error, Result};
use crate::front::{Backend, Comm, Joined};
use crate::grad::BEGUN_AT_ONCE;
use crate::nodes::Nodes;
use std::sync::{Arc, Mutex, OnceLock};
pub(crate) use wire::Step;

/// How long a failed step between nodes waits for the watch to name the
/// rank that went (see [`HierComm::cause_of`]): many of the watch's polls.
const CAUSE_GRACE: std::time::Duration = std::time::Duration::from_millis(1000);

/// How long a rank whose own wait timed out lets the others' waits run
/// before it makes the job give up (see [`HierComm::failed`]): the ranks
/// waiting on the stalled rank itself started their clocks at about the
/// same moment, and their errors are the ones that name it.
const TIMEOUT_GRACE: std::time::Duration = std::time::Duration::from_millis(400);

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
    /// What stopped this rank first: a peer lost or aborted (as the watch
    /// heard it), this rank's `abort()`, or a call of its own cut short. A
    /// call cut short reports it, and every later call is refused with it
    /// ([`HierComm::guarded`]).
    cause: Arc<OnceLock<Error>>,
    /// The step between nodes' staging in this rank's memory, grown on
    /// demand and kept: every node's owned elements (and, with a tail,
    /// the rank's own, gathered into one range to send). Two slots, so
    /// that one bucket's step may run while the next one's is queued.
    staging: [Mutex<Option<B::Buf<u8>>>; BEGUN_AT_ONCE],
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

    /// Makes every rank of the job give up: their pending and later calls
    /// end with [`Error::PeerAborted`] naming this rank, this rank's with
    /// [`Error::Aborted`].
    pub fn abort(&self) {
        let _ = self.cause.set(Error::Aborted { seen: None });
        self.give_up();
    }

    /// Ends this rank's work (its node's kernels, its step between nodes)
    /// and tells every rank of the job through the watch.
    fn give_up(&self) {
        self.intra.abort();
        self.across.abort();
        if let Some(w) = &self.watch {
            w.abort();
        }
    }

    /// Runs one of this rank's calls, `f`, which queues or runs work:
    /// refused with nothing run once something stopped this rank
    /// ([`usable`](Self::usable)), its error named in the job's ranks and
    /// handled by [`failed`](Self::failed).
    pub(super) fn guarded<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.usable()?;
        f().map_err(|e| self.failed(e))
    }

    /// `Ok` unless something stopped this rank: a peer lost or aborted, or
    /// its own abort, as they are; a call of its own cut short, as
    /// [`Error::broken_by`] it.
    fn usable(&self) -> Result<()> {
        match self.cause.get() {
            None => Ok(()),
            Some(
                e @ (Error::PeerLost { .. } | Error::PeerAborted { .. } | Error::Aborted { .. }),
            ) => Err(e.clone()),
            Some(e) => Err(e.broken_by()),
        }
    }

    /// `e`, named in the job's ranks. Where it cut a call short (a
    /// timeout, a peer lost or aborted, a failed step between nodes), the
    /// call reports what stopped this rank first. If that is `e`, this
    /// rank gives up and makes every rank of the job give up, as
    /// [`abort`](Self::abort) does (after [`TIMEOUT_GRACE`] for a timeout
    /// of its own): their calls end within the watch's poll instead of
    /// each waiting out a timeout of its own behind it, and no later call
    /// reads a step left half done.
    pub(super) fn failed(&self, e: Error) -> Error {
        let e = self.in_job(e);
        if !cuts_short(&e) {
            return e;
        }
        match self.cause.set(e.clone()) {
            Ok(()) => {
                if matches!(e, Error::Timeout(_) | Error::NoProgress { .. }) {
                    // This rank may be waiting on a rank that itself waits
                    // on the stalled one: a moment more lets the ranks that
                    // wait on it directly time out too, and name it.
                    std::thread::sleep(TIMEOUT_GRACE);
                }
                self.give_up();
                e
            }
            Err(_) => self.cause.get().cloned().unwrap_or(e),
        }
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
    /// A step that made no progress for the timeout is reported at once:
    /// no link closed, so no death is on its way to explain it.
    fn cause_of(&self, e: Error) -> Error {
        if matches!(e, Error::NoProgress { .. }) {
            return self.cause.get().cloned().unwrap_or(e);
        }
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

/// Whether `e` ends a call that may have run part of its work (input
/// errors are found before anything runs).
fn cuts_short(e: &Error) -> bool {
    matches!(
        e,
        Error::Timeout(_)
            | Error::Aborted { .. }
            | Error::PeerLost { .. }
            | Error::PeerAborted { .. }
            | Error::NoProgress { .. }
            | Error::Nccl { .. }
            | Error::Driver(_)
            | Error::Broken(_)
    )
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
