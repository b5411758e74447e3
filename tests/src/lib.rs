//! The harness the integration tests share: deterministic inputs for every
//! type, checked collectives over the library's `Collectives` trait (so the
//! CPU execution and the GPU run the same cases), and a case runner that
//! compares against the sequential reference bit for bit.

pub mod cases;
pub mod checked;
pub mod data;
pub mod grad;
pub mod graph;
pub mod hier_cases;
pub mod procs;
pub mod scenarios;
pub mod soak;

pub use cases::{run_case, Case, Outcome};
pub use data::with_type;

/// A fixed non-identity ring order of `k` ranks: reversed, then rotated.
pub fn shuffled(k: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..k as u32).rev().collect();
    v.rotate_left(1);
    v
}

/// The GPU to test on, or why there is none.
pub fn gpu_device() -> Result<usize, String> {
    match ringreduce::gpu::device_count() {
        Ok(n) if n > 0 => Ok(0),
        Ok(_) => Err("the CUDA driver reports no device".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A GPU test: it gets the device to run on.
pub type GpuTest = (&'static str, fn(usize));

/// The harness of the GPU test binaries. With a GPU every test runs; without
/// one each is reported as *ignored* and the reason is printed, so that the
/// summary never counts an unrun GPU test as passed. Asked to run ignored
/// tests anyway, they fail with that reason.
pub fn run_gpu_tests(tests: &[GpuTest]) -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let dev = gpu_device();
    if let Err(why) = &dev {
        println!("GPU tests: skipped: {why}");
    }
    let trials = tests
        .iter()
        .map(|&(name, test)| match &dev {
            Ok(d) => {
                let d = *d;
                libtest_mimic::Trial::test(name, move || {
                    let t = std::time::Instant::now();
                    test(d);
                    // Each test's wall time, for planning device time.
                    eprintln!("{name}: {:.1} s", t.elapsed().as_secs_f64());
                    Ok(())
                })
            }
            Err(why) => {
                let why = format!("no GPU: {why}");
                libtest_mimic::Trial::test(name, move || Err(why.into())).with_ignored_flag(true)
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// Where the GPU tests put `k` ranks, starting at device `first`: one rank
/// per GPU round robin when the machine has several (the peer-to-peer
/// path, virtual ranks too once `k` exceeds the GPUs), else `k` virtual
/// ranks on `first`. The same tests thus serve one GPU and many.
pub fn placement(first: usize, k: usize) -> Vec<usize> {
    let count = ringreduce::gpu::device_count().unwrap_or(1).max(1);
    (0..k).map(|u| (first + u) % count).collect()
}

/// A communicator over [`placement`]`(first, k)`, holding its blocks in
/// [`BlockPool`] while it lives.
pub fn gpu_comm(
    first: usize,
    k: usize,
    config: ringreduce::CommConfig,
) -> ringreduce::Result<Leased> {
    gpu_comm_on(&placement(first, k), config)
}

/// A communicator with user rank `u` on `devices[u]`, holding its blocks in
/// [`BlockPool`] while it lives.
pub fn gpu_comm_on(
    devices: &[usize],
    config: ringreduce::CommConfig,
) -> ringreduce::Result<Leased> {
    let k = devices.len();
    let comm = ringreduce::Communicator::with_placement(devices, config)?;
    let blocks = (k * comm.max_channels()).min(comm.resident_blocks());
    let pool = BLOCK_POOL
        .get_or_init(|| BlockPool::new(comm.resident_blocks(), std::time::Duration::from_secs(20)));
    pool.take(blocks);
    Ok(Leased { comm, blocks })
}

/// The GPU's resident blocks, shared by the tests that run at once (the
/// harness runs several threads): a communicator whose blocks could not all
/// be resident beside another test's would stall until its timeout, so a
/// test waits for room before it creates one. Requests are served as room
/// frees, for the most tests at once; one that has waited `patience`
/// closes the pool to new requests until it is served, so small leases
/// taken and given back around a large one cannot starve it (a thread that
/// already holds blocks is never held back: the waiter may need its blocks).
pub struct BlockPool {
    total: usize,
    patience: std::time::Duration,
    state: std::sync::Mutex<PoolState>,
    freed: std::sync::Condvar,
}

struct PoolState {
    free: usize,
    /// Requests so far (each request's id).
    requests: u64,
    /// The request that has waited its patience, if any.
    starving: Option<u64>,
}

static BLOCK_POOL: std::sync::OnceLock<BlockPool> = std::sync::OnceLock::new();

thread_local! {
    /// Blocks this thread holds.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl BlockPool {
    fn new(blocks: usize, patience: std::time::Duration) -> Self {
        BlockPool {
            total: blocks,
            patience,
            state: std::sync::Mutex::new(PoolState {
                free: blocks,
                requests: 0,
                starving: None,
            }),
            freed: std::sync::Condvar::new(),
        }
    }

    fn take(&self, blocks: usize) {
        let held = HELD.get();
        // A test that holds blocks while it asks for more than the rest
        // would wait for itself: say so at once.
        assert!(
            held + blocks <= self.total,
            "this test holds {held} GPU blocks and asks for {blocks} more of {}",
            self.total
        );
        // Bounded all the same: give up loudly rather than hang.
        let limit = std::time::Duration::from_secs(600);
        let start = std::time::Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let me = st.requests;
        st.requests += 1;
        loop {
            let my_turn = held > 0 || st.starving.is_none_or(|s| s == me);
            if my_turn && st.free >= blocks {
                break;
            }
            let waited = start.elapsed();
            if st.starving.is_none() && waited >= self.patience {
                st.starving = Some(me);
            }
            let left = limit.checked_sub(waited).unwrap_or_else(|| {
                panic!(
                    "waited {limit:?} for {blocks} GPU blocks ({} free)",
                    st.free
                )
            });
            // Wake at the patience mark too, to close the pool in time.
            let nap = if st.starving.is_none() {
                left.min(self.patience.saturating_sub(waited))
            } else {
                left
            };
            st = self
                .freed
                .wait_timeout(st, nap)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        st.free -= blocks;
        if st.starving == Some(me) {
            st.starving = None;
            self.freed.notify_all();
        }
        HELD.set(held + blocks);
    }

    fn give(&self, blocks: usize) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).free += blocks;
        HELD.set(HELD.get().saturating_sub(blocks));
        self.freed.notify_all();
    }
}

/// A GPU communicator and the blocks it holds in the pool.
pub struct Leased {
    comm: ringreduce::Communicator,
    blocks: usize,
}

impl std::ops::Deref for Leased {
    type Target = ringreduce::Communicator;
    fn deref(&self) -> &ringreduce::Communicator {
        &self.comm
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        if let Some(p) = BLOCK_POOL.get() {
            p.give(self.blocks);
        }
    }
}

#[cfg(test)]
mod pool_tests {
    use super::BlockPool;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    #[test]
    fn a_holder_asking_past_the_total_fails_at_once() {
        let pool = Arc::new(BlockPool::new(4, Duration::from_millis(50)));
        let p = pool.clone();
        let t0 = Instant::now();
        let r = std::thread::spawn(move || {
            p.take(3);
            p.take(2);
        })
        .join();
        assert!(r.is_err());
        assert!(t0.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn small_requests_share_until_a_large_one_has_waited() {
        let pool = Arc::new(BlockPool::new(4, Duration::from_millis(1500)));
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |name: &'static str, blocks: usize| {
            let (p, o) = (pool.clone(), order.clone());
            std::thread::spawn(move || {
                p.take(blocks);
                o.lock().unwrap().push(name);
                std::thread::sleep(Duration::from_millis(20));
                p.give(blocks);
            })
        };
        pool.take(2);
        let big = spawn("big", 4);
        std::thread::sleep(Duration::from_millis(50));
        // Before the big request's patience runs out, a small one that
        // fits is served at once.
        spawn("early small", 1).join().unwrap();
        std::thread::sleep(Duration::from_millis(2000));
        // After it, the pool is closed to new requests: two blocks are
        // free, yet this one waits for the big one.
        let late = spawn("late small", 1);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(*order.lock().unwrap(), vec!["early small"]);
        pool.give(2);
        big.join().unwrap();
        late.join().unwrap();
        assert_eq!(
            *order.lock().unwrap(),
            vec!["early small", "big", "late small"]
        );
    }
}
