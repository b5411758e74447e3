//! The CPU execution's [`Device`]: one OS thread per lane, barriers with an
//! OR-reduction or a non-waiting arrival, and flags as atomics. Each
//! producer lane has its own release barrier per parity, as each GPU warp
//! polls the release count on its own.

use ringreduce_kernels::{Device, Handoff, Scope};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

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

    pub fn wait_or(&self, pred: bool) -> bool {
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
        while s.generation == gen {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.result
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

    pub fn wait(&self) {
        let (mut s, gen, last) = self.count_in();
        if !last {
            while s.1 == gen {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

/// What the lanes of one block share besides memory: the barriers and the
/// block's `failed` word.
pub struct BlockSync {
    block: OrBarrier,
    done: [ArriveBarrier; 2],
    /// Per producer lane, per parity: that lane and the control lane.
    release: Vec<[ArriveBarrier; 2]>,
    failed: AtomicBool,
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
        }
    }
}

/// One lane of one block (channel) of a rank.
pub struct Lane<'a> {
    pub tid: u64,
    pub block: u64,
    pub sync: &'a BlockSync,
    pub epoch: Instant,
}

// SAFETY: the barriers order memory through their mutex.
unsafe impl Handoff for Lane<'_> {
    fn release(&self, slice: u64, failed: bool) {
        let parity = slice & 1;
        // The barriers' mutexes order this store before the released reads.
        self.sync.failed.store(failed, Ordering::Relaxed);
        for r in &self.sync.release {
            r[parity as usize].arrive();
        }
    }
    fn await_release(&self, slice: u64) -> bool {
        let parity = slice & 1;
        self.sync.release[self.tid as usize][parity as usize].wait();
        self.sync.failed.load(Ordering::Relaxed)
    }
    fn arrive_done(&self, parity: u64) {
        self.sync.done[parity as usize].arrive()
    }
    fn await_done(&self, parity: u64) {
        self.sync.done[parity as usize].wait()
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
        self.sync.block.wait_or(pred)
    }
    unsafe fn load_volatile(&self, p: *const u64) -> u64 {
        (*(p as *const AtomicU64)).load(Ordering::Relaxed)
    }
    unsafe fn store_volatile(&self, p: *mut u64, v: u64) {
        (*(p as *const AtomicU64)).store(v, Ordering::Relaxed)
    }
    unsafe fn load_pack(&self, p: *const u8) -> [u32; 4] {
        (p as *const [u32; 4]).read()
    }
    unsafe fn store_pack(&self, p: *mut u8, v: [u32; 4]) {
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
        // The CPU execution runs many more lanes than cores; a spinning lane
        // must let the lane it waits for run.
        std::thread::yield_now()
    }
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
                        .map(|round| b.wait_or(round % 7 == 3 && t == round % 4))
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
                        b.wait();
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
}
