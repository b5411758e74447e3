//! The collectives on the GPU with virtual ranks. Without a GPU the
//! harness reports every test as ignored, with the reason.

use ringreduce::gpu::module::{force_ptx_jit, has_sass, kernel_image, KernelImage};
use ringreduce::kernels::abi::GPU_THREADS;
use ringreduce::kernels::plan::{tile_bytes, PACK_BYTES, STAGING_SLOTS};
use ringreduce::{Algo, Collective, CommConfig, Communicator, DataType, Op};
use ringreduce_tests::cases::{matrix, Case, Offsets, COUNTS};
use ringreduce_tests::checked::back_to_back;
use ringreduce_tests::data::Rng;
use ringreduce_tests::graph::{Captured, GRAPH_CASES};
use ringreduce_tests::{gpu_comm, gpu_comm_on, run_case, run_gpu_tests, shuffled};

fn run_all(comm: &Communicator, cases: &[Case]) -> (usize, usize) {
    let mut elements = 0;
    for c in cases {
        let o = run_case(comm, c).unwrap_or_else(|e| panic!("k={} {c:?}: {e}", comm.k()));
        assert_eq!(
            o.wrong,
            0,
            "k={}: {c:?}: {} wrong elements",
            comm.k(),
            o.wrong
        );
        elements += o.elements;
    }
    (cases.len(), elements)
}

/// Every collective over rings of 1 to 8 virtual ranks, identity and
/// shuffled, with one channel and with three, on the ring and direct
/// algorithms (`Auto` without the local one, as ranks on several devices
/// run; `gpu_algorithms` covers the local one).
fn gpu_matrix(dev: usize) {
    let mut total = (0, 0);
    for c in Collective::ALL {
        for k in [1usize, 2, 3, 4, 8] {
            // One communicator at a time: each holds its blocks in the pool.
            {
                let b = gpu_comm(dev, k, CommConfig::default().local(false)).unwrap();
                let (n, e) = run_all(&b, &matrix(c, k, &COUNTS, 2));
                total.0 += n;
                total.1 += e;
            }
            if k >= 3 {
                let cfg = CommConfig::default()
                    .local(false)
                    .ring_order(shuffled(k))
                    .channels(3);
                let b = gpu_comm(dev, k, cfg).unwrap();
                let (n, e) = run_all(&b, &matrix(c, k + 1, &COUNTS, 3));
                total.0 += n;
                total.1 += e;
            }
        }
    }
    println!(
        "gpu matrix: {} collectives, {} elements, 0 wrong",
        total.0, total.1
    );
}

/// Channels 1 to 4 on counts that give every channel data, on the ring and
/// local algorithms.
fn gpu_channels(dev: usize) {
    let mut count = 0;
    for algo in [Algo::Ring, Algo::Local] {
        for ch in 1..=4u32 {
            for k in [2usize, 4] {
                let cfg = CommConfig::default().channels(ch).algorithm(algo);
                let b = gpu_comm(dev, k, cfg).unwrap();
                for c in Collective::ALL {
                    count += run_all(&b, &matrix(c, k, &[100_003, 1 << 20], 7)).0;
                }
            }
        }
    }
    println!("gpu channels 1-4: {count} collectives, 0 wrong");
}

fn gpu_small_buffer_many_chunks(dev: usize) {
    let tile = tile_bytes(GPU_THREADS);
    let mut count = 0;
    for (k, tiles, ch) in [(2usize, 3u64, 1u32), (3, 2, 2), (4, 5, 1), (8, 1, 2)] {
        let buffer = STAGING_SLOTS * (tiles * tile + PACK_BYTES);
        let cfg = CommConfig::default()
            .algorithm(Algo::Ring)
            .buffer_bytes(buffer)
            .channels(ch)
            .ring_order(shuffled(k));
        let b = gpu_comm(dev, k, cfg).unwrap();
        for (i, &dtype) in DataType::ALL.iter().enumerate() {
            let tile = (tile / dtype.size()) as usize;
            let chunk = 2 * tiles as usize * tile;
            for (j, n) in [3 * chunk + 5, 2 * chunk + chunk / 4, 7 * chunk - 1]
                .into_iter()
                .enumerate()
            {
                let c = Case {
                    collective: Collective::ALL[(i + j) % 3],
                    dtype,
                    op: Op::ALL[(i + n) % 5],
                    n,
                    in_place: i % 2 == 0,
                    offsets: if i % 3 == 0 {
                        Offsets::Scattered(i % 4)
                    } else {
                        Offsets::Congruent(i % 4)
                    },
                    seed: (k * 1000 + i) as u64,
                };
                let o = run_case(&*b, &c).unwrap();
                assert_eq!(o.wrong, 0, "k={k} {c:?}");
                count += 1;
            }
        }
    }
    println!("gpu small-buffer: {count} collectives, 0 wrong");
}

