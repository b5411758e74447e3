//! What the ring algorithm needs from the machine it runs on.

/// How far apart a flag's writer and its reader are, which decides how wide
/// the fences that order data around the flag must reach. Virtual ranks on
/// one GPU only need the GPU's scope; peers on other GPUs (or the host) need
/// the system's, which costs more on every signal.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    #[default]
    System = 0,
    Gpu = 1,
}

impl Scope {
    /// The scope a kernel argument word names; anything unknown is the
    /// widest, which is always correct.
    #[inline(always)]
    pub fn from_u64(v: u64) -> Self {
        if v == Scope::Gpu as u64 {
            Scope::Gpu
        } else {
            Scope::System
        }
    }
}

/// The few execution primitives the algorithm and its copy/reduce loops use.
/// The GPU maps them to PTX ([`crate::arch::nvptx`]); the CPU execution maps
/// them to OS threads, barriers and atomics.
///
/// # Safety
/// Implementations must give the memory-order guarantees documented per
/// method; the flag protocol is only correct with them.
pub unsafe trait Device {
    /// This lane's index in the block: `0..THREADS` are producers, `THREADS`
    /// is the signalling thread.
    fn thread_idx(&self) -> u64;
    /// Barrier among the producer lanes only (the GPU's `bar 1, THREADS`),
    /// returning the OR of every lane's `pred`. Orders memory among them.
    fn producer_barrier_or(&self, pred: bool) -> bool;
    /// Barrier among all lanes, signaller included (the GPU's `bar 0`),
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
    /// A load with acquire semantics at `scope` (`ld.acquire`): the flag
    /// poll itself orders the data reads after it, with no full fence (which
    /// would first wait for every store this thread still has in flight).
    ///
    /// # Safety
    /// `p` must be valid and 8-byte aligned.
    unsafe fn load_acquire(&self, p: *const u64, scope: Scope) -> u64;
    /// A full fence at `scope` (`fence.acq_rel`): before a flag store it
    /// releases everything the block stored before the preceding barrier.
    fn fence(&self, scope: Scope);
    /// A monotonic clock in nanoseconds.
    fn now_ns(&self) -> u64;
    /// Called between polls of a flag.
    fn spin_hint(&self) {}
}
