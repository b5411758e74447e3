//! The library's error type.

use ringreduce_kernels::WaitKind;

/// Everything that can go wrong. Input errors are found before anything is
/// launched and leave every buffer untouched; run-time errors (`Timeout`,
/// `Aborted`, `Driver` during a launch) mark the communicator broken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// No CUDA driver could be loaded on this machine.
    #[error(
        "no CUDA driver could be loaded (libcuda.so was not found); \
         use ringreduce::CpuCommunicator to run the CPU execution instead"
    )]
    NoDriver,
    /// A CUDA driver call failed; the text is the driver's.
    #[error("CUDA driver error: {0}")]
    Driver(String),
    /// A GPU older than the architecture the embedded PTX was built for.
    #[error(
        "device {device} is sm_{cc}, older than the sm_{ptx} this build's kernels target; \
         rebuild with RINGREDUCE_PTX_ARCH=sm_{cc} (sm_70 is the oldest supported)"
    )]
    GpuTooOld {
        /// The device ordinal.
        device: usize,
        /// Its compute capability, as 10 * major + minor.
        cc: u32,
        /// The PTX's target, likewise.
        ptx: u32,
    },
    /// A device ordinal beyond the devices present.
    #[error("device {device} does not exist: {count} CUDA device(s) present")]
    NoSuchDevice {
        /// The device ordinal.
        device: usize,
        /// Devices present.
        count: usize,
    },
    /// A communicator of no ranks.
    #[error("a communicator needs at least one rank (k = 0)")]
    ZeroRanks,
    /// More ranks than can be resident on one device at once (their blocks must all run together).
    #[error(
        "{k} ranks cannot all be resident on device {device}: at most {max} blocks of \
         {threads} threads run at once"
    )]
    TooManyRanks {
        /// Ranks of the communicator.
        k: usize,
        /// Blocks that can be resident at once.
        max: usize,
        /// The device ordinal.
        device: usize,
        /// Threads per block.
        threads: usize,
    },
    /// Two ring neighbours on devices that cannot reach each other's memory.
    #[error(
        "ranks {a} and {b} are ring neighbours, but their devices {device_a} and {device_b} \
         cannot access each other's memory both ways (cuDeviceCanAccessPeer); choose another \
         ring order or other devices"
    )]
    NoPeerAccess {
        /// One user rank.
        a: usize,
        /// The other user rank.
        b: usize,
        /// Rank `a`'s device.
        device_a: usize,
        /// Rank `b`'s device.
        device_b: usize,
    },
    /// A ring order that is not a permutation of the user ranks.
    #[error("ring order {order:?} is not a permutation of 0..{k}")]
    BadRingOrder {
        /// The ring order given.
        order: Vec<u32>,
        /// Ranks of the communicator.
        k: usize,
    },
    /// A ring order with more or fewer entries than the communicator has ranks.
    #[error("ring order {order:?} names {} ranks, but the communicator has {k}", order.len())]
    RingOrderLength {
        /// The ring order given.
        order: Vec<u32>,
        /// Ranks of the communicator.
        k: usize,
    },
    /// A staging buffer too small for the ring: see `CommConfig::buffer_bytes`.
    #[error(
        "staging buffer of {have} bytes per channel is too small: each channel needs at \
         least {need} bytes (one unrolled tile plus padding per staging slot)"
    )]
    BufferTooSmall {
        /// Bytes each channel needs at least.
        need: u64,
        /// Bytes configured.
        have: u64,
    },
    /// More channels asked for than the ranks' blocks can keep resident, or
    /// than a rank can run.
    #[error(
        "{channels} channels per rank cannot all be resident on device {device}: at most \
         {max} per rank fit beside the other ranks there"
    )]
    TooManyChannels {
        /// Channels asked for.
        channels: usize,
        /// Channels per rank that fit.
        max: usize,
        /// The device ordinal (0 for the CPU execution).
        device: usize,
    },
    /// A forced direct algorithm whose call does not fit in a half of the
    /// direct staging (see [`crate::CommConfig::direct_bytes`]).
    #[error(
        "a {algorithm} {collective} of this size needs {need} bytes of direct staging; the \
         communicator has {have} per half (use the ring, or a larger direct_bytes)"
    )]
    DirectTooLarge {
        /// The collective's name.
        collective: &'static str,
        /// The algorithm's name.
        algorithm: &'static str,
        /// Bytes of a staging half the call needs.
        need: u64,
        /// Bytes each half has.
        have: u64,
    },
    /// The local algorithm was forced on a communicator that one launch
    /// cannot run whole: ranks on several devices, more than
    /// [`BATCH_RANKS`](ringreduce_kernels::abi::BATCH_RANKS) of them, or a
    /// test hook that keeps a rank out of the launch.
    #[error(
        "the local algorithm needs every one of the {k} ranks in one launch \
         (one device, at most 16 ranks, no rank withheld): use another algorithm"
    )]
    LocalUnavailable {
        /// Ranks of the communicator.
        k: usize,
    },
    /// An algorithm name (from `RINGREDUCE_ALGO` or a caller) that is not
    /// `auto`, `ring`, `one-shot`, `two-shot` or `local`.
    #[error("unknown algorithm {0:?}: use auto, ring, one-shot, two-shot or local")]
    UnknownAlgorithm(String),
    /// [`CommConfig::devices`](crate::CommConfig::devices) does not name
    /// one device per rank.
    #[error("the config lists {devices} devices for {k} ranks: one per rank")]
    DeviceListLength {
        /// Devices listed ([`CommConfig::devices`](crate::CommConfig::devices)).
        devices: usize,
        /// Ranks.
        k: usize,
    },
    /// Not one buffer pair per rank.
    #[error("{got} buffer pairs given for {k} ranks")]
    WrongBufferCount {
        /// How many were given (or found).
        got: usize,
        /// Ranks of the communicator.
        k: usize,
    },
    /// Not one stream per rank.
    #[error("{got} streams given for {k} ranks")]
    WrongStreamCount {
        /// How many were given (or found).
        got: usize,
        /// Ranks of the communicator.
        k: usize,
    },
    /// A `send` buffer of the wrong length for the collective: `k` times
    /// `recv` for a reduce-scatter, `recv` for an all-reduce.
    #[error("rank {rank}: send holds {send_len} elements, but the {collective} needs {expected}")]
    SendLength {
        /// The user rank.
        rank: usize,
        /// Elements in `send`.
        send_len: u64,
        /// What was expected.
        expected: u64,
        /// The collective's name.
        collective: &'static str,
    },
    /// A `recv` buffer of the wrong length for the collective: `k` times
    /// `send` for an all-gather.
    #[error("rank {rank}: recv holds {recv_len} elements, but the {collective} needs {expected}")]
    RecvLength {
        /// The user rank.
        rank: usize,
        /// Elements in `recv`.
        recv_len: u64,
        /// What was expected.
        expected: u64,
        /// The collective's name.
        collective: &'static str,
    },
    /// Ranks whose counts differ: the `recv` length of a reduce-scatter,
    /// the `send` length of an all-gather or all-reduce.
    #[error("rank {rank}: count of {got} elements, but rank 0's is {want}")]
    CountMismatch {
        /// The user rank.
        rank: usize,
        /// How many were given (or found).
        got: u64,
        /// What rank 0 has.
        want: u64,
    },
    /// A buffer on another device than its rank.
    #[error(
        "rank {rank}: {which} buffer is on device {found}, but the rank is on device {expected}"
    )]
    WrongDevice {
        /// The user rank.
        rank: usize,
        /// `"send"` or `"recv"`.
        which: &'static str,
        /// Where it is.
        found: i64,
        /// What was expected.
        expected: usize,
    },
    /// Elements `start..end` asked of a host buffer of `len` elements.
    #[error("elements {start}..{end} are not within a host buffer of {len}")]
    RangeOutOfBounds {
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// The buffer's elements.
        len: usize,
    },
    /// A buffer that does not lie inside one allocation.
    #[error("rank {rank}: {which} buffer [{addr:#x}, +{bytes} B) is not inside one allocation")]
    BufferOutOfBounds {
        /// The user rank.
        rank: usize,
        /// `"send"` or `"recv"`.
        which: &'static str,
        /// The buffer's address.
        addr: u64,
        /// The buffer's length in bytes.
        bytes: u64,
    },
    /// A buffer address that is not a multiple of the element size.
    #[error("rank {rank}: {which} address {addr:#x} is not a multiple of the element size {size}")]
    Misaligned {
        /// The user rank.
        rank: usize,
        /// `"send"` or `"recv"`.
        which: &'static str,
        /// The buffer's address.
        addr: u64,
        /// Bytes per element.
        size: u64,
    },
    /// A rank's `send` and `recv` that overlap but are not the in-place
    /// layout: `recv = send + rank * count` for a reduce-scatter,
    /// `send = recv + rank * count` for an all-gather, `send == recv` for an
    /// all-reduce.
    #[error("rank {rank}: recv overlaps send but is not the {collective}'s in-place layout")]
    InPlaceMisplaced {
        /// The user rank.
        rank: usize,
        /// The collective's name.
        collective: &'static str,
    },
    /// An in-place buffer whose length is not `k` equal blocks.
    #[error(
        "rank {rank}: the in-place buffer holds {len} elements, which is not {k} blocks of \
         equal length (in place, block {rank} of that buffer is the rank's own)"
    )]
    InPlaceLength {
        /// The user rank.
        rank: usize,
        /// Elements in the buffer.
        len: u64,
        /// Ranks of the communicator.
        k: usize,
    },
    /// Buffers of two ranks that overlap where one of them is written.
    #[error("rank {a}'s {a_which} buffer overlaps rank {b}'s {b_which} buffer")]
    Overlap {
        /// One user rank.
        a: usize,
        /// Which of rank `a`'s buffers.
        a_which: &'static str,
        /// The other user rank.
        b: usize,
        /// Which of rank `b`'s buffers.
        b_which: &'static str,
    },
    /// A stream on another device than its rank.
    #[error("rank {rank}: its stream belongs to device {found}, the rank is on device {expected}")]
    StreamDevice {
        /// The user rank.
        rank: usize,
        /// Where it is.
        found: usize,
        /// What was expected.
        expected: usize,
    },
    /// Two ranks on one device that run in different launches (more than
    /// `BATCH_RANKS` ranks there) given the same stream: the launches would
    /// serialise and deadlock.
    #[error(
        "ranks {a} and {b} share one stream but run in different launches on one device; \
         give them different streams"
    )]
    SharedStream {
        /// One user rank.
        a: usize,
        /// The other user rank.
        b: usize,
    },
    /// The legacy default stream, which serialises with every other
    /// stream, for a rank whose device runs the collective in several
    /// launches.
    #[error(
        "rank {rank}: the legacy default stream serialises with every other stream, which \
         would deadlock the several launches on its device; use CudaContext::new_stream"
    )]
    DefaultStream {
        /// The user rank.
        rank: usize,
    },
    /// Sizes whose byte count overflows 64 bits.
    #[error("the byte size of {k} ranks x {recvcount} elements x {size} B overflows 64 bits")]
    Overflow {
        /// Ranks of the communicator.
        k: usize,
        /// Elements per block.
        recvcount: u64,
        /// Bytes per element.
        size: u64,
    },
    /// A sparse threshold that is NaN or negative.
    #[error("sparse threshold {0} is NaN or negative")]
    BadThreshold(f32),
    /// A top-K fraction outside (0, 1].
    #[error("top-K fraction {0} is not in (0, 1]")]
    BadFraction(f64),
    /// A residual whose length is not its tensor's.
    #[error("rank {rank}: residual of {got} elements for a tensor of {want}")]
    ResidualLength {
        /// The user rank.
        rank: usize,
        /// The residual's length.
        got: u64,
        /// The tensor's.
        want: u64,
    },
    /// A half-precision all-reduce of a tensor that is not `f32`.
    #[error("half-precision all-reduce needs f32 tensors, not {0}")]
    HalfNeedsF32(&'static str),
    /// A sparse tensor too long for the 32-bit indices of its pairs.
    #[error("sparse all-reduce of {0} elements: at most 2^32 - 1 are indexed")]
    SparseTooLong(u64),
    /// A tensor index past the list of a [`BucketedGrads`](crate::grad::BucketedGrads).
    #[error("tensor {tensor} does not exist: the list has {tensors}")]
    NoSuchTensor {
        /// The index given.
        tensor: usize,
        /// Tensors in the list.
        tensors: usize,
    },
    /// A tensor marked ready twice in one streaming step.
    #[error("tensor {0} was already marked ready in this step")]
    AlreadyReady(usize),
    /// A rank gave up waiting; boxed so that `Result<T, Error>` stays small.
    #[error("{0}")]
    Timeout(Box<TimeoutInfo>),
    /// `abort()` was called. `seen` says where a kernel first noticed it;
    /// `None` when no running collective did (it came before the enqueue,
    /// or after the work had finished).
    #[error("the communicator was aborted{}", abort_site(.seen))]
    Aborted {
        /// Where a kernel first noticed the abort, if one did.
        seen: Option<AbortSeen>,
    },
    /// A launcher's variable is missing or malformed (see
    /// [`Launch`](crate::bootstrap::Launch)).
    #[error("environment variable {var}: {problem}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// None of the launchers' variables is set.
    #[error(
        "no launcher's variables: run under torchrun (RANK, WORLD_SIZE), mpirun \
         (OMPI_COMM_WORLD_RANK, _SIZE) or srun (SLURM_PROCID, SLURM_NTASKS)"
    )]
    NoLauncher,
    /// Bytes or text that are no [`UniqueId`](crate::bootstrap::UniqueId).
    #[error("not a ringreduce unique id: {0}")]
    BadUniqueId(String),
    /// A socket of the bootstrap failed: the text says which and how.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// Rank 0's address answered with something that is not this
    /// protocol, or of another version.
    #[error("rendezvous: {0}")]
    Rendezvous(String),
    /// Rank 0 at this address belongs to another job (a second job on the
    /// same port).
    #[error(
        "the rendezvous address belongs to another job: give each job its own port or unique id"
    )]
    ForeignJob,
    /// A rank of the job was started with another world size.
    #[error("rank {rank} was started for {theirs} ranks, rank 0 for {ours}")]
    WorldMismatch {
        /// The rank that disagrees.
        rank: usize,
        /// Its world size.
        theirs: usize,
        /// Rank 0's.
        ours: usize,
    },
    /// Two processes claim one rank.
    #[error("two processes claim rank {rank}")]
    DuplicateRank {
        /// The rank.
        rank: usize,
    },
    /// A rank outside `0..world`.
    #[error("rank {rank} is not below the world size {world}")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// The world size.
        world: usize,
    },
    /// These ranks never arrived at the rendezvous.
    #[error("ranks {ranks:?} never arrived at the rendezvous ({waited:?})")]
    RanksMissing {
        /// The missing ranks.
        ranks: Vec<usize>,
        /// How long the rendezvous waited.
        waited: std::time::Duration,
    },
    /// A peer process of the job died (its link closed without a
    /// goodbye): every pending and later call of every survivor returns
    /// this; the communicator is done.
    #[error("rank {rank} of the job is lost (its process ended or its link broke); create a new communicator")]
    PeerLost {
        /// The lost rank.
        rank: usize,
    },
    /// A peer process called `abort()`, or (across hosts) gave up after a
    /// call of its own was cut short, which its own error names; like
    /// [`Error::Aborted`], every pending and later call returns this.
    #[error("rank {rank} of the job aborted the communicator (or gave up after its own error)")]
    PeerAborted {
        /// The rank that aborted.
        rank: usize,
    },
    /// A rank of the job runs on another host: a flat communicator's
    /// ranks share one host's memory; a job across hosts is a
    /// [`HierComm`](crate::HierComm).
    #[error(
        "rank {rank} runs on host {theirs:?}, rank 0 on {ours:?}: a flat communicator's ranks \
         share one host; a job across hosts runs as HierComm"
    )]
    OtherHost {
        /// The rank on another host.
        rank: usize,
        /// Its host.
        theirs: String,
        /// Rank 0's host.
        ours: String,
    },
    /// Ranks of one job were created with settings that must agree (the
    /// text says which).
    #[error("rank {rank} was created with {what} {theirs}, rank 0 with {ours}; every rank needs the same")]
    JobMismatch {
        /// The rank that disagrees.
        rank: usize,
        /// The setting.
        what: &'static str,
        /// Its value.
        theirs: String,
        /// Rank 0's.
        ours: String,
    },
    /// Shared memory between the processes of a host could not be made or
    /// mapped (the text says which, and why).
    #[error("shared memory: {0}")]
    SharedMemory(String),
    /// A rank that lives in another process of the job: its buffers are
    /// that process's to pass.
    #[error("rank {rank} lives in another process of the job; this one holds ranks {local:?}")]
    RemoteRank {
        /// The rank asked for.
        rank: usize,
        /// The ranks this process holds.
        local: std::ops::Range<usize>,
    },
    /// A communicator across processes with the watchdog off: a dead peer
    /// would leave this rank's kernels waiting forever.
    #[error(
        "a communicator across processes needs the watchdog (CommConfig::watchdog(true)): it is \
         what stops a kernel waiting for a dead peer"
    )]
    NeedsWatchdog,
    /// The hosts of a job hold different numbers of ranks: a hierarchical
    /// collective pairs the ranks of equal local index across hosts, so
    /// every host needs as many.
    #[error("the job's hosts hold different numbers of ranks ({}); every host needs as many", .sizes.iter().map(|(h, n)| format!("{h}: {n}")).collect::<Vec<_>>().join(", "))]
    UnevenNodes {
        /// Each host and its ranks, in node order.
        sizes: Vec<(String, usize)>,
    },
    /// libnccl could not be loaded, or is not a usable NCCL (the `nccl`
    /// feature loads it at run time): the text says what was tried and how
    /// to get it.
    #[error("NCCL is not available: {0}")]
    NcclUnavailable(String),
    /// An NCCL call failed: NCCL's result code and its text.
    #[error("{call} failed: NCCL error {code}: {text}")]
    Nccl {
        /// The NCCL function.
        call: &'static str,
        /// Its `ncclResult_t`.
        code: i32,
        /// `ncclGetErrorString`, and the communicator's last error.
        text: String,
    },
    /// A network step (between nodes, or NCCL's) made no progress within
    /// the communicator's timeout; the communicator is done.
    #[error("{what} made no progress within {waited:?}")]
    NoProgress {
        /// The step, in words (naming the silent peer where known).
        what: String,
        /// The timeout it waited.
        waited: std::time::Duration,
    },
    /// A communicator that is one process of a job, asked to be made as
    /// all its ranks at once: the text names its constructor.
    #[error("this communicator is one process of a job: make it with {0}")]
    JobOnly(&'static str),
    /// Any call after an earlier error broke the communicator; the text is that error.
    #[error("the communicator is broken by an earlier error ({0}); create a new one")]
    Broken(String),
}

