//! The CPU execution's [`Device`]: one OS thread per lane, barriers with an
//! OR-reduction or a non-waiting arrival, and flags as atomics. Each
//! producer lane has its own release barrier per parity, as each GPU warp
//! polls the release count on its own.

use crate::{Device, Handoff, Scope, SliceWork, RELEASE_SLOTS, SLICE_WORDS};
use std::boxed::Box;
use std::string::String;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;
use std::vec::Vec;

/// A communicator's trap. A lane that panics ends every grid of the
/// communicator, as a trap ends a GPU's launch: the lanes waiting at a
/// barrier or polling a flag unwind instead of waiting for it forever, and
/// the communicator is broken with the panic's message.
#[derive(Default)]
pub struct Trap {
    set: AtomicBool,
    what: Mutex<Option<String>>,
}

/// The unwinding of a lane that stopped because another one trapped (no
/// panic message of its own).
pub struct Trapped;

impl Trap {
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Records the first panic's message and sets the trap.
    pub fn raise(&self, what: String) {
        let mut w = self.what.lock().unwrap_or_else(|e| e.into_inner());
        if w.is_none() {
            *w = Some(what);
        }
        self.set.store(true, Ordering::Release);
    }

    /// The first panic's message, once set.
    pub fn what(&self) -> Option<String> {
        self.what.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Unwinds this lane if the trap is set.
    fn check(&self) {
        if self.is_set() {
            unwind_trapped();
        }
    }

    /// Waits on `cv` while `waiting` holds, unwinding if the trap is set
    /// first (see [`BlockSync::wake`]).
    fn wait_while<'m, S>(
        &self,
        cv: &Condvar,
        mut s: MutexGuard<'m, S>,
        mut waiting: impl FnMut(&S) -> bool,
    ) -> MutexGuard<'m, S> {
        while waiting(&s) {
            if self.is_set() {
                drop(s);
                unwind_trapped();
            }
            s = cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s
    }
}

/// Ends a lane because another one trapped, without the panic hook's
/// message (the lane that trapped has printed its own).
fn unwind_trapped() -> ! {
    std::panic::resume_unwind(Box::new(Trapped))
}

/// A reusable barrier for `n` threads that also ORs a flag across them, like
/// PTX's `bar.red.or.pred`. The mutex gives the barrier its memory ordering:
/// everything a thread did before arriving happens-before everything any
/// thread does after leaving.
pub struct OrBarrier {
    n: usize,
    state: Mutex<BarrierState>,
    cv: Condvar,
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    acc: bool,
    result: bool,
}

impl OrBarrier {
    pub fn new(n: usize) -> Self {
        OrBarrier {
            n,
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                acc: false,
                result: false,
            }),
            cv: Condvar::new(),
        }
    }

    pub fn wait_or(&self, pred: bool, trap: &Trap) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.acc |= pred;
        s.arrived += 1;
        if s.arrived == self.n {
            s.result = s.acc;
            s.acc = false;
            s.arrived = 0;
            s.generation = s.generation.wrapping_add(1);
            self.cv.notify_all();
            return s.result;
        }
        // Nobody can finish the next generation (and overwrite `result`)
        // before this thread arrives at it, so reading it after waking is safe.
        let gen = s.generation;
        trap.wait_while(&self.cv, s, |s| s.generation == gen).result
    }

    /// Wakes every waiter, to see the trap.
    fn wake(&self) {
        let _s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }
}

/// A reusable barrier for `n` arrivals where some arrive without waiting,
/// like PTX's `barrier.arrive` beside `barrier.sync`. The mutex orders what
/// an arriving thread did before everything a waiter does after leaving.
pub struct ArriveBarrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl ArriveBarrier {
    pub fn new(n: usize) -> Self {
        ArriveBarrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
        }
    }

    /// Counts this thread in; returns the generation it arrived in and
    /// whether it completed that generation.
    fn count_in(&self) -> (std::sync::MutexGuard<'_, (usize, u64)>, u64, bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let gen = s.1;
        s.0 += 1;
        let last = s.0 == self.n;
        if last {
            *s = (0, gen.wrapping_add(1));
            self.cv.notify_all();
        }
        (s, gen, last)
    }

    pub fn arrive(&self) {
        drop(self.count_in());
    }

    pub fn wait(&self, trap: &Trap) {
        let (s, gen, last) = self.count_in();
        if !last {
            drop(trap.wait_while(&self.cv, s, |s| s.1 == gen));
        }
    }

    /// Wakes every waiter, to see the trap.
    fn wake(&self) {
        let _s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }
}

/// What the lanes of one block share besides memory: the barriers, the
/// block's `failed` word and the released slices' work.
pub struct BlockSync {
    block: OrBarrier,
    done: [ArriveBarrier; 2],
    /// Per producer lane, per parity: that lane and the control lane.
    release: Vec<[ArriveBarrier; 2]>,
    failed: AtomicBool,
    slices: [[AtomicU64; SLICE_WORDS]; RELEASE_SLOTS],
}

impl BlockSync {
    pub fn new(producers: usize) -> Self {
        BlockSync {
            block: OrBarrier::new(producers + 1),
            done: [0, 1].map(|_| ArriveBarrier::new(producers + 1)),
            release: (0..producers)
                .map(|_| [0, 1].map(|_| ArriveBarrier::new(2)))
                .collect(),
            failed: AtomicBool::new(false),
            slices: Default::default(),
        }
    }

    /// Wakes every lane waiting at one of the block's barriers, so that it
    /// sees a trap raised after it began to wait.
    pub fn wake(&self) {
        self.block.wake();
        for b in self.done.iter().chain(self.release.iter().flatten()) {
            b.wake();
        }
    }
}

