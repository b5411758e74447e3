//! What a backend does for the front end: create its memory, execute a
//! plan, read its status records, wait, and raise its abort word; and, for
//! [`Collectives`](crate::Collectives), move data in and out of its
//! buffers.

use crate::config::CommConfig;
use crate::element::RsElement;
use crate::error::{Error, Result};
use crate::job::{Offer, Table};
use crate::memo::PlanMemo;
use crate::planner::Plan;
use crate::region::Region;
use crate::state::CommState;
use ringreduce_kernels::abi::LocalArgs;
use ringreduce_kernels::grad::abi::Task;
use ringreduce_kernels::{Collective, DataType, Op, StatusRecord};
use std::ops::Range;
use std::sync::Mutex;

/// A communicator over `k` ranks on backend `B`. The GPU's is
/// [`Communicator`](crate::Communicator), the CPU execution's
/// [`CpuCommunicator`](crate::CpuCommunicator); code generic over `B` (or
/// over [`Collectives`](crate::Collectives)) runs on either.
///
/// ```
/// use ringreduce::{Backend, Comm, CommConfig, CpuBackend};
/// fn make<B: Backend>(k: usize) -> ringreduce::Result<Comm<B>> {
///     // Any backend, from one shape of arguments.
///     Comm::<B>::create(k, CommConfig::default().channels(2))
/// }
/// let comm = make::<CpuBackend>(3)?;
/// assert_eq!((comm.k(), comm.max_channels()), (3, 2));
/// # Ok::<(), ringreduce::Error>(())
/// ```
// Defined here, beside what a backend must do, so that the front end's
// code (`front/mod.rs`) and this trait need not import each other.
pub struct Comm<B: Engine> {
    pub(crate) b: B,
    /// The peer watch, when the ranks are processes of a job; the drop
    /// leaves the job through it before the backend frees its memory
    /// (`front/job.rs`).
    pub(crate) job: Option<crate::bootstrap::Watch>,
}

/// What the watch calls when a peer dies or aborts: the backend records
/// the error for every pending and later call, and raises its kernels'
/// abort word.
pub type Alarm = Box<dyn Fn(Error) + Send + 'static>;

/// The backend's side of [`Comm`] (sealed: it lives in a private module).
pub trait Engine: Sized {
    /// Producer lanes of a block, which size the staging slots.
    const THREADS: u64;
    /// Whether its ranks live on GPUs (so NCCL can link its nodes).
    const ON_DEVICE: bool = false;
    /// What a call hands the backend besides its plan (streams, or the
    /// holds that keep buffers alive while queued).
    type Call<'a>;
    /// A buffer of `T` on one rank.
    type Buf<T: RsElement>;

