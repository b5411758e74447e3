//! What the ring algorithm needs from the machine it runs on.

use crate::abi::SELECT_BINS;

/// How far a flag store or acquire must reach. Ranks that share one GPU
/// need only its L2 ([`Scope::Gpu`]); a peer on another GPU or the host needs
/// [`Scope::Sys`]. The narrower scope is cheaper because the control lane's
/// fence before each signal is on the path that releases the producers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Gpu,
    Sys,
}

/// One released slice, as the control lane hands it to the producers:
/// the step primitive ([`Prim::index`](crate::schedule::Prim::index)), its
/// four addresses (see [`Slot`](crate::primitives::Slot)) and its length
/// in elements. The control lane works these out, so that a producer keeps
/// only its loop counter in registers across a slice: with the engine's
/// whole state live there, ptxas issued ten of a round's sixteen loads and
/// waited before the rest (`bench/NOTES.md`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceWork {
    pub prim: u64,
    pub incoming: u64,
    pub own: u64,
    pub next: u64,
    pub out: u64,
    pub len: u64,
}

/// Words of a [`SliceWork`].
pub const SLICE_WORDS: usize = 6;
const _: () = assert!(core::mem::size_of::<SliceWork>() == 8 * SLICE_WORDS);

impl SliceWork {
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    pub fn to_words(self) -> [u64; SLICE_WORDS] {
        [
            self.prim,
            self.incoming,
            self.own,
            self.next,
            self.out,
            self.len,
        ]
    }

    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    pub fn from_words([prim, incoming, own, next, out, len]: [u64; SLICE_WORDS]) -> Self {
        SliceWork {
            prim,
            incoming,
            own,
            next,
            out,
            len,
        }
    }
}

/// Released slices whose [`SliceWork`] a block holds at once, slice `i` in
/// slot `i % RELEASE_SLOTS`: the control lane releases slice `i` only after
/// every producer reported slice `i - 2` done, and a producer reads a
/// slice's work before it reports the slice done, so two slots never
/// overwrite work still to be read.
pub const RELEASE_SLOTS: usize = 2;

/// The block-internal handoff between the control lane and the producer
/// lanes: the protocol verbs of the ring engine, apart from the machine's
/// intrinsics ([`Device`]). The GPU maps them to shared words, `mbarrier`
/// phases (a polled count before sm_80) and named barriers; the CPU
/// execution to barriers of OS threads.
///
/// # Safety
/// Implementations must give the memory-order guarantees documented per
/// method; the engine is only correct with them.
pub unsafe trait Handoff {
    /// Control lane: publishes the block's `failed` bit and the slice's
    /// `work`, then lets the producers into slice number `slice` (counted
    /// from 0 per collective), without waiting for them. Orders the control
    /// lane's earlier memory accesses (its flag acquire) before the released
    /// producers' later ones.
    fn release(&self, slice: u64, failed: bool, work: SliceWork);
    /// Control lane, before the block barrier that starts the slices:
    /// nothing is released yet (shared memory starts undefined).
    fn reset_release(&self) {}
    /// Producer: waits until the control lane released slice `slice`;
    /// returns the slice's work, or `None` when the `failed` bit published
    /// then is set. A producer never waits for another producer here.
    fn await_release(&self, slice: u64) -> Option<SliceWork>;
    /// Producer: reports that its part of the slice of `parity` is done,
    /// without waiting.
    fn arrive_done(&self, parity: u64);
    /// Control lane: waits until every producer reported the slice of
    /// `parity` done. Orders their stores before the control lane's fence.
    fn await_done(&self, parity: u64);
}

/// The few execution primitives the engine and its copy/reduce loops use.
/// The GPU maps them to PTX (`arch::nvptx`); the CPU execution maps
/// them to OS threads and atomics.
///
/// # Safety
/// Implementations must give the memory-order guarantees documented per
/// method; the flag protocol is only correct with them.
pub unsafe trait Device {
    /// This lane's index in the block: `0..THREADS` are producers, `THREADS`
    /// is the control lane (every flag wait and signal).
    fn thread_idx(&self) -> u64;
    /// [`thread_idx`](Self::thread_idx) read anew, for the branches after
    /// a block barrier: Rust's inline assembly is not `convergent`, so with
    /// one value LLVM threads the control lane's branch through the barrier
    /// and gives it a copy of its own, which compute-sanitizer's synccheck
    /// reports as divergent threads.
    fn thread_idx_fresh(&self) -> u64 {
        self.thread_idx()
    }
    /// The channel this block runs (its place in its rank's share of the
    /// grid).
    fn channel(&self) -> u64;
    /// Barrier among all lanes, control lane included (the GPU's `bar 0`),
    /// returning the OR of every lane's `pred`. Orders memory among them.
    fn block_barrier_or(&self, pred: bool) -> bool;
    /// A load that always reaches memory another agent may write.
    ///
    /// # Safety
    /// `p` must be valid and 8-byte aligned.
    unsafe fn load_volatile(&self, p: *const u64) -> u64;
    /// A store that always reaches memory another agent may read.
    ///
    /// # Safety
    /// `p` must be valid and 8-byte aligned.
    unsafe fn store_volatile(&self, p: *mut u64, v: u64);
    /// One 16-byte load, as a single vector access.
    ///
    /// # Safety
    /// `p` must be valid and 16-byte aligned.
    unsafe fn load_pack(&self, p: *const u8) -> [u32; 4];
    /// One 16-byte store, as a single vector access.
    ///
    /// # Safety
    /// `p` must be valid and 16-byte aligned.
    unsafe fn store_pack(&self, p: *mut u8, v: [u32; 4]);
    /// A load with acquire semantics at `scope` (`ld.acquire.gpu/.sys`): the
    /// flag poll itself orders the data reads after it. A full fence there
    /// would first wait for every store the polling thread still has in
    /// flight, on the producers' critical path.
    ///
    /// # Safety
    /// `p` must be valid and 8-byte aligned.
    unsafe fn load_acquire(&self, p: *const u64, scope: Scope) -> u64;
    /// A full fence at `scope` (`fence.acq_rel.gpu/.sys`): before a flag
    /// store it releases everything the block stored before the preceding
    /// barrier to every agent within that scope.
    fn fence(&self, scope: Scope);
    /// A hint to bring the line at `p` into the L2 cache; no effect on
    /// results.
    ///
    /// # Safety
    /// `p` should point into an allocation.
    unsafe fn prefetch_l2(&self, _p: *const u8) {}
    /// A monotonic clock in nanoseconds.
    fn now_ns(&self) -> u64;
    /// Called between polls of a flag.
    fn spin_hint(&self) {}
}

