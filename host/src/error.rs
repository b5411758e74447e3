//! The library's error type.

use ringreduce_kernels::WaitKind;

/// Everything that can go wrong. Input errors are found before anything is
/// launched and leave every buffer untouched; run-time errors (`Timeout`,
/// `Aborted`, `Driver` during a launch) mark the communicator broken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error(
        "no CUDA driver could be loaded (libcuda.so was not found); \
         use ringreduce::CpuCommunicator to run the CPU execution instead"
    )]
    NoDriver,
    #[error("CUDA driver error: {0}")]
    Driver(String),
    #[error("device {device} does not exist: {count} CUDA device(s) present")]
    NoSuchDevice { device: usize, count: usize },
    #[error("a communicator needs at least one rank (k = 0)")]
    ZeroRanks,
    #[error(
        "{k} ranks cannot all be resident on device {device}: at most {max} blocks of \
         {threads} threads run at once"
    )]
    TooManyRanks {
        k: usize,
        max: usize,
        device: usize,
        threads: usize,
    },
    #[error(
        "ranks {a} and {b} are ring neighbours, but their devices {device_a} and {device_b} \
         cannot access each other's memory both ways (cuDeviceCanAccessPeer); choose another \
         ring order or other devices"
    )]
    NoPeerAccess {
        a: usize,
        b: usize,
        device_a: usize,
        device_b: usize,
    },
    #[error("ring order {order:?} is not a permutation of 0..{k}")]
    BadRingOrder { order: Vec<u32>, k: usize },
    #[error("ring order {order:?} names {} ranks, but the communicator has {k}", order.len())]
    RingOrderLength { order: Vec<u32>, k: usize },
    #[error(
        "staging buffer of {have} bytes is too small for {k} ranks: each rank needs at \
         least {need} bytes (one unrolled slice plus padding per block and subchunk)"
    )]
    BufferTooSmall { k: usize, need: u64, have: u64 },
    #[error("{got} buffer pairs given for {k} ranks")]
    WrongBufferCount { got: usize, k: usize },
    #[error("{got} streams given for {k} ranks")]
    WrongStreamCount { got: usize, k: usize },
    #[error("rank {rank}: send holds {send_len} elements, but k * recv.len() = {expected}")]
    SendLength {
        rank: usize,
        send_len: u64,
        expected: u64,
    },
    #[error("rank {rank}: recv holds {got} elements, rank 0's holds {want}")]
    CountMismatch { rank: usize, got: u64, want: u64 },
    #[error(
        "rank {rank}: {which} buffer is on device {found}, but the rank is on device {expected}"
    )]
    WrongDevice {
        rank: usize,
        which: &'static str,
        found: i64,
        expected: usize,
    },
    #[error("rank {rank}: {which} buffer [{addr:#x}, +{bytes} B) is not inside one allocation")]
    BufferOutOfBounds {
        rank: usize,
        which: &'static str,
        addr: u64,
        bytes: u64,
    },
    #[error("rank {rank}: {which} address {addr:#x} is not a multiple of the element size {size}")]
    Misaligned {
        rank: usize,
        which: &'static str,
        addr: u64,
        size: u64,
    },
    #[error(
        "rank {rank}: recv overlaps send but is not the in-place block \
         send + {rank} * recvcount"
    )]
    InPlaceMisplaced { rank: usize },
    #[error(
        "rank {rank}: the in-place buffer holds {len} elements, which is not {k} blocks of \
         equal length (in place, recv is block {rank} of that buffer)"
    )]
    InPlaceLength { rank: usize, len: u64, k: usize },
    #[error("rank {a}'s {a_which} buffer overlaps rank {b}'s {b_which} buffer")]
    Overlap {
        a: usize,
        a_which: &'static str,
        b: usize,
        b_which: &'static str,
    },
    #[error("rank {rank}: its stream belongs to device {found}, the rank is on device {expected}")]
    StreamDevice {
        rank: usize,
        found: usize,
        expected: usize,
    },
    #[error("ranks {a} and {b} share one stream on one device; each rank needs its own stream")]
    SharedStream { a: usize, b: usize },
    #[error(
        "rank {rank}: the legacy default stream serialises with every other stream, which \
         would deadlock ranks that share a device; use CudaContext::new_stream"
    )]
    DefaultStream { rank: usize },
    #[error("the byte size of {k} ranks x {recvcount} elements x {size} B overflows 64 bits")]
    Overflow { k: usize, recvcount: u64, size: u64 },
    /// A rank gave up waiting; boxed so that `Result<T, Error>` stays small.
    #[error("{0}")]
    Timeout(Box<TimeoutInfo>),
    /// `abort()` was called. `seen` says where a kernel first noticed it;
    /// `None` when no running collective did (it came before the enqueue,
    /// or after the work had finished).
    #[error("the communicator was aborted{}", abort_site(.seen))]
    Aborted { seen: Option<AbortSeen> },
    #[error("the communicator is broken by an earlier error ({0}); create a new one")]
    Broken(String),
}

/// Where a kernel first noticed an abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortSeen {
    pub rank: usize,
    pub chunk: u64,
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
    pub rank: usize,
    pub ring_pos: usize,
    pub chunk: u64,
    pub step: u64,
    pub sub: u64,
    pub waiting_for: WaitKind,
    pub what: &'static str,
    /// The user rank that should have written the flag.
    pub peer: usize,
    pub expected: u64,
    pub seen: u64,
    /// The peer's (chunk, step, subchunk) whose signal never came.
    pub signal: Option<(u64, u64, u64)>,
    pub waited_ms: u64,
}

impl std::fmt::Display for TimeoutInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} (ring position {}) timed out after {} ms at chunk {}, step {}, subchunk {}, \
             waiting for {} from rank {}",
            self.rank,
            self.ring_pos,
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

pub type Result<T> = std::result::Result<T, Error>;

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Driver(e.to_string())
    }
}