/// One lane of one block (channel) of a rank.
pub struct Lane<'a> {
    pub tid: u64,
    pub block: u64,
    pub sync: &'a BlockSync,
    pub epoch: Instant,
    pub trap: &'a Trap,
}

// SAFETY: the barriers order memory through their mutex.
unsafe impl Handoff for Lane<'_> {
    fn release(&self, slice: u64, failed: bool, work: SliceWork) {
        let parity = slice & 1;
        // The barriers' mutexes order these stores before the released reads.
        let slot = &self.sync.slices[slice as usize % RELEASE_SLOTS];
        for (w, v) in slot.iter().zip(work.to_words()) {
            w.store(v, Ordering::Relaxed);
        }
        self.sync.failed.store(failed, Ordering::Relaxed);
        for r in &self.sync.release {
            r[parity as usize].arrive();
        }
    }
    fn await_release(&self, slice: u64) -> Option<SliceWork> {
        let parity = slice & 1;
        self.sync.release[self.tid as usize][parity as usize].wait(self.trap);
        if self.sync.failed.load(Ordering::Relaxed) {
            return None;
        }
        let slot = &self.sync.slices[slice as usize % RELEASE_SLOTS];
        Some(SliceWork::from_words(
            slot.each_ref().map(|w| w.load(Ordering::Relaxed)),
        ))
    }
    fn arrive_done(&self, parity: u64) {
        self.sync.done[parity as usize].arrive()
    }
    fn await_done(&self, parity: u64) {
        self.sync.done[parity as usize].wait(self.trap)
    }
}

// SAFETY: flags are accessed as atomics; `load_acquire` is an acquire load;
// `fence` is a SeqCst fence, which releases before a relaxed flag store; the
// barriers order memory through their mutex.
unsafe impl Device for Lane<'_> {
    fn thread_idx(&self) -> u64 {
        self.tid
    }
    fn channel(&self) -> u64 {
        self.block
    }
    fn block_barrier_or(&self, pred: bool) -> bool {
        self.sync.block.wait_or(pred, self.trap)
    }
    unsafe fn load_volatile(&self, p: *const u64) -> u64 {
        (*(p as *const AtomicU64)).load(Ordering::Relaxed)
    }
    unsafe fn store_volatile(&self, p: *mut u64, v: u64) {
        (*(p as *const AtomicU64)).store(v, Ordering::Relaxed)
    }
    /// Checks the GPU's 16-byte rule, which x86 would not: a misaligned
    /// vector access faults on the GPU, so the CPU tests must catch it.
    unsafe fn load_pack(&self, p: *const u8) -> [u32; 4] {
        assert_pack_aligned(p);
        (p as *const [u32; 4]).read()
    }
    unsafe fn store_pack(&self, p: *mut u8, v: [u32; 4]) {
        assert_pack_aligned(p);
        (p as *mut [u32; 4]).write(v)
    }
    unsafe fn load_acquire(&self, p: *const u64, _scope: Scope) -> u64 {
        (*(p as *const AtomicU64)).load(Ordering::Acquire)
    }
    fn fence(&self, _scope: Scope) {
        fence(Ordering::SeqCst)
    }
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn spin_hint(&self) {
        // A flag another rank will never raise once it trapped.
        self.trap.check();
        // The CPU execution runs many more lanes than cores; a spinning lane
        // must let the lane it waits for run.
        std::thread::yield_now()
    }
}

/// Panics on a pack access that is not 16-byte aligned (see `load_pack`).
#[inline(always)]
fn assert_pack_aligned(p: *const u8) {
    assert!(
        (p as usize).is_multiple_of(16),
        "a 16-byte pack access at {p:p} is not 16-byte aligned (it would fault on a GPU)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn or_barrier_reduces_and_reuses() {
        let b = Arc::new(OrBarrier::new(4));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    (0..100)
                        .map(|round| b.wait_or(round % 7 == 3 && t == round % 4, &Trap::default()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            let got = h.join().unwrap();
            for (round, g) in got.into_iter().enumerate() {
                assert_eq!(g, round % 7 == 3, "round {round}");
            }
        }
    }

    #[test]
    fn arrive_barrier_releases_only_when_all_counted() {
        use std::sync::atomic::AtomicUsize;
        let b = Arc::new(ArriveBarrier::new(3));
        let passed = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (b, passed) = (b.clone(), passed.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        b.wait(&Trap::default());
                        passed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for round in 1..=50 {
            // Two waiters alone cannot complete a generation of three.
            std::thread::sleep(std::time::Duration::from_millis(1));
            assert!(passed.load(Ordering::SeqCst) <= 2 * (round - 1));
            b.arrive();
            while passed.load(Ordering::SeqCst) < 2 * round {
                std::thread::yield_now();
            }
        }
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(passed.load(Ordering::SeqCst), 100);
    }

    /// Two of a block barrier's three lanes wait for a third that never
    /// comes (it panicked): raising the trap and waking the block unwinds
    /// both, whether they began to wait before the trap or after.
    #[test]
    fn a_raised_trap_unwinds_the_waiters() {
        use std::panic::{catch_unwind, AssertUnwindSafe};
        let sync = Arc::new(BlockSync::new(2));
        let trap = Arc::new(Trap::default());
        let waiters: Vec<_> = (0..2)
            .map(|i| {
                let (sync, trap) = (sync.clone(), trap.clone());
                std::thread::spawn(move || {
                    if i == 1 {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    catch_unwind(AssertUnwindSafe(|| sync.block.wait_or(false, &trap)))
                        .map_err(|p| p.is::<Trapped>())
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(10));
        trap.raise("boom".into());
        trap.raise("later".into());
        sync.wake();
        for w in waiters {
            assert_eq!(w.join().unwrap(), Err(true));
        }
        assert_eq!(trap.what().as_deref(), Some("boom"));
    }
}
