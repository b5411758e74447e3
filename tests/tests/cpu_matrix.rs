//! The reduce-scatter matrix on the CPU execution: the same kernel code,
//! flags and sizing as the GPU, with 4 + 1 lanes per rank.

use ringreduce::kernels::plan::{CPU_THREADS, PACK_BYTES, UNROLL};
use ringreduce::{CommConfig, DataType, Op};
use ringreduce_tests::cases::{matrix, Case, Offsets, COUNTS};
use ringreduce_tests::{run_case, shuffled, Backend, CpuBackend};

fn run_all(b: &CpuBackend, cases: &[Case]) -> (usize, usize) {
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

#[test]
fn matrix_identity_and_shuffled_rings() {
    let mut total = (0, 0);
    for k in [1usize, 2, 3, 4, 5, 8] {
        // Larger k runs fewer samples: each collective has more ranks.
        let stride = if k >= 5 { 6 } else { 3 };
        let b = CpuBackend::new(k, CommConfig::default()).unwrap();
        let (c, e) = run_all(&b, &matrix(k, &COUNTS, stride));
        total.0 += c;
        total.1 += e;
        if k >= 3 {
            let cfg = CommConfig::default().ring_order(shuffled(k));
            let b = CpuBackend::new(k, cfg).unwrap();
            let (c, e) = run_all(&b, &matrix(k + 1, &COUNTS, stride));
            total.0 += c;
            total.1 += e;
        }
    }
    println!(
        "cpu matrix: {} collectives, {} elements, 0 wrong",
        total.0, total.1
    );
}

/// A staging buffer of a few tiles per slot forces many chunks, the
/// remainder (halving) rule and an uneven last chunk.
#[test]
fn many_chunks_with_a_small_buffer() {
    let tile_bytes = UNROLL * CPU_THREADS * PACK_BYTES;
    for (k, tiles) in [(2usize, 3u64), (3, 2), (4, 5), (5, 1)] {
        let buffer = 2 * k as u64 * (tiles * tile_bytes + PACK_BYTES);
        let cfg = CommConfig::default()
            .buffer_bytes(buffer)
            .ring_order(shuffled(k));
        let b = CpuBackend::new(k, cfg).unwrap();
        for (i, &dtype) in DataType::ALL.iter().enumerate() {
            let tile = (tile_bytes / dtype.size()) as usize;
            let chunk = 2 * tiles as usize * tile;
            // Several full chunks plus odd tails; 2.25 chunks triggers halving.
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
            }
        }
    }
}

/// The loops with prefetch off and far ahead (the default is one round):
/// prefetching is only a hint, so the results must be the same.
#[test]
fn prefetch_distances_give_the_same_results() {
    for pf in [0u8, 4, 15] {
        let b = CpuBackend::new(3, CommConfig::default().prefetch_rounds(pf)).unwrap();
        let (c, _) = run_all(&b, &matrix(3, &COUNTS, 9));
        assert!(c > 0);
    }
}
