//! Faults on the CPU execution, for every collective: a missing rank, an
//! abort, a lost signal and poisoned inputs. The GPU versions live in
//! gpu_faults.rs.

use ringreduce::kernels::abi::CPU_THREADS;
use ringreduce::kernels::plan::{tile_bytes, PACK_BYTES, STAGING_SLOTS};
#[cfg(feature = "fault-injection")]
use ringreduce::WaitKind;
use ringreduce::{
    Algo, Collective, CommConfig, CpuBuffers, CpuCommunicator, Error, HostBuffer, Op,
};
use ringreduce_tests::checked::lengths;
use ringreduce_tests::scenarios;
use std::time::{Duration, Instant};

/// Staging of `tiles` tiles per slot: many slices, so a stall upstream
/// soon fills every slot.
fn small_staging(tiles: u64) -> u64 {
    STAGING_SLOTS * (tiles * tile_bytes(CPU_THREADS) + PACK_BYTES)
}

/// Buffers of collective `c` with count `n`: rank `r` sends
/// `(i * 3 + r) % 11` at element `i`.
fn buffers_for(c: Collective, k: usize, n: usize) -> (Vec<HostBuffer<f32>>, Vec<HostBuffer<f32>>) {
    let (send_len, recv_len) = lengths(c, k, n);
    let send = (0..k)
        .map(|r| {
            HostBuffer::from_slice(
                &(0..send_len)
                    .map(|i| ((i * 3 + r) % 11) as f32)
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let recv = (0..k).map(|_| HostBuffer::zeroed(recv_len)).collect();
    (send, recv)
}

fn bufs(send: &[HostBuffer<f32>], recv: &[HostBuffer<f32>]) -> Vec<CpuBuffers<f32>> {
    send.iter()
        .zip(recv)
        .map(|(s, r)| CpuBuffers::out_of_place(s.as_view(), r.as_view()))
        .collect()
}

/// The algorithms a fault test runs: the ring and each direct form.
const ALGOS: [Algo; 3] = [Algo::Ring, Algo::OneShot, Algo::TwoShot];

/// The CPU execution's communicators, for the shared scenarios.
fn make(k: usize, cfg: CommConfig) -> Box<CpuCommunicator> {
    Box::new(CpuCommunicator::create(k, cfg).unwrap())
}

#[test]
fn missing_rank_times_out_and_names_it() {
    let cfg = CommConfig::default()
        .timeout(Duration::from_millis(800))
        .buffer_bytes(small_staging(2));
    for a in ALGOS {
        for c in Collective::ALL {
            scenarios::missing_rank(&make, cfg.clone(), 5, c, a, 50_000);
            scenarios::healthy(&make, 5, c);
        }
    }
}

#[test]
fn abort_from_another_thread_ends_every_rank() {
    let cfg = CommConfig::default().buffer_bytes(small_staging(2));
    for a in ALGOS {
        for c in Collective::ALL {
            // Direct calls must fit their staging: a smaller count there.
            let n = if a == Algo::Ring { 200_000 } else { 20_000 };
            let within = Duration::from_secs(1);
            scenarios::abort_mid_call(&make, cfg.clone(), 4, c, a, n, within);
            scenarios::healthy(&make, 4, c);
        }
    }
}

/// An abort before the enqueue: the collective is refused with `Aborted`
/// and nothing is written, every time.
#[test]
fn abort_before_the_enqueue_refuses_the_collective_1000_of_1000() {
    scenarios::abort_before_enqueue(&make, 1000);
    assert_eq!(
        Error::Aborted { seen: None }.to_string(),
        "the communicator was aborted"
    );
}

#[test]
fn bad_regions_are_typed_errors_that_write_nothing() {
    scenarios::bad_input(&make);
}

#[test]
fn send_and_recv_from_one_allocation() {
    scenarios::split_regions(&make);
}

#[cfg(feature = "fault-injection")]
#[test]
fn lost_signal_is_a_timeout_naming_the_step() {
    for c in Collective::ALL {
        lost_signal(c);
        for a in [Algo::OneShot, Algo::TwoShot] {
            lost_ready_signal(c, a);
        }
    }
}

/// A direct rank whose ready word never rises in phase `step`: every
/// peer times out in that phase, naming it, and nothing is half-written
/// on the next communicator.
#[cfg(feature = "fault-injection")]
fn lost_ready_signal(c: Collective, algo: Algo) {
    let k = 4;
    let timeout = Duration::from_millis(500);
    let cfg = CommConfig::default().timeout(timeout).algorithm(algo);
    let comm = CpuCommunicator::with_config(k, cfg).unwrap();
    // The two-shot all-reduce loses its second round; the others their one.
    let step = (c == Collective::AllReduce && algo == Algo::TwoShot) as u64;
    let faulty = 1usize;
    comm.inject_lost_signal(faulty, 0, step);
    let (send, recv) = buffers_for(c, k, 3000);
    comm.collective(c, &bufs(&send, &recv), Op::Sum).unwrap();
    let err = comm.synchronize().expect_err("a lost signal must time out");
    println!("{} {} lost ready signal: {err}", algo.name(), c.name());
    match &err {
        Error::Timeout(t) => {
            assert_eq!(t.peer, faulty);
            assert_eq!(t.waiting_for, WaitKind::PeerReady);
            assert_eq!(t.step, step);
        }
        e => panic!("expected a timeout, got {e}"),
    }
    for (u, e) in comm.rank_errors().iter().enumerate() {
        if u != faulty {
            assert!(
                matches!(e, Some(Error::Timeout(t)) if t.peer == faulty),
                "rank {u}: {e:?}"
            );
        }
    }
    scenarios::healthy(&make, k, Collective::ReduceScatter);
}

#[cfg(feature = "fault-injection")]
fn lost_signal(c: Collective) {
    let k = 4;
    let timeout = Duration::from_millis(500);
    // A small staging buffer gives several chunks.
    let cfg = CommConfig::default()
        .timeout(timeout)
        .buffer_bytes(small_staging(1))
        .channels(1)
        .algorithm(Algo::Ring);
    let comm = CpuCommunicator::with_config(k, cfg).unwrap();
    let (faulty, chunk, step) = (1usize, 2u64, 1u64);
    comm.inject_lost_signal(faulty, chunk, step);
    // Four blocks per rank of 2000 (the all-reduce's count is all four).
    let n = if c == Collective::AllReduce {
        8000
    } else {
        2000
    };
    let (send, recv) = buffers_for(c, k, n);
    comm.collective(c, &bufs(&send, &recv), Op::Sum).unwrap();
    let err = comm.synchronize().expect_err("a lost signal must time out");
    println!("{} lost signal: {err}", c.name());
    let (_, succ) = comm.ring_order().neighbours(faulty);
    match &err {
        Error::Timeout(t) => {
            assert_eq!(t.rank, succ);
            assert_eq!(t.peer, faulty);
            assert_eq!(t.waiting_for, WaitKind::NewData);
            assert_eq!((t.chunk, t.step), (chunk, step + 1));
            assert_eq!(t.signal.map(|(c, s, _)| (c, s)), Some((chunk, step)));
        }
        e => panic!("expected a timeout, got {e}"),
    }
    assert!(err
        .to_string()
        .contains(&format!("chunk {chunk}, step {step}")));
    // Nothing wrong was written where the lost data should have gone.
    scenarios::healthy(&make, k, Collective::ReduceScatter);
}

#[test]
fn poisoned_inputs_follow_ieee() {
    let k = 3;
    let n = 8;
    let comm = CpuCommunicator::new(k).unwrap();
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    // Element i of block 0 on each rank:
    let rows: [[f32; 8]; 3] = [
        [nan, 1.0, inf, inf, 0.0, -inf, 2.0, nan],
        [1.0, nan, -inf, 1.0, inf, -inf, 3.0, nan],
        [2.0, 2.0, 1.0, 1.0, 1.0, 5.0, nan, nan],
    ];
    let send: Vec<HostBuffer<f32>> = (0..k)
        .map(|r| {
            let mut v = vec![1.0f32; k * n];
            v[..n].copy_from_slice(&rows[r]);
            HostBuffer::from_slice(&v)
        })
        .collect();
    let mut results = Vec::new();
    for op in Op::ALL {
        let recv: Vec<HostBuffer<f32>> = (0..k).map(|_| HostBuffer::zeroed(n)).collect();
        comm.reduce_scatter(&bufs(&send, &recv), op).unwrap();
        comm.synchronize().unwrap();
        results.push((op, recv[0].to_vec()));
    }
    let get = |op| results.iter().find(|(o, _)| *o == op).unwrap().1.clone();
    let sum = get(Op::Sum);
    assert!(sum[0].is_nan() && sum[1].is_nan(), "NaN + x = NaN");
    assert!(sum[2].is_nan(), "inf + -inf = NaN");
    assert_eq!(sum[3], inf);
    assert_eq!(sum[5], -inf);
    assert!(sum[7].is_nan());
    let prod = get(Op::Prod);
    assert!(prod[4].is_nan(), "0 * inf = NaN");
    assert_eq!(prod[5], inf * 5.0, "-inf * -inf * 5 = inf");
    let max = get(Op::Max);
    assert_eq!(max[0], 2.0, "max ignores NaN");
    assert_eq!(max[2], inf);
    assert_eq!(max[6], 3.0);
    assert!(max[7].is_nan(), "max of NaNs is NaN");
    let min = get(Op::Min);
    assert_eq!(min[0], 1.0);
    assert_eq!(min[5], -inf);
    let avg = get(Op::Avg);
    assert!(avg[0].is_nan());
    assert_eq!(avg[3], inf);
    // Deterministic: the same inputs give the same bits again.
    for (op, first) in &results {
        let recv: Vec<HostBuffer<f32>> = (0..k).map(|_| HostBuffer::zeroed(n)).collect();
        comm.reduce_scatter(&bufs(&send, &recv), *op).unwrap();
        comm.synchronize().unwrap();
        let again = recv[0].to_vec();
        assert_eq!(
            again.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            first.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// A lane that panics (an internal bug; here the `lane_panic` hook) breaks
/// the communicator with the panic's message instead of hanging it: the
/// other lanes of its grid, and the other ranks' grids, stop at their next
/// wait, as a GPU trap ends a launch. Every algorithm, local included, with
/// a timeout long enough that only the trap can end the call in time.
#[test]
fn a_panicking_lane_breaks_the_communicator_without_hanging() {
    for a in [Algo::Ring, Algo::OneShot, Algo::TwoShot, Algo::Local] {
        for c in Collective::ALL {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(panicking_lane(c, a)));
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(took) => println!("{} {}: broken after {took:?}", a.name(), c.name()),
                Err(_) => panic!("{} {}: a panicking lane hung the call", a.name(), c.name()),
            }
        }
    }
}

/// Runs one collective with rank 1's first lane panicking; returns how long
/// `synchronize` took to report it.
fn panicking_lane(c: Collective, a: Algo) -> Duration {
    let k = 4;
    let cfg = CommConfig::default()
        .timeout(Duration::from_secs(600))
        .algorithm(a);
    let comm = CpuCommunicator::with_config(k, cfg).unwrap();
    comm.inject_lane_panic(Some(1));
    let (send, recv) = buffers_for(c, k, 20_000);
    let t0 = Instant::now();
    comm.collective(c, &bufs(&send, &recv), Op::Sum).unwrap();
    let err = comm
        .synchronize()
        .expect_err("a panicking lane must break the call");
    let took = t0.elapsed();
    let want = "injected lane panic on rank 1";
    assert!(
        matches!(&err, Error::Broken(m) if m.contains(want)),
        "{} {}: {err}",
        a.name(),
        c.name()
    );
    // The communicator stays broken: a later call is refused, nothing run.
    comm.inject_lane_panic(None);
    let again = comm.collective(c, &bufs(&send, &recv), Op::Sum);
    assert!(
        matches!(&again, Err(Error::Broken(m)) if m.contains(want)),
        "{again:?}"
    );
    took
}
