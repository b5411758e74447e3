//! What the gradient layer's tasks need from the machine they run on: its
//! own trait, apart from the collectives' [`Device`](crate::device::Device),
//! since the two share nothing.

use super::abi::SELECT_BINS;

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
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
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
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
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
    /// Reserves `want` slots of a list whose length is the counter at
    /// `count`, and returns the first: the GPU sums its warp's wants and
    /// adds them with one atomic, where one per lane would queue a whole
    /// pass's worth on one address.
    ///
    /// # Safety
    /// Every lane of a warp calls it together (a uniform loop), as for
    /// [`hist_count`](Self::hist_count); `count` must be valid and 8-byte
    /// aligned, and touched by nothing else during the task.
    unsafe fn reserve(&self, count: *mut u64, want: u32) -> u64;
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
    unsafe fn reserve(&self, count: *mut u64, want: u32) -> u64 {
        let first = count.read();
        count.write(first + want as u64);
        first
    }
}