impl Error {
    /// What every later call returns once `self` broke a communicator:
    /// [`Error::Broken`] with its text, never wrapped twice.
    pub(crate) fn broken_by(&self) -> Error {
        match self {
            Error::Broken(_) => self.clone(),
            other => Error::Broken(other.to_string()),
        }
    }
}

/// Where a kernel first noticed an abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortSeen {
    /// The user rank.
    pub rank: usize,
    /// The chunk it was in.
    pub chunk: u64,
    /// The ring step it was at.
    pub step: u64,
}

fn abort_site(seen: &Option<AbortSeen>) -> String {
    match seen {
        Some(s) => format!(
            " (first seen by rank {} at chunk {}, step {})",
            s.rank, s.chunk, s.step
        ),
        None => String::new(),
    }
}

/// Which rank timed out, where in the protocol, and on what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutInfo {
    /// The user rank that gave up.
    pub rank: usize,
    /// Its position in the ring.
    pub ring_pos: usize,
    /// The channel (block) that gave up.
    pub channel: usize,
    /// The chunk it was in.
    pub chunk: u64,
    /// The ring step it was at.
    pub step: u64,
    /// The subchunk it was at.
    pub sub: u64,
    /// Which flag it waited on.
    pub waiting_for: WaitKind,
    /// That flag, in words.
    pub what: &'static str,
    /// The user rank that should have written the flag.
    pub peer: usize,
    /// The flag value it waited for.
    pub expected: u64,
    /// The value it last saw.
    pub seen: u64,
    /// The peer's (chunk, step, subchunk) whose signal never came.
    pub signal: Option<(u64, u64, u64)>,
    /// How long it waited.
    pub waited_ms: u64,
}

impl std::fmt::Display for TimeoutInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.waiting_for == WaitKind::PeerReady {
            return write!(
                f,
                "rank {} (channel {}) timed out after {} ms in phase {} of a direct collective, \
                 waiting for {} from rank {} (flag expected {}, saw {})",
                self.rank,
                self.channel,
                self.waited_ms,
                self.step,
                self.what,
                self.peer,
                self.expected,
                self.seen
            );
        }
        write!(
            f,
            "rank {} (ring position {}, channel {}) timed out after {} ms at chunk {}, step {}, \
             subchunk {}, waiting for {} from rank {}",
            self.rank,
            self.ring_pos,
            self.channel,
            self.waited_ms,
            self.chunk,
            self.step,
            self.sub,
            self.what,
            self.peer
        )?;
        if let Some((c, s, b)) = self.signal {
            write!(f, " for its chunk {c}, step {s}, subchunk {b}")?;
        }
        write!(f, " (flag expected {}, saw {})", self.expected, self.seen)
    }
}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Driver(e.to_string())
    }
}
