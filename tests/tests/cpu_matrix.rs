//! The collective matrix on the CPU execution: the same kernel code, flags
//! and sizing as the GPU, with 4 + 1 lanes per block.

use proptest::prelude::*;
use ringreduce::kernels::abi::CPU_THREADS;
use ringreduce::kernels::plan::{PACK_BYTES, STAGING_SLOTS, UNROLL};
use ringreduce::{
    Algo, Collective, CommConfig, CpuBuffers, CpuCommunicator, DataType, HostBuffer, Op,
};
use ringreduce_tests::cases::{matrix, Case, Offsets, COUNTS};
use ringreduce_tests::{run_case, shuffled};

fn run_all(comm: &CpuCommunicator, cases: &[Case]) -> (usize, usize) {
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

fn comm(k: usize, cfg: CommConfig) -> CpuCommunicator {
    CpuCommunicator::with_config(k, cfg).unwrap()
}

/// Every collective on the ring, over rings of 1 to 8 ranks, identity and
/// shuffled. (`Auto` runs the local algorithm on a CPU communicator, which
/// `every_algorithm_forced` covers.)
fn matrix_of(c: Collective) {
    let mut total = (0, 0);
    let ring = || CommConfig::default().algorithm(Algo::Ring);
    for k in [1usize, 2, 3, 4, 5, 8] {
        // Larger k runs fewer samples: each collective has more ranks.
        let stride = if k >= 5 { 9 } else { 4 };
        let b = comm(k, ring());
        let (n, e) = run_all(&b, &matrix(c, k, &COUNTS, stride));
        total.0 += n;
        total.1 += e;
        if k >= 3 {
            let b = comm(k, ring().ring_order(shuffled(k)));
            let (n, e) = run_all(&b, &matrix(c, k + 1, &COUNTS, stride));
            total.0 += n;
            total.1 += e;
        }
    }
    println!(
        "cpu {} matrix: {} collectives, {} elements, 0 wrong",
        c.name(),
        total.0,
        total.1
    );
}

#[test]
fn reduce_scatter_matrix() {
    matrix_of(Collective::ReduceScatter);
}

#[test]
fn all_gather_matrix() {
    matrix_of(Collective::AllGather);
}

#[test]
fn all_reduce_matrix() {
    matrix_of(Collective::AllReduce);
}

/// Every collective with each algorithm forced (the ring, one-shot,
/// two-shot and local), identity and shuffled rings: each result against
/// the reference of that algorithm's fold order, so every rank's all-reduce
/// is the same vector, bit for bit. Eleven ranks take the direct and local
/// folds and the flag waits past their first batch of eight peers.
#[test]
fn every_algorithm_forced() {
    for algo in [Algo::Ring, Algo::OneShot, Algo::TwoShot, Algo::Local] {
        let mut total = 0;
        for c in Collective::ALL {
            for k in [2usize, 3, 5, 8, 11] {
                let mut cfg = CommConfig::default().algorithm(algo).direct_bytes(8 << 20);
                if k >= 3 {
                    cfg = cfg.ring_order(shuffled(k));
                }
                total += run_all(&comm(k, cfg), &matrix(c, k, &COUNTS, 11)).0;
            }
        }
        println!("cpu {} forced: {total} collectives, 0 wrong", algo.name());
    }
}

/// `k` ranks' out-of-place all-reduce buffers of `n` f32s: rank `r` sends
/// `value(r)` everywhere, and every output starts poisoned with -7.
fn all_reduce_bufs(
    k: usize,
    n: usize,
    value: impl Fn(usize) -> f32,
) -> (Vec<HostBuffer<f32>>, Vec<CpuBuffers<f32>>) {
    let send: Vec<HostBuffer<f32>> = (0..k)
        .map(|r| HostBuffer::from_slice(&vec![value(r); n]))
        .collect();
    let recv: Vec<HostBuffer<f32>> = (0..k)
        .map(|_| HostBuffer::from_slice(&vec![-7.0; n]))
        .collect();
    let bufs = (0..k)
        .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view()))
        .collect();
    (recv, bufs)
}

/// A forced direct algorithm refuses a call its staging cannot hold, with
/// a typed error and nothing written; `Auto` runs the ring instead.
#[test]
fn forced_direct_too_large_is_refused() {
    let k = 2;
    let n = 4096;
    let cfg = CommConfig::default()
        .algorithm(Algo::OneShot)
        .direct_bytes(1024);
    let comm = comm(k, cfg);
    let (recv, bufs) = all_reduce_bufs(k, n, |r| r as f32 + 1.0);
    match comm.all_reduce(&bufs, Op::Sum) {
        Err(ringreduce::Error::DirectTooLarge { need, have, .. }) => {
            assert!(need > have && have == 1024)
        }
        other => panic!("expected DirectTooLarge, got {other:?}"),
    }
    comm.synchronize().unwrap();
    assert!(recv.iter().all(|r| r.to_vec() == vec![-7.0; n]));
    // Auto runs the ring for what direct staging cannot hold (with the
    // local algorithm off, as on ranks that span devices).
    let auto = self::comm(k, CommConfig::default().direct_bytes(1024).local(false));
    auto.all_reduce(&bufs, Op::Sum).unwrap();
    auto.synchronize().unwrap();
    assert!(recv.iter().all(|r| r.to_vec() == vec![3.0; n]));
}