fn gpu_large_counts(dev: usize) {
    // Up to 2^26 elements per rank, automatic channels.
    let runs: [(Collective, usize, DataType, Op, usize, bool); 7] = [
        (
            Collective::ReduceScatter,
            4,
            DataType::F32,
            Op::Sum,
            1 << 24,
            false,
        ),
        (
            Collective::ReduceScatter,
            4,
            DataType::F32,
            Op::Sum,
            (1 << 24) - 3,
            true,
        ),
        (
            Collective::AllGather,
            8,
            DataType::Bf16,
            Op::Sum,
            1 << 23,
            false,
        ),
        (
            Collective::AllGather,
            3,
            DataType::I32,
            Op::Sum,
            (1 << 24) + 7,
            true,
        ),
        (
            Collective::AllReduce,
            2,
            DataType::F64,
            Op::Max,
            1 << 25,
            false,
        ),
        (
            Collective::AllReduce,
            3,
            DataType::I32,
            Op::Avg,
            (1 << 26) + 7,
            true,
        ),
        (
            Collective::AllReduce,
            8,
            DataType::F16,
            Op::Prod,
            1 << 24,
            false,
        ),
    ];
    // Each on the ring and on the local algorithm.
    for (i, (coll, k, dtype, op, n, in_place)) in runs.into_iter().enumerate() {
        for algo in [Algo::Ring, Algo::Local] {
            let b = gpu_comm(dev, k, CommConfig::default().algorithm(algo)).unwrap();
            let c = Case {
                collective: coll,
                dtype,
                op,
                n,
                in_place,
                offsets: Offsets::Congruent(i % 2),
                seed: i as u64,
            };
            let o = run_case(&*b, &c).unwrap();
            assert_eq!(o.wrong, 0, "{} {c:?}", algo.name());
            println!(
                "gpu large: {} {} k={k} {} {} n={n}: {} elements, 0 wrong",
                algo.name(),
                coll.name(),
                dtype.name(),
                op.name(),
                o.elements
            );
        }
    }
}

/// 1000 mixed collectives queued with no synchronisation: at k = 4 by
/// `Auto` without the local algorithm (ring and direct), at k = 8 with it
/// (all local).
fn gpu_back_to_back_1000(dev: usize) {
    for k in [4usize, 8] {
        let cfg = CommConfig::default().ring_order(shuffled(k)).local(k == 8);
        let b = gpu_comm(dev, k, cfg).unwrap();
        // Checked in batches of 250 to bound host memory, still with no
        // sync between the collectives of a batch.
        let t = back_to_back(&*b, &mut Rng(7 + k as u64), 1000, 250, |rng| {
            (match rng.below(4) {
                0 => rng.below(16),
                1 => rng.below(5000),
                2 => rng.below(70_000),
                _ => 100_000 + rng.below(200_000),
            }) as usize
        })
        .unwrap();
        let elements = t.elements;
        assert_eq!(t.wrong, 0);
        println!("gpu back-to-back k={k}: 1000 mixed collectives, {elements} elements, 0 wrong");
    }
}

/// Every collective with each algorithm forced, as on the CPU execution:
/// each result against the reference of that algorithm's fold order, so
/// the GPU and the CPU execution agree bit for bit.
fn gpu_algorithms(dev: usize) {
    // The ring is `gpu_matrix`'s; a forced two-shot is one-shot for all but
    // the all-reduce.
    for algo in [Algo::OneShot, Algo::TwoShot, Algo::Local] {
        let mut total = 0;
        for c in Collective::ALL {
            if algo == Algo::TwoShot && c != Collective::AllReduce {
                continue;
            }
            for k in [2usize, 3, 8] {
                let mut cfg = CommConfig::default().algorithm(algo).direct_bytes(8 << 20);
                if k >= 3 {
                    cfg = cfg.ring_order(shuffled(k));
                }
                let b = gpu_comm(dev, k, cfg).unwrap();
                total += run_all(&b, &matrix(c, k, &COUNTS, 5)).0;
            }
        }
        println!("gpu {} forced: {total} collectives, 0 wrong", algo.name());
    }
}

/// 1000 direct, local and mixed collectives queued with no
/// synchronisation: the staging halves must keep a fast rank's next call
/// off what a slow peer still reads, and a local call's launch must follow
/// and precede every rank's work. `Auto` runs without the local algorithm,
/// so that ring and direct calls mix.
fn gpu_direct_back_to_back(dev: usize) {
    for algo in [Algo::OneShot, Algo::TwoShot, Algo::Local, Algo::Auto] {
        let k = 8;
        let cfg = CommConfig::default()
            .ring_order(shuffled(k))
            .algorithm(algo)
            .local(algo != Algo::Auto);
        let b = gpu_comm(dev, k, cfg).unwrap();
        let t = back_to_back(&*b, &mut Rng(99), 1000, 1000, |rng| {
            (match rng.below(3) {
                0 => rng.below(16),
                1 => rng.below(2000),
                _ => rng.below(20_000),
            }) as usize
        })
        .unwrap();
        let wrong = t.wrong;
        println!(
            "gpu {} back-to-back: 1000 collectives, {wrong} wrong",
            algo.name()
        );
        assert_eq!(wrong, 0);
    }
}