    /// `k` ranks set up by `config`.
    fn create(k: usize, config: CommConfig) -> Result<Self>;
    /// A rank of a job before it meets its peers: its own memory, made
    /// for them to map.
    type Joining: Send;
    /// Rank `rank`'s memory on `device`, exported, and what it offers the
    /// peers of job `job`, with its device's UUID (zeros for none).
    fn prepare(
        rank: usize,
        device: usize,
        config: &CommConfig,
        job: u64,
    ) -> Result<(Self::Joining, Offer, [u8; 16])>;
    /// The device a process with local rank `local` drives when the
    /// caller names none ([`Comm::from_env`]).
    fn device_of_local_rank(local: usize) -> usize {
        local
    }
    /// The rank of `table`, its peers' memory mapped.
    fn join(joining: Self::Joining, table: &Table, config: CommConfig) -> Result<Self>;
    /// Every peer has mapped this rank's memory: what only served to find
    /// it (a name) can go.
    fn mapped(&mut self) {}
    /// The CUDA context of this process's rank, where NCCL links it to the
    /// other nodes: `None` for a backend without a device (the CPU
    /// execution, whose step between nodes is the test stand-in).
    fn device_context(&self) -> Option<std::sync::Arc<cudarc::driver::CudaContext>> {
        None
    }
    /// The stream this process's rank runs its work on, which a queued
    /// step between nodes waits for and is waited for by: `None` without a
    /// device.
    fn device_stream(&self) -> Option<std::sync::Arc<cudarc::driver::CudaStream>> {
        None
    }
    /// What a lost or aborting peer sets off (see [`Alarm`]).
    fn alarm(&self) -> Alarm;
    /// As a rank of a job leaves: its work ends, and it lets go of its
    /// peers' memory, before it waits for them to let go of its own.
    fn release_peers(&self) {
        let _ = self.wait_idle();
    }
    /// A peer may still map this rank's memory after the leaving's wait:
    /// keep it rather than free it under that peer.
    fn abandon(&mut self) {}
    /// The ring, the configuration, and whether the communicator is broken.
    fn state(&self) -> &CommState;
    /// Each local rank's connection address, as the planner takes them.
    fn conns(&self) -> &[u64];
    /// The recent calls' plans.
    fn memo(&self) -> &Mutex<PlanMemo>;
    /// Every local rank's every channel's status record, in user-rank
    /// order.
    fn status_records(&self) -> Vec<StatusRecord>;
    /// Whether no record can hold an error, found without decoding them
    /// (the check every call makes); `false` when unsure.
    fn quiet(&self) -> bool {
        false
    }
    /// Enqueues `plan`; a failure that leaves some ranks running breaks the
    /// communicator.
    fn execute(&self, plan: &Plan, dtype: DataType, op: Op, call: Self::Call<'_>) -> Result<()>;
    /// Waits for everything queued on every rank.
    fn wait_idle(&self) -> Result<()>;
    /// Raises the word every kernel's waits poll.
    fn raise_abort(&self);

    /// A new buffer on rank `rank` holding `data` (here and below, `rank`
    /// counts the local ranks: the front end checked and translated it).
    fn upload<T: RsElement>(&self, rank: usize, data: &[T]) -> Result<Self::Buf<T>>;
    /// A new buffer of `n` zeros on rank `rank`, made where the buffers
    /// live: scratch that needs no data from the host.
    fn zeroed<T: RsElement>(&self, rank: usize, n: usize) -> Result<Self::Buf<T>> {
        self.upload(rank, &vec![T::zeroed(); n])
    }
    /// Elements of a buffer.
    fn len_of<T: RsElement>(buf: &Self::Buf<T>) -> usize;
    /// Elements `at` of a rank's buffer (the front end checked the range),
    /// once the work queued on it is done.
    fn read<T: RsElement>(
        &self,
        rank: usize,
        buf: &Self::Buf<T>,
        at: Range<usize>,
    ) -> Result<Vec<T>>;
    /// Overwrites a rank's buffer from element `at` on (the front end
    /// checked the range), after the work queued on it.
    fn write<T: RsElement>(
        &self,
        rank: usize,
        buf: &mut Self::Buf<T>,
        at: usize,
        data: &[T],
    ) -> Result<()>;
    /// The address of element `at` of local rank `rank`'s `buf`, in the
    /// memory its kernels read: the device's on a GPU, the host's on the
    /// CPU execution.
    fn addr_at<T: RsElement>(&self, rank: usize, buf: &Self::Buf<T>, at: usize) -> u64;
    /// Queues on local rank `rank`'s own queue, in order with its
    /// collectives, the local engine's all-reduce of `args`' sources (its
    /// `ranks` inputs folded in the order given, `Avg` dividing by its
    /// `divisor`) with the entry of `dtype` and `op`; the backend sets the
    /// grid (`args.blocks`). The hierarchical step between nodes folds its
    /// one rank per node with it, so that node order is the local
    /// engine's rank order.
    ///
    /// # Safety
    /// Every address in `args` must be valid on that rank for `args.total`
    /// elements of `dtype` until the queue has run the fold.
    unsafe fn fold(&self, rank: usize, dtype: DataType, op: Op, args: LocalArgs) -> Result<()>;
    /// Queues the gradient layer's `task` on local rank `rank`'s own
    /// queue, in order with its collectives: the hierarchical step's half
    /// precision runs on it.
    ///
    /// # Safety
    /// Every address in `task` must be valid on that rank for what the
    /// task does, until the queue has run it.
    unsafe fn task(&self, rank: usize, task: Task) -> Result<()>;
    /// Collective `c` over regions (checked against their buffers), on the
    /// communicator's own queues.
    fn regions<T: RsElement>(
        comm: &Comm<Self>,
        c: Collective,
        regions: &mut [Region<'_, Self::Buf<T>>],
        op: Op,
    ) -> Result<()>;
}

/// The collective entry [`Engine::fold`] runs for `dtype` and `op`: the
/// local all-reduce's.
pub(crate) fn fold_entry(dtype: DataType, op: Op) -> Result<usize> {
    ringreduce_kernels::catalogue::collective_index(
        ringreduce_kernels::catalogue::Kind::Local,
        Collective::AllReduce,
        dtype,
        op,
    )
    .ok_or_else(|| Error::Broken(format!("internal: no local entry for {dtype:?} {op:?}")))
}