/// A forced local algorithm on a communicator one launch cannot run whole
/// (more ranks than a batch holds, or the local algorithm turned off) is a
/// typed error with nothing written; `Auto` there runs the others.
#[test]
fn forced_local_where_it_cannot_run_is_refused() {
    let n = 1000;
    for (k, cfg) in [
        (17usize, CommConfig::default()),
        (3, CommConfig::default().local(false)),
    ] {
        let (recv, bufs) = all_reduce_bufs(k, n, |r| r as f32);
        let forced = comm(k, cfg.clone().algorithm(Algo::Local));
        match forced.all_reduce(&bufs, Op::Sum) {
            Err(ringreduce::Error::LocalUnavailable { k: got }) => assert_eq!(got, k),
            other => panic!("k={k}: expected LocalUnavailable, got {other:?}"),
        }
        forced.synchronize().unwrap();
        assert!(recv.iter().all(|r| r.to_vec() == vec![-7.0; n]));
        // Count 0 too: the call and `algorithm_for` agree on every count.
        let (_, empty) = all_reduce_bufs(k, 0, |r| r as f32);
        for (count, bufs) in [(0, &empty), (n, &bufs)] {
            let call = forced.all_reduce(bufs, Op::Sum);
            let asked = forced.algorithm_for::<f32>(Collective::AllReduce, count);
            assert!(
                matches!(call, Err(ringreduce::Error::LocalUnavailable { .. }))
                    && matches!(asked, Err(ringreduce::Error::LocalUnavailable { .. })),
                "k={k}, count {count}: the call gave {call:?}, algorithm_for {asked:?}"
            );
        }
        let auto = comm(k, cfg);
        let a = auto.algorithm_for::<f32>(Collective::AllReduce, n).unwrap();
        assert_ne!(a, ringreduce::kernels::Algorithm::Local);
        auto.all_reduce(&bufs, Op::Sum).unwrap();
        auto.synchronize().unwrap();
        let want = (k * (k - 1) / 2) as f32;
        assert!(recv.iter().all(|r| r.to_vec() == vec![want; n]));
    }
}

/// Channels C = 1..4 on counts that give every channel data, for every
/// collective: each result is checked against the reference, which does
/// not depend on C, so results are bitwise the same for every C.
///
/// The local algorithm's channels are its share of one grid, cut over
/// every rank's blocks: the same holds for it.
#[test]
fn channels_one_to_four() {
    let mut ran = 0;
    for algo in [Algo::Ring, Algo::Local] {
        for ch in 1..=4u32 {
            for k in [2usize, 3, 4] {
                let cfg = CommConfig::default().channels(ch).algorithm(algo);
                let b = comm(k, cfg.ring_order(shuffled(k)));
                for c in Collective::ALL {
                    let cases = matrix(c, k, &[5000, 20_001], 11);
                    ran += run_all(&b, &cases).0;
                }
            }
        }
    }
    assert!(ran > 0);
}

/// A staging buffer of a few tiles per slot forces many chunks, the
/// remainder (halving) rule, an uneven last chunk and the staging rings
/// wrapping many times.
#[test]
fn many_chunks_with_a_small_buffer() {
    let tile_bytes = UNROLL * CPU_THREADS * PACK_BYTES;
    for (k, tiles, ch) in [(2usize, 3u64, 1u32), (3, 2, 2), (4, 5, 1), (5, 1, 3)] {
        let buffer = STAGING_SLOTS * (tiles * tile_bytes + PACK_BYTES);
        let cfg = CommConfig::default()
            .algorithm(Algo::Ring)
            .buffer_bytes(buffer)
            .channels(ch)
            .ring_order(shuffled(k));
        let b = comm(k, cfg);
        for (i, &dtype) in DataType::ALL.iter().enumerate() {
            let tile = (tile_bytes / dtype.size()) as usize;
            let chunk = 2 * tiles as usize * tile;
            // Several full chunks plus odd tails; 2.25 chunks triggers halving.
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
                let o = run_case(&b, &c).unwrap();
                assert_eq!(o.wrong, 0, "k={k} {c:?}");
            }
        }
    }
}

/// The loops with prefetch off and far ahead: prefetching is only a hint,
/// so the results must be the same.
#[test]
fn prefetch_distances_give_the_same_results() {
    for pf in [0u8, 4, 15] {
        let cfg = CommConfig::default().algorithm(Algo::Ring);
        let b = comm(3, cfg.prefetch_rounds(pf));
        let (c, _) = run_all(&b, &matrix(Collective::AllReduce, 3, &COUNTS, 9));
        assert!(c > 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any collective, type, count and placement gives the reference's
    /// bits with every channel count, on the ring and local: so no result
    /// depends on C, and every rank's all-reduce result is the same (the
    /// reference gives every rank one vector).
    #[test]
    fn results_do_not_depend_on_channels(
        ci in 0usize..3,
        di in 0usize..10,
        oi in 0usize..5,
        k in 2usize..=4,
        n in prop_oneof![0usize..40, 0usize..30_000],
        in_place in any::<bool>(),
        congruent in any::<bool>(),
        o in 0usize..4,
        seed in any::<u64>(),
    ) {
        let case = Case {
            collective: Collective::ALL[ci],
            dtype: DataType::ALL[di],
            op: Op::ALL[oi],
            n,
            in_place,
            offsets: if congruent { Offsets::Congruent(o) } else { Offsets::Scattered(o) },
            seed,
        };
        for algo in [Algo::Ring, Algo::Local] {
            for ch in 1..=4u32 {
                let b = comm(k, CommConfig::default().channels(ch).algorithm(algo));
                let got = run_case(&b, &case).unwrap();
                prop_assert_eq!(got.wrong, 0, "{} C={} {:?}", algo.name(), ch, case);
            }
        }
    }
}