/// What the gradient layer's data-parallel tasks need from the machine:
/// a lane among all lanes of the launch, and a histogram private to the
/// lane's block, so that hot bins cost a block-local add and not one
/// contended global atomic per element. The GPU maps a lane to a thread
/// of the grid and the private histogram to shared memory; the CPU
/// execution runs the lanes one after another, each its own block.
///
/// # Safety
/// `hist_flush` must add every count of the block exactly once, and the
/// adds to the global bins must not lose updates.
pub unsafe trait Lanes {
    /// This lane, in `0..lanes()`.
    fn lane(&self) -> u64;
    /// Lanes of the launch.
    fn lanes(&self) -> u64;
    /// One 16-byte load as a single vector access (a plain read off the
    /// GPU): the compiler splits a 16-byte copy into two 8-byte ones.
    ///
    /// # Safety
    /// `p` must be valid and 16-byte aligned.
    /// This default (the CPU's) checks the alignment, which the GPU would
    /// fault on and x86 would not.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    unsafe fn load_pack(&self, p: *const u8) -> [u32; 4] {
        assert!(
            (p as usize).is_multiple_of(16),
            "misaligned 16-byte pack load"
        );
        (p as *const [u32; 4]).read()
    }
    /// One 16-byte store as a single vector access.
    ///
    /// # Safety
    /// `p` must be valid and 16-byte aligned.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    unsafe fn store_pack(&self, p: *mut u8, v: [u32; 4]) {
        assert!(
            (p as usize).is_multiple_of(16),
            "misaligned 16-byte pack store"
        );
        (p as *mut [u32; 4]).write(v)
    }
    /// Zeroes the block's private histogram of [`SELECT_BINS`] bins.
    ///
    /// # Safety
    /// Every lane of the launch calls `hist_begin`, then `hist_count` the
    /// same number of times as every other lane (the GPU aggregates a
    /// warp's counts), then `hist_flush`, with nothing else in between.
    unsafe fn hist_begin(&self);
    /// Counts one element in bin `bin`, or nothing for [`NO_BIN`].
    ///
    /// # Safety
    /// As for [`hist_begin`](Self::hist_begin); `bin < SELECT_BINS` or
    /// `NO_BIN`.
    unsafe fn hist_count(&self, bin: u32);
    /// Adds the block's private histogram to the global bins at `global`.
    ///
    /// # Safety
    /// As for [`hist_begin`](Self::hist_begin); `global` must hold
    /// [`SELECT_BINS`] 4-byte-aligned counts.
    unsafe fn hist_flush(&self, global: *mut u32);
}

/// The bin of an element a histogram does not count.
pub const NO_BIN: u32 = u32::MAX;

/// A lane of an execution whose lanes run one after another on one thread
/// (the CPU execution, and tests): each lane is its own block, its private
/// histogram counts in a cell and is added to the global bins at the flush.
pub struct SeqLanes {
    lane: u64,
    lanes: u64,
    hist: core::cell::UnsafeCell<[u32; SELECT_BINS]>,
}

impl SeqLanes {
    /// Lane `lane` of `lanes`.
    pub fn new(lane: u64, lanes: u64) -> Self {
        SeqLanes {
            lane,
            lanes,
            hist: core::cell::UnsafeCell::new([0; SELECT_BINS]),
        }
    }
}

// SAFETY: one thread runs the lanes one after another, so each flush adds
// its block's counts alone; no reference into the cell outlives a call.
unsafe impl Lanes for SeqLanes {
    fn lane(&self) -> u64 {
        self.lane
    }
    fn lanes(&self) -> u64 {
        self.lanes
    }
    unsafe fn hist_begin(&self) {
        *self.hist.get() = [0; SELECT_BINS];
    }
    unsafe fn hist_count(&self, bin: u32) {
        if let Some(c) = (*self.hist.get()).get_mut(bin as usize) {
            *c += 1;
        }
    }
    unsafe fn hist_flush(&self, global: *mut u32) {
        for (b, &c) in (*self.hist.get()).iter().enumerate() {
            let p = global.add(b);
            p.write(p.read() + c);
        }
    }
}
