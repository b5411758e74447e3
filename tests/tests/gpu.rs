//! The reduce-scatter on the GPU with virtual ranks. Without a GPU the
//! harness reports every test as ignored, with the reason.

use ringreduce::kernels::plan::{GPU_THREADS, PACK_BYTES, UNROLL};
use ringreduce::{CommConfig, DataType, Op};
use ringreduce_tests::backend::{submit_random, Backend, Pending};
use ringreduce_tests::cases::{matrix, Case, Offsets, COUNTS};
use ringreduce_tests::data::Rng;
use ringreduce_tests::{run_case, run_gpu_tests, shuffled, GpuBackend};

fn run_all(b: &GpuBackend, cases: &[Case]) -> (usize, usize) {
    let mut elements = 0;
    for c in cases {
        let o = run_case(b, c).unwrap_or_else(|e| panic!("{} {c:?}: {e}", b.name()));
        assert_eq!(
            o.wrong,
            0,
            "{}: {c:?}: {} wrong elements",
            b.name(),
            o.wrong
        );
        elements += o.elements;
    }
    (cases.len(), elements)
}

fn gpu_matrix(dev: usize) {
    let mut total = (0, 0);
    for k in [1usize, 2, 3, 4, 8] {
        let b = GpuBackend::new(dev, k, CommConfig::default()).unwrap();
        let (c, e) = run_all(&b, &matrix(k, &COUNTS, 1));
        total.0 += c;
        total.1 += e;
        if k >= 3 {
            let b = GpuBackend::new(dev, k, CommConfig::default().ring_order(shuffled(k))).unwrap();
            let (c, e) = run_all(&b, &matrix(k + 1, &COUNTS, 2));
            total.0 += c;
            total.1 += e;
        }
    }
    println!(
        "gpu matrix: {} collectives, {} elements, 0 wrong",
        total.0, total.1
    );
}

fn gpu_small_buffer_many_chunks(dev: usize) {
    let tile_bytes = UNROLL * GPU_THREADS * PACK_BYTES;
    let mut count = 0;
    for (k, tiles) in [(2usize, 3u64), (3, 2), (4, 5), (8, 1)] {
        let buffer = 2 * k as u64 * (tiles * tile_bytes + PACK_BYTES);
        let cfg = CommConfig::default()
            .buffer_bytes(buffer)
            .ring_order(shuffled(k));
        let b = GpuBackend::new(dev, k, cfg).unwrap();
        for (i, &dtype) in DataType::ALL.iter().enumerate() {
            let tile = (tile_bytes / dtype.size()) as usize;
            let chunk = 2 * tiles as usize * tile;
            for n in [3 * chunk + 5, 2 * chunk + chunk / 4, 7 * chunk - 1] {
                let c = Case {
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
                let o = run_case(&b, &c).unwrap();
                assert_eq!(o.wrong, 0, "k={k} {c:?}");
                count += 1;
            }
        }
    }
    println!("gpu small-buffer: {count} collectives, 0 wrong");
}

fn gpu_large_counts(dev: usize) {
    // recvcount * k = elements per rank, up to 2^26.
    let runs: [(usize, DataType, Op, usize, bool); 6] = [
        (4, DataType::F32, Op::Sum, 1 << 24, false),
        (4, DataType::F32, Op::Sum, (1 << 24) - 3, true),
        (8, DataType::Bf16, Op::Sum, 1 << 23, false),
        (2, DataType::F64, Op::Max, 1 << 25, false),
        (3, DataType::I32, Op::Avg, (1 << 24) + 7, true),
        (4, DataType::F16, Op::Prod, 1 << 24, false),
    ];
    for (i, (k, dtype, op, n, in_place)) in runs.into_iter().enumerate() {
        let b = GpuBackend::new(dev, k, CommConfig::default()).unwrap();
        let c = Case {
            dtype,
            op,
            n,
            in_place,
            offsets: Offsets::Congruent(i % 2),
            seed: i as u64,
        };
        let o = run_case(&b, &c).unwrap();
        assert_eq!(o.wrong, 0, "{c:?}");
        println!(
            "gpu large: k={k} {} {} n={n}: {} elements, 0 wrong",
            dtype.name(),
            op.name(),
            o.elements
        );
    }
}

fn gpu_back_to_back_1000(dev: usize) {
    for k in [4usize, 8] {
        let b = GpuBackend::new(dev, k, CommConfig::default().ring_order(shuffled(k))).unwrap();
        let mut rng = Rng(7 + k as u64);
        let mut pending: Vec<Box<dyn Pending + '_>> = Vec::new();
        let mut elements = 0;
        for i in 0..1000u64 {
            let (p, sent) = submit_random(&b, &mut rng, i, |rng| {
                (match rng.below(4) {
                    0 => rng.below(16),
                    1 => rng.below(5000),
                    2 => rng.below(70_000),
                    _ => 100_000 + rng.below(200_000),
                }) as usize
            })
            .unwrap();
            elements += sent;
            pending.push(p);
            // Bound host memory: check in batches, still with no sync
            // between the collectives of a batch.
            if pending.len() == 250 {
                b.sync().unwrap();
                for p in pending.drain(..) {
                    assert_eq!(p.wrong().unwrap(), 0);
                }
            }
        }
        b.sync().unwrap();
        for p in pending {
            assert_eq!(p.wrong().unwrap(), 0);
        }
        println!("gpu back-to-back k={k}: 1000 collectives, {elements} elements, 0 wrong");
    }
}

fn main() -> std::process::ExitCode {
    run_gpu_tests(&[
        ("gpu_matrix", gpu_matrix),
        ("gpu_small_buffer_many_chunks", gpu_small_buffer_many_chunks),
        ("gpu_large_counts", gpu_large_counts),
        ("gpu_back_to_back_1000", gpu_back_to_back_1000),
    ])
}
