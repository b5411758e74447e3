//! What the ring algorithm needs from the machine it runs on.

use crate::types::Scope;

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
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
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
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
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