/// Ten mixed collectives (direct and ring, every kind; then all local) on
/// virtual ranks sharing one stream, launched normally, then captured in a
/// CUDA graph and replayed 200 times with new inputs, then launched
/// normally again: the kernel-owned counters must carry over between
/// replays and launches.
fn gpu_graph_replay(dev: usize) {
    for local in [false, true] {
        graph_replay_with(dev, CommConfig::default().local(local));
    }
}

fn graph_replay_with(dev: usize, cfg: CommConfig) {
    let local = cfg.local;
    let b = gpu_comm_on(&[dev; 4], cfg).unwrap();
    let mut cap = Captured::new(&b, &GRAPH_CASES).unwrap();
    let check = |cap: &mut Captured, round: u64, run: &dyn Fn(&Captured)| {
        cap.fill(round).unwrap();
        run(cap);
        b.synchronize().unwrap();
        cap.wrong(round).unwrap()
    };
    let mut wrong = check(&mut cap, 0, &|c| c.enqueue(&b).unwrap());
    let graph = cap.capture(&b).unwrap();
    for round in 1..=200 {
        wrong += check(&mut cap, round, &|_| graph.launch().unwrap());
    }
    wrong += check(&mut cap, 201, &|c| c.enqueue(&b).unwrap());
    println!(
        "gpu graph (local {local}): 10 collectives launched, captured, replayed 200 times, \
         launched: {wrong} wrong"
    );
    assert_eq!(wrong, 0);
}

/// Where SASS for this GPU is embedded (the bundle builds it for sm_90),
/// the kernels load from it, not from the PTX: a refused image would cost
/// every process the driver's JIT again. Prints what loaded and how long
/// the first communicator and its first call took (a communicator loads
/// nothing; its first call loads the module it runs, if no test was
/// first).
fn gpu_kernel_image(dev: usize) {
    let t = std::time::Instant::now();
    let comm = gpu_comm(dev, 2, CommConfig::default()).expect("communicator");
    let took = t.elapsed();
    let case = matrix(Collective::AllReduce, 2, &[1024], 1)
        .into_iter()
        .next()
        .expect("a case");
    let t = std::time::Instant::now();
    let o = run_case(&*comm, &case).expect("the first call");
    assert_eq!(o.wrong, 0);
    let call = t.elapsed();
    let (major, minor) = comm.context(0).compute_capability().expect("capability");
    let cc = (major * 10 + minor) as u32;
    let image = kernel_image(comm.devices()[0]).expect("a call loaded a module");
    println!(
        "kernels on sm_{cc}: {image}, first communicator in {took:.2?}, its first call in {call:.2?}"
    );
    let forced = force_ptx_jit();
    if has_sass(cc) && !forced {
        assert_eq!(image, KernelImage::Sass(cc));
    } else {
        assert_eq!(image, KernelImage::Ptx { refused: None });
    }
}

/// The limits a user can ask for before creating a communicator are the
/// ones creation enforces: the most channels that fit, and the least
/// staging.
fn gpu_limits_before_creation(dev: usize) {
    for k in [1usize, 4, 8] {
        let max = Communicator::max_channels_for(&vec![dev; k]).expect("the query");
        let comm = Communicator::with_config(dev, k, CommConfig::default()).expect("communicator");
        assert_eq!(max, comm.max_channels(), "k = {k}");
        let over = CommConfig::default().channels(max as u32 + 1);
        assert!(
            matches!(
                Communicator::with_config(dev, k, over),
                Err(ringreduce::Error::TooManyChannels { max: m, .. }) if m == max
            ),
            "k = {k}: {} channels were not refused",
            max + 1
        );
    }
    let min = Communicator::MIN_BUFFER_BYTES;
    assert!(Communicator::with_config(dev, 2, CommConfig::default().buffer_bytes(min)).is_ok());
    assert!(matches!(
        Communicator::with_config(dev, 2, CommConfig::default().buffer_bytes(min - 1)),
        Err(ringreduce::Error::BufferTooSmall { need, .. }) if need == min
    ));
    println!("limits before creation: as enforced at k = 1, 4, 8");
}

fn main() -> std::process::ExitCode {
    run_gpu_tests(&[
        ("gpu_kernel_image", gpu_kernel_image),
        ("gpu_limits_before_creation", gpu_limits_before_creation),
        ("gpu_matrix", gpu_matrix),
        ("gpu_channels", gpu_channels),
        ("gpu_small_buffer_many_chunks", gpu_small_buffer_many_chunks),
        ("gpu_large_counts", gpu_large_counts),
        ("gpu_back_to_back_1000", gpu_back_to_back_1000),
        ("gpu_algorithms", gpu_algorithms),
        ("gpu_direct_back_to_back", gpu_direct_back_to_back),
        ("gpu_graph_replay", gpu_graph_replay),
    ])
}
