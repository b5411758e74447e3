//! The CPU execution's [`Device`]: one OS thread per lane, barriers with an
//! OR-reduction, and flags as atomics.

use ringreduce_kernels::Device;
use std::sync::atomic::{fence, AtomicU64, Ordering};
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

/// One lane of a rank's block.
pub struct Lane<'a> {
    pub tid: u64,
    pub producers: &'a OrBarrier,
    pub block: &'a OrBarrier,
    pub epoch: Instant,
}

// SAFETY: flags are accessed as atomics; `load_acquire` is an acquire load;
// `fence` is a SeqCst fence, which releases before a relaxed flag store; the
// barriers order memory through their mutex.
unsafe impl Device for Lane<'_> {
    fn thread_idx(&self) -> u64 {
        self.tid
    }
    fn producer_barrier_or(&self, pred: bool) -> bool {
        self.producers.wait_or(pred)
    }
    fn block_barrier_or(&self, pred: bool) -> bool {
        self.block.wait_or(pred)
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
    unsafe fn load_acquire(&self, p: *const u64) -> u64 {
        (*(p as *const AtomicU64)).load(Ordering::Acquire)
    }
    fn fence(&self) {
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
}
