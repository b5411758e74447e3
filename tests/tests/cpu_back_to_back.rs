//! Many collectives of every kind queued on one CPU communicator with no
//! synchronisation between them: the staging rings' head and tail counters
//! must keep them apart.

use ringreduce::{Algo, CommConfig, CpuCommunicator};
use ringreduce_tests::checked::back_to_back;
use ringreduce_tests::data::Rng;
use ringreduce_tests::soak::{env_or, soak_ks, soak_ring};

#[test]
fn two_hundred_back_to_back() {
    let k = 4;
    let cfg = CommConfig::default().ring_order(vec![2, 0, 3, 1]);
    let b = CpuCommunicator::with_config(k, cfg).unwrap();
    let t = back_to_back(&b, &mut Rng(42), 200, 200, |rng| {
        (match rng.below(4) {
            0 => rng.below(16),
            1 => rng.below(600),
            2 => rng.below(5000),
            _ => 20_000 + rng.below(20_000),
        }) as usize
    })
    .unwrap();
    let (elements, wrong) = (t.elements, t.wrong);
    assert_eq!(wrong, 0);
    println!("200 back-to-back mixed collectives, {elements} elements, 0 wrong");
}

/// 1000 collectives queued with no synchronisation, on communicators that
/// force each direct form and on one that picks by size without the local
/// algorithm (so ring and direct calls interleave: its direct staging of
/// 128 KiB per half sends the larger calls to the ring): a fast rank's
/// next call must not overwrite staging a slow peer still reads, which the
/// two staging halves and the epochs guarantee. Every call is checked.
#[test]
fn direct_back_to_back_1000() {
    let k = 4;
    for (algo, calls) in [
        (Algo::OneShot, 300u64),
        (Algo::TwoShot, 300),
        (Algo::Auto, 400),
    ] {
        let mut cfg = CommConfig::default()
            .ring_order(vec![1, 3, 0, 2])
            .algorithm(algo);
        if algo == Algo::Auto {
            cfg = cfg.direct_bytes(128 << 10).local(false);
        }
        let b = CpuCommunicator::with_config(k, cfg).unwrap();
        let t = back_to_back(&b, &mut Rng(7 + calls), calls, calls, |rng| {
            (match rng.below(4) {
                0 => rng.below(16),
                1 => rng.below(2000),
                2 => rng.below(12_000),
                _ => 20_000 + rng.below(40_000),
            }) as usize
        })
        .unwrap();
        let (direct, wrong) = (t.direct, t.wrong);
        println!(
            "{}: {calls} back-to-back collectives ({direct} direct), 0 wrong",
            algo.name()
        );
        assert_eq!(wrong, 0);
        if algo == Algo::Auto {
            assert!(
                direct > 0 && direct < calls as usize,
                "{direct} of {calls} direct"
            );
        } else {
            assert_eq!(direct, calls as usize);
        }
    }
}

/// 300 local collectives queued with no synchronisation (`Auto` on a CPU
/// communicator): each rank's part of a call must wait for every rank's
/// earlier work and hold its own later work until every block of the call
/// has ended, since any block writes any rank's output. Every call is
/// checked.
#[test]
fn local_back_to_back() {
    let cfg = CommConfig::default().ring_order(vec![2, 0, 1]);
    let b = CpuCommunicator::with_config(3, cfg).unwrap();
    let calls = 300;
    let t = back_to_back(&b, &mut Rng(99), calls, calls, |rng| {
        (match rng.below(3) {
            0 => rng.below(16),
            1 => rng.below(3000),
            _ => 10_000 + rng.below(30_000),
        }) as usize
    })
    .unwrap();
    let (local, wrong) = (t.local, t.wrong);
    println!("local: {calls} back-to-back collectives ({local} local), 0 wrong");
    assert_eq!(wrong, 0);
    assert_eq!(local, calls as usize);
}

/// The soak on the CPU execution: `RINGREDUCE_SOAK_OPS` (default 300)
/// collectives of random types, ops, counts (0 to 2^14) and placements per
/// ring size in `RINGREDUCE_SOAK_KS` (default 3), checked every 50.
#[test]
fn cpu_soak() {
    let ops: u64 = env_or("RINGREDUCE_SOAK_OPS", 300);
    for k in soak_ks(&[3]) {
        let cfg = CommConfig::default().ring_order(soak_ring(k));
        let b = CpuCommunicator::with_config(k, cfg).unwrap();
        let t = back_to_back(&b, &mut Rng(300 + k as u64), ops, 50, |rng| {
            (1usize << rng.below(15)) - 1 + rng.below(3) as usize
        })
        .unwrap();
        let (wrong, checkpoints, elements) = (t.wrong, t.checkpoints as u64, t.elements);
        println!("cpu soak k={k}: {ops} collectives, {elements} elements, {checkpoints} checkpoints, {wrong} wrong");
        assert_eq!(checkpoints, ops.div_ceil(50));
        assert_eq!(wrong, 0);
    }
}
