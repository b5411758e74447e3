//! Faults on the CPU execution, for every collective: a missing rank, an
//! abort, a lost signal and poisoned inputs. The GPU versions live in
//! gpu_faults.rs.

use ringreduce::kernels::abi::CPU_THREADS;
use ringreduce::kernels::plan::{tile_bytes, PACK_BYTES, STAGING_SLOTS};
use ringreduce::{
    Algo, Collective, CommConfig, CpuBuffers, CpuCommunicator, Error, HostBuffer, Op, WaitKind,
};
use ringreduce_tests::checked::lengths;
use std::time::{Duration, Instant};

/// Staging of `tiles` tiles per slot: many slices, so a stall upstream
/// soon fills every slot.
fn small_staging(tiles: u64) -> u64 {
    STAGING_SLOTS * (tiles * tile_bytes(CPU_THREADS) + PACK_BYTES)
}

/// Reduce-scatter buffers with count `n`.
fn buffers(k: usize, n: usize) -> (Vec<HostBuffer<f32>>, Vec<HostBuffer<f32>>) {
    buffers_for(Collective::ReduceScatter, k, n)
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

fn healthy_again(k: usize) {
    let comm = CpuCommunicator::new(k).unwrap();
    let (send, recv) = buffers(k, 1000);
    comm.reduce_scatter(&bufs(&send, &recv), Op::Sum).unwrap();
    comm.synchronize().unwrap();
    let want: Vec<f32> = (0..1000)
        .map(|i| (0..k).map(|r| ((i * 3 + r) % 11) as f32).sum())
        .collect();
    assert_eq!(recv[0].to_vec(), want);
}

/// The algorithms a fault test runs: the ring and each direct form.
const ALGOS: [Algo; 3] = [Algo::Ring, Algo::OneShot, Algo::TwoShot];

#[test]
fn missing_rank_times_out_and_names_it() {
    for a in ALGOS {
        for c in Collective::ALL {
            missing_rank(c, a);
        }
    }
}

fn missing_rank(c: Collective, algo: Algo) {
    let k = 5;
    let missing = 2;
    let timeout = Duration::from_millis(800);
    let cfg = CommConfig::default()
        .timeout(timeout)
        .buffer_bytes(small_staging(2))
        .algorithm(algo);
    let comm = CpuCommunicator::with_config(k, cfg).unwrap();
    comm.withhold_rank(Some(missing));
    let (send, recv) = buffers_for(c, k, 50_000);
    let t0 = Instant::now();
    comm.collective(c, &bufs(&send, &recv), Op::Sum).unwrap();
    let err = comm
        .synchronize()
        .expect_err("a missing rank must time out");
    let took = t0.elapsed();
    println!(
        "{} {} missing rank: error after {took:?}: {err}",
        algo.name(),
        c.name()
    );
    // A wait gives up no earlier than its timeout, and not much later.
    assert!(took >= timeout, "gave up early, after {took:?}");
    assert!(took < timeout + Duration::from_secs(1), "took {took:?}");
    // The reported error points at the missing rank.
    assert!(
        matches!(&err, Error::Timeout(t) if t.peer == missing),
        "{err}"
    );
    // Every launched rank timed out; its neighbours name it.
    let errs = comm.rank_errors();
    let (pred, succ) = comm.ring_order().neighbours(missing);
    for (u, e) in errs.iter().enumerate() {
        if u == missing {
            assert!(e.is_none());
            continue;
        }
        let e = e
            .as_ref()
            .unwrap_or_else(|| panic!("rank {u} reported nothing"));
        assert!(matches!(e, Error::Timeout(_)), "rank {u}: {e}");
        if algo != Algo::Ring {
            // Every rank waits on every peer's ready word directly.
            assert!(
                matches!(e, Error::Timeout(t) if t.peer == missing
                    && t.waiting_for == WaitKind::PeerReady),
                "{e}"
            );
            continue;
        }
        if u == pred {
            // It stalls either on the missing rank's full staging ring or,
            // sooner, on data from upstream, which itself waits on it.
            assert!(
                matches!(e, Error::Timeout(t) if (t.peer == missing) == (t.waiting_for == WaitKind::SlotFree)),
                "{e}"
            );
        }
        if u == succ {
            assert!(matches!(e, Error::Timeout(t) if t.peer == missing), "{e}");
        }
    }
    // Broken from now on; a new communicator works.
    assert!(matches!(
        comm.collective(c, &bufs(&send, &recv), Op::Sum),
        Err(Error::Broken(_))
    ));
    assert!(matches!(comm.synchronize(), Err(Error::Broken(_))));
    healthy_again(k);
}

#[test]
fn abort_from_another_thread_ends_every_rank() {
    for a in ALGOS {
        for c in Collective::ALL {
            abort_from_another_thread(c, a);
        }
    }
}

fn abort_from_another_thread(c: Collective, algo: Algo) {
    let k = 4;
    let cfg = CommConfig::default()
        .timeout(Duration::from_secs(60))
        .buffer_bytes(small_staging(2))
        .algorithm(algo);
    let comm = CpuCommunicator::with_config(k, cfg).unwrap();
    // A rank that never comes keeps the collective running until aborted.
    comm.withhold_rank(Some(3));
    // Direct calls must fit their staging: a smaller count there.
    let n = if algo == Algo::Ring { 200_000 } else { 20_000 };
    let (send, recv) = buffers_for(c, k, n);
    comm.collective(c, &bufs(&send, &recv), Op::Sum).unwrap();
    let t_abort = std::thread::scope(|s| {
        let h = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            let t = Instant::now();
            comm.abort();
            t
        });
        let err = comm.synchronize().expect_err("aborted");
        let t = h.join().unwrap();
        assert!(matches!(err, Error::Aborted { .. }), "{err}");
        t.elapsed()
    });
    println!(
        "{} {} abort: all ranks returned {t_abort:?} after abort()",
        algo.name(),
        c.name()
    );
    assert!(t_abort < Duration::from_secs(1));
    for (u, e) in comm.rank_errors().iter().enumerate().take(3) {
        assert!(matches!(e, Some(Error::Aborted { .. })), "rank {u}: {e:?}");
    }
    healthy_again(k);
}

/// An abort before the enqueue: the collective is refused with `Aborted`
/// and nothing is written, every time (the kernels' own abort polling would
/// miss it when every flag is ready at the first look).
#[test]
fn abort_before_the_enqueue_refuses_the_collective_1000_of_1000() {
    let k = 2;
    let (send, recv) = buffers(k, 64);
    let before: Vec<Vec<f32>> = recv.iter().map(|r| r.to_vec()).collect();
    for i in 0..1000 {
        let comm = CpuCommunicator::new(k).unwrap();
        comm.abort();
        let e = comm
            .reduce_scatter(&bufs(&send, &recv), Op::Sum)
            .expect_err("enqueue after abort");
        assert_eq!(e, Error::Aborted { seen: None }, "run {i}");
        assert_eq!(
            comm.synchronize(),
            Err(Error::Aborted { seen: None }),
            "run {i}"
        );
        let after: Vec<Vec<f32>> = recv.iter().map(|r| r.to_vec()).collect();
        assert_eq!(after, before, "run {i}: an output was written");
    }
    assert_eq!(
        Error::Aborted { seen: None }.to_string(),
        "the communicator was aborted"
    );
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
    healthy_again(k);
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
    healthy_again(k);
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
