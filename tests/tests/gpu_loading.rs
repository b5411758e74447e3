//! The kernel catalogue on the GPU: a communicator loads nothing, a call
//! loads the one module it runs, concurrent first calls load it once, and
//! every entry loads and keeps its launch bounds' promise. A process of its
//! own and one test, so that nothing else has loaded anything first.
//! Without a GPU the harness reports it as ignored.

use ringreduce::gpu::module::{module_loads, Kernels};
use ringreduce::kernels::catalogue::{self, collective_entry, COLLECTIVE_ENTRIES, OTHER_ENTRIES};
use ringreduce::{Buffers, Collective, CommConfig, Communicator, DataType, Op};
use ringreduce_tests::run_gpu_tests;
use std::collections::HashSet;

/// Names of the modules loaded on `dev` so far.
fn loaded(dev: usize) -> Vec<&'static str> {
    module_loads(dev).into_iter().map(|l| l.module).collect()
}

/// One all-reduce of `n` elements of `T` on every rank of `comm`, in place,
/// checked: each element is the sum over ranks of small integers.
fn all_reduce_checked<T: ringreduce::RsElement>(comm: &Communicator, n: usize, op: Op, one: T) {
    let streams = comm.new_streams().expect("streams");
    let k = comm.k();
    let mut bufs: Vec<_> = streams
        .iter()
        .map(|s| s.clone_htod(&vec![one; n]).expect("upload"))
        .collect();
    let mut views: Vec<Buffers<T>> = bufs
        .iter_mut()
        .map(|b| Buffers::in_place(b.as_view_mut()))
        .collect();
    comm.all_reduce(&mut views, op, &streams)
        .expect("all-reduce");
    comm.synchronize().expect("synchronize");
    drop(views);
    // Every rank holds the same `one`, so every fold of it is the same.
    let mut want = one;
    for _ in 1..k {
        want = match op {
            Op::Sum => ringreduce::Element::red_sum(want, one),
            Op::Max => ringreduce::Element::red_max(want, one),
            _ => unreachable!("the test's ops"),
        };
    }
    for (u, (b, s)) in bufs.iter().zip(&streams).enumerate() {
        let got = s.clone_dtoh(b).expect("download");
        assert!(got.iter().all(|&x| x == want), "rank {u}: {:?}", &got[..4]);
    }
}

/// Creating a communicator loads no kernel; its first f32 sum all-reduce
/// loads the one module of the entry that runs it; the same call again
/// loads nothing.
fn gpu_loads_on_demand(dev: usize) {
    assert!(
        loaded(dev).is_empty(),
        "loaded before any call: {:?}",
        loaded(dev)
    );
    let comm = Communicator::new(dev, 4).expect("communicator");
    assert!(
        loaded(dev).is_empty(),
        "the communicator loaded {:?}",
        loaded(dev)
    );
    let n = 1 << 16;
    let algo = comm
        .algorithm_for::<f32>(Collective::AllReduce, n)
        .expect("an algorithm");
    let want = collective_entry(algo, Collective::AllReduce, DataType::F32, Op::Sum);
    all_reduce_checked(&comm, n, Op::Sum, 1.5f32);
    assert_eq!(loaded(dev), vec![want.module]);
    all_reduce_checked(&comm, n, Op::Sum, 2.0f32);
    assert_eq!(loaded(dev), vec![want.module]);
    println!(
        "first call loaded {} ({algo:?}) and nothing else",
        want.module
    );
}

/// Four threads' first i8 max all-reduces, each on its own communicator,
/// at once: the module loads once and every call is right.
fn gpu_concurrent_first_calls_load_once(dev: usize) {
    let before = loaded(dev).len();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let comm = Communicator::with_config(dev, 2, CommConfig::default()).expect("comm");
                all_reduce_checked(&comm, 4096 + t, Op::Max, 3i8);
            });
        }
    });
    let now = loaded(dev);
    let new: Vec<&str> = now[before..].to_vec();
    let unique: HashSet<&str> = new.iter().copied().collect();
    assert_eq!(unique.len(), new.len(), "a module loaded twice: {new:?}");
    assert!(!new.is_empty(), "the i8 max call loaded nothing");
    println!("four concurrent first calls loaded {new:?}");
}

/// Every catalogue entry loads on this GPU (its module JIT-compiled, or
/// its SASS), and fits at least the blocks per SM its launch bounds
/// promise: the loader checks the driver's occupancy for that.
fn gpu_every_entry_loads_within_its_bounds(dev: usize) {
    let ctx = ringreduce::gpu::open_device(dev).expect("device");
    let kernels = Kernels::of(&ctx).expect("kernels");
    let t = std::time::Instant::now();
    for (i, e) in COLLECTIVE_ENTRIES.iter().enumerate() {
        kernels
            .collective(i)
            .unwrap_or_else(|err| panic!("{}: {err}", e.name));
    }
    for e in &OTHER_ENTRIES {
        kernels
            .other(e)
            .unwrap_or_else(|err| panic!("{}: {err}", e.name));
    }
    let loads = module_loads(dev);
    let names: HashSet<&str> = loads.iter().map(|l| l.module).collect();
    assert_eq!(names.len(), loads.len(), "a module loaded twice");
    let modules: HashSet<&str> = catalogue::all().map(|e| e.module).collect();
    assert_eq!(names, modules);
    let bytes: usize = loads.iter().map(|l| l.bytes).sum();
    println!(
        "{} modules ({bytes} bytes) loaded in {:.1} s, every entry within its bounds",
        loads.len(),
        t.elapsed().as_secs_f64()
    );
}

/// `load_kernels` loads the ring, direct and local kernels of a call, and
/// the call then loads nothing more.
fn gpu_load_kernels_before_a_call(dev: usize) {
    let before = loaded(dev).len();
    let comm = Communicator::new(dev, 2).expect("communicator");
    comm.load_kernels(Collective::AllReduce, DataType::U64, Op::Min)
        .expect("load");
    let now = loaded(dev);
    let want: HashSet<&str> = ringreduce::Algorithm::ALL
        .iter()
        .map(|&a| collective_entry(a, Collective::AllReduce, DataType::U64, Op::Min).module)
        .collect();
    assert_eq!(now[before..].iter().copied().collect::<HashSet<_>>(), want);
    all_reduce_checked(&comm, 1000, Op::Max, 5u64);
    let after_max = loaded(dev).len();
    assert_eq!(
        after_max,
        now.len() + 1,
        "the max call loads its own kernel"
    );
    println!("load_kernels loaded {want:?}");
}

/// The four in order, as one test: each needs what the one before left
/// loaded, and the harness may run tests on several threads.
fn gpu_loading(dev: usize) {
    gpu_loads_on_demand(dev);
    gpu_concurrent_first_calls_load_once(dev);
    gpu_load_kernels_before_a_call(dev);
    gpu_every_entry_loads_within_its_bounds(dev);
}

fn main() -> std::process::ExitCode {
    run_gpu_tests(&[("gpu_loading", gpu_loading)])
}
