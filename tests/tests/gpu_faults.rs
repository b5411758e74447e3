//! Faults, bad input, the soak and the sanitizer workload on the GPU with
//! virtual ranks. Without a GPU the harness reports every test as ignored,
//! with the reason.

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use ringreduce::{
    Algo, Buffers, Collective, Collectives, CommConfig, Communicator, CpuCommunicator, DataType,
    Error, Op, RawBuffers, Region, BATCH_RANKS,
};
use ringreduce_tests::cases::{Case, Offsets};
use ringreduce_tests::checked::lengths;
use ringreduce_tests::graph::Captured;
use ringreduce_tests::scenarios;
use ringreduce_tests::soak::{env_or, soak, soak_ks, soak_ring};
use ringreduce_tests::{gpu_comm, gpu_comm_on, run_case, run_gpu_tests, Leased};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SENTINEL: f32 = -7.25;

struct Bufs {
    streams: Vec<Arc<CudaStream>>,
    send: Vec<CudaSlice<f32>>,
    recv: Vec<CudaSlice<f32>>,
    n: usize,
}

fn bufs(comm: &Communicator, n: usize) -> Bufs {
    let k = comm.k();
    let streams = comm.new_streams().unwrap();
    let send = streams
        .iter()
        .enumerate()
        .map(|(r, s)| {
            s.clone_htod(
                &(0..k * n)
                    .map(|i| ((i * 3 + r) % 11) as f32)
                    .collect::<Vec<_>>(),
            )
            .unwrap()
        })
        .collect();
    let recv = streams
        .iter()
        .map(|s| s.clone_htod(&vec![SENTINEL; n]).unwrap())
        .collect();
    Bufs {
        streams,
        send,
        recv,
        n,
    }
}

impl Bufs {
    /// Every output back to the sentinel, for the next checked run.
    fn poison(&mut self) {
        for (r, st) in self.recv.iter_mut().zip(&self.streams) {
            st.memcpy_htod(&vec![SENTINEL; r.len()], r).unwrap();
            st.synchronize().unwrap();
        }
    }

    fn run(&mut self, comm: &Communicator, streams: &[Arc<CudaStream>]) -> ringreduce::Result<()> {
        let mut b: Vec<Buffers<'_, f32>> = self
            .send
            .iter()
            .zip(self.recv.iter_mut())
            .map(|(s, r)| Buffers::out_of_place(s.as_view(), r.as_view_mut()))
            .collect();
        comm.reduce_scatter(&mut b, Op::Sum, streams)
    }
    /// The first output element that is not the sentinel, if any.
    fn touched(&self) -> Option<String> {
        self.recv
            .iter()
            .zip(&self.streams)
            .enumerate()
            .find_map(|(u, (r, s))| {
                let got = s.clone_dtoh(r).unwrap();
                got.iter()
                    .position(|&x| x != SENTINEL)
                    .map(|i| format!("rank {u} element {i} is {}", got[i]))
            })
    }
    fn correct(&self, k: usize) -> bool {
        (0..k).all(|u| {
            let got = self.streams[u].clone_dtoh(&self.recv[u]).unwrap();
            got.iter().enumerate().all(|(i, &g)| {
                g == (0..k)
                    .map(|r| (((u * self.n + i) * 3 + r) % 11) as f32)
                    .sum::<f32>()
            })
        })
    }
}

/// The error, untouched outputs, and a working communicator afterwards.
fn after_error(comm: &Communicator, b: &mut Bufs, e: Error, check: impl Fn(&Error) -> bool) {
    assert!(check(&e), "unexpected error: {e}");
    comm.synchronize().unwrap();
    if let Some(t) = b.touched() {
        panic!("buffers touched after {e}: {t}");
    }
    let s = b.streams.clone();
    b.run(comm, &s).unwrap();
    comm.synchronize().unwrap();
    assert!(b.correct(comm.k()), "communicator broken after {e}");
    b.poison();
    println!("gpu bad input ok: {e}");
}

fn gpu_bad_input(dev: usize) {
    scenarios::bad_input(&maker(dev));
    scenarios::split_regions(&maker(dev));
    // The generic constructor places ranks by the config's device list.
    let cfg = CommConfig::default().devices(vec![dev]);
    assert!(matches!(
        Communicator::create(2, cfg),
        Err(Error::DeviceListLength { devices: 1, k: 2 })
    ));
    let k = 3;
    let comm = Communicator::new(dev, k).unwrap();
    let mut b = bufs(&comm, 1000);
    let s = b.streams.clone();
    // Wrong stream count.
    let e = b.run(&comm, &s[..2]).unwrap_err();
    after_error(&comm, &mut b, e, |e| {
        matches!(e, Error::WrongStreamCount { got: 2, k: 3 })
    });
    // Ranks of one launch may share a stream, even the legacy default one:
    // the collective is one grid.
    let shared = vec![s[0].clone(), s[0].clone(), s[2].clone()];
    let def = vec![s[0].clone(), comm.context(0).default_stream(), s[2].clone()];
    for streams in [shared, def] {
        b.run(&comm, &streams).unwrap();
        comm.synchronize().unwrap();
        assert!(b.correct(k), "wrong result with shared streams");
        b.poison();
    }
    // Ranks in two launches on one device (more than BATCH_RANKS there)
    // may not: one stream, or the default stream, would serialise them.
    {
        let many = BATCH_RANKS + 1;
        let big = Communicator::with_config(dev, many, CommConfig::default().channels(1)).unwrap();
        let mut own = big.new_streams().unwrap();
        let none = RawBuffers {
            send: 0,
            send_len: 0,
            recv: 0,
            recv_len: 0,
        };
        let raw = vec![none; many];
        own[BATCH_RANKS] = own[0].clone();
        // SAFETY: refused before anything is read.
        let e = unsafe {
            big.collective_raw(Collective::AllReduce, &raw, DataType::F32, Op::Sum, &own)
        };
        assert!(
            matches!(e, Err(Error::SharedStream { a: 0, b }) if b == BATCH_RANKS),
            "{e:?}"
        );
        own[BATCH_RANKS] = big.context(0).default_stream();
        // SAFETY: as above.
        let e = unsafe {
            big.collective_raw(Collective::AllReduce, &raw, DataType::F32, Op::Sum, &own)
        };
        assert!(matches!(e, Err(Error::DefaultStream { .. })), "{e:?}");
    }
    // Raw pointers: a host address, and a length past the allocation.
    let host = vec![0f32; 3000];
    let raw: Vec<RawBuffers> = (0..k)
        .map(|u| RawBuffers {
            send: if u == 1 {
                host.as_ptr() as u64
            } else {
                b.send[u].device_ptr(&s[u]).0
            },
            send_len: 3000,
            recv: b.recv[u].device_ptr(&s[u]).0,
            recv_len: 1000,
        })
        .collect();
    // SAFETY: the call must fail validation before touching anything.
    let e =
        unsafe { comm.collective_raw(Collective::ReduceScatter, &raw, DataType::F32, Op::Sum, &s) }
            .unwrap_err();
    after_error(&comm, &mut b, e, |e| {
        matches!(
            e,
            Error::WrongDevice {
                rank: 1,
                which: "send",
                found: -1,
                ..
            }
        )
    });
    let mut raw = raw;
    raw[1].send = b.send[1].device_ptr(&s[1]).0;
    raw[2].recv_len = 1001;
    raw[2].send_len = 3003;
    for r in raw.iter_mut() {
        r.recv_len = 1001;
        r.send_len = 3003;
    }
    let e =
        unsafe { comm.collective_raw(Collective::ReduceScatter, &raw, DataType::F32, Op::Sum, &s) }
            .unwrap_err();
    after_error(&comm, &mut b, e, |e| {
        matches!(e, Error::BufferOutOfBounds { rank: 0, .. })
    });
    // More ranks than blocks can be resident.
    let too_many = comm.resident_blocks() + 1;
    let e = Communicator::new(dev, too_many).err();
    assert!(
        matches!(e, Some(Error::TooManyRanks { k, .. }) if k == too_many),
        "{e:?}"
    );
    // More channels than stay resident beside the other ranks' blocks.
    let e = Communicator::with_config(dev, 8, CommConfig::default().channels(33)).err();
    assert!(
        matches!(e, Some(Error::TooManyChannels { channels: 33, .. })),
        "{e:?}"
    );
    let e = Communicator::with_config(dev, 64, CommConfig::default().channels(32)).err();
    assert!(
        matches!(e, Some(Error::TooManyChannels { channels: 32, .. })),
        "{e:?}"
    );
    assert!(matches!(Communicator::new(dev, 0), Err(Error::ZeroRanks)));
    assert!(matches!(
        Communicator::new(1000, 2),
        Err(Error::NoSuchDevice { device: 1000, .. })
    ));
}

/// Collective `c` of f32 sums with count `n` on the communicator's own
/// streams: rank `r` sends `(i * 3 + r) % 11` at element `i`.
#[cfg(feature = "fault-injection")]
fn enqueue_f32(
    comm: &Communicator,
    c: Collective,
    n: usize,
) -> Vec<(CudaSlice<f32>, CudaSlice<f32>)> {
    let send_len = lengths(c, comm.k(), n).0;
    let inputs: Vec<Vec<f32>> = (0..comm.k())
        .map(|r| (0..send_len).map(|i| ((i * 3 + r) % 11) as f32).collect())
        .collect();
    enqueue(comm, c, &inputs, n, Op::Sum, SENTINEL)
}

/// Collective `c` (count `n`) of `inputs` out of place, each output
/// filled with `poison` first; returns each rank's (send, recv).
fn enqueue<C: Collectives>(
    comm: &C,
    c: Collective,
    inputs: &[Vec<f32>],
    n: usize,
    op: Op,
    poison: f32,
) -> Vec<(C::Buf<f32>, C::Buf<f32>)> {
    let (send_len, recv_len) = lengths(c, comm.k(), n);
    let mut bufs: Vec<(C::Buf<f32>, C::Buf<f32>)> = inputs
        .iter()
        .enumerate()
        .map(|(u, v)| {
            (
                comm.upload(u, &v[..send_len]).unwrap(),
                comm.upload(u, &vec![poison; recv_len]).unwrap(),
            )
        })
        .collect();
    let mut regions: Vec<Region<'_, C::Buf<f32>>> = bufs
        .iter_mut()
        .map(|(s, r)| Region::OutOfPlace {
            send: s,
            send_at: 0..send_len,
            recv: r,
            recv_at: 0..recv_len,
        })
        .collect();
    comm.collective(c, &mut regions, op).unwrap();
    drop(regions);
    bufs
}

/// Communicators on device `dev`, from the pool, for the shared scenarios.
fn maker(dev: usize) -> impl Fn(usize, CommConfig) -> Leased {
    move |k, cfg| gpu_comm(dev, k, cfg).unwrap()
}

fn gpu_missing_rank_times_out(dev: usize) {
    // One channel: its many slices fill the missing rank's staging ring, so
    // its predecessor stalls too. The ring, forced: these waits are the
    // ring's (`Auto` sends small all-gathers direct).
    let cfg = CommConfig::default()
        .timeout(Duration::from_secs(1))
        .channels(1);
    for c in Collective::ALL {
        scenarios::missing_rank(&maker(dev), cfg.clone(), 4, c, Algo::Ring, 1 << 20);
    }
    // The process stays healthy: a new communicator works.
    scenarios::healthy(&maker(dev), 4, Collective::ReduceScatter);
}

/// The direct forms' faults: a missing rank times out every peer in its
/// wait for that rank's ready word; an abort ends a stalled direct call.
fn gpu_direct_faults(dev: usize) {
    let cfg = CommConfig::default().timeout(Duration::from_secs(1));
    for algo in [Algo::OneShot, Algo::TwoShot] {
        for c in Collective::ALL {
            scenarios::missing_rank(&maker(dev), cfg.clone(), 4, c, algo, 4096);
            let within = Duration::from_millis(500);
            let plain = CommConfig::default();
            scenarios::abort_mid_call(&maker(dev), plain, 4, c, algo, 4096, within);
        }
    }
}

/// Bounded waits and abort inside a CUDA graph replay: a graph captured
/// while rank 1 was withheld, with a direct and a ring all-reduce, times
/// out when replayed, or ends at an abort long before its timeout.
fn gpu_graph_faults(dev: usize) {
    for abort in [false, true] {
        let timeout = Duration::from_secs(if abort { 60 } else { 1 });
        let cfg = CommConfig::default().timeout(timeout).channels(1);
        let comm = gpu_comm_on(&[dev; 4], cfg).unwrap();
        let cases = [
            (Collective::AllReduce, 2, false),
            (Collective::AllReduce, 1 << 21, false),
        ];
        let cap = Captured::new(&comm, &cases).unwrap();
        comm.withhold_rank(Some(1));
        let graph = cap.capture(&comm).unwrap();
        comm.withhold_rank(None);
        let t0 = Instant::now();
        graph.launch().unwrap();
        let err = std::thread::scope(|sc| {
            if abort {
                sc.spawn(|| {
                    std::thread::sleep(Duration::from_millis(300));
                    comm.abort();
                });
            }
            comm.synchronize()
                .expect_err("a replay without rank 1 must fail")
        });
        let took = t0.elapsed();
        println!("gpu graph replay without rank 1 (abort: {abort}): {took:?}: {err}");
        if abort {
            assert!(matches!(err, Error::Aborted { .. }), "{err}");
            assert!(took < Duration::from_secs(10));
        } else {
            assert!(matches!(&err, Error::Timeout(t) if t.peer == 1), "{err}");
            assert!(took < 2 * timeout + Duration::from_secs(2));
        }
    }
}

fn gpu_abort(dev: usize) {
    for c in Collective::ALL {
        let within = Duration::from_millis(500);
        let cfg = CommConfig::default();
        scenarios::abort_mid_call(&maker(dev), cfg, 4, c, Algo::Ring, 1 << 24, within);
    }
}

/// An abort before the enqueue: refused with `Aborted`, nothing launched or
/// written, in every one of 1000 runs.
fn gpu_abort_before_enqueue(dev: usize) {
    scenarios::abort_before_enqueue(&maker(dev), 1000);
}

#[cfg(feature = "fault-injection")]
fn gpu_lost_signal(dev: usize) {
    for c in Collective::ALL {
        let k = 4;
        let cfg = CommConfig::default()
            .timeout(Duration::from_millis(500))
            .channels(1)
            .algorithm(Algo::Ring);
        let comm = gpu_comm(dev, k, cfg).unwrap();
        comm.inject_lost_signal(2, 1, 2);
        // Several chunks of every block, whatever the collective.
        let n = if c == Collective::AllReduce {
            1 << 22
        } else {
            1 << 20
        };
        let _bufs = enqueue_f32(&comm, c, n);
        let err = comm.synchronize().expect_err("lost signal");
        println!("gpu {} lost signal: {err}", c.name());
        assert!(
            matches!(&err, Error::Timeout(t) if t.peer == 2 && matches!(t.signal, Some((1, 2, _)))),
            "{err}"
        );
    }
}

/// Each rank's output of collective `c` (count `n`) over `inputs`.
fn outputs<C: Collectives>(
    comm: &C,
    c: Collective,
    inputs: &[Vec<f32>],
    n: usize,
    op: Op,
) -> Vec<Vec<f32>> {
    let bufs = enqueue(comm, c, inputs, n, op, 0.0);
    comm.synchronize().unwrap();
    bufs.iter()
        .enumerate()
        .map(|(u, (_, r))| comm.download(u, r).unwrap())
        .collect()
}

fn gpu_poisoned_inputs_match_the_cpu(dev: usize) {
    let k = 3;
    let n = 4096;
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -2.5,
        f32::MAX,
    ];
    let inputs: Vec<Vec<f32>> = (0..k)
        .map(|r| {
            (0..k * n)
                .map(|i| specials[(i * 7 + r * 3 + i / 13) % specials.len()])
                .collect()
        })
        .collect();
    let gpu = gpu_comm(dev, k, CommConfig::default()).unwrap();
    let cpu = CpuCommunicator::new(k).unwrap();
    for c in [Collective::ReduceScatter, Collective::AllReduce] {
        for op in Op::ALL {
            let g = outputs(&*gpu, c, &inputs, n, op);
            let h = outputs(&cpu, c, &inputs, n, op);
            for u in 0..k {
                for (i, (g, h)) in g[u].iter().zip(&h[u]).enumerate() {
                    let same = (g.is_nan() && h.is_nan()) || g.to_bits() == h.to_bits();
                    assert!(
                        same,
                        "{} {op:?} rank {u} elem {i}: gpu {g} cpu {h}",
                        c.name()
                    );
                }
            }
        }
    }
    println!("gpu poisoned inputs: NaN/Inf/signed zeros agree with the CPU execution for all ops");
}

/// Small and quick: the workload compute-sanitizer runs, on the ring
/// (forced: `Auto` sends these sizes direct), the direct algorithms and the
/// local one.
fn gpu_sanitize_small(dev: usize) {
    let mut count = 0;
    let ring = |k| (k, CommConfig::default().algorithm(Algo::Ring));
    let auto = |k, local| (k, CommConfig::default().local(local));
    for (k, cfg) in [
        ring(2usize),
        ring(3),
        auto(2, false),
        auto(3, false),
        auto(2, true),
        auto(3, true),
    ] {
        let forced_ring = cfg.effective_algorithm().unwrap() == Algo::Ring;
        let b = gpu_comm(dev, k, cfg.channels(2)).unwrap();
        // The ring's shared hand-off runs under the sanitizer only if the
        // ring runs.
        let runs = b.algorithm_for::<f32>(Collective::AllReduce, 7).unwrap();
        assert_eq!(runs.name() == "ring", forced_ring, "{runs:?}");
        for (i, n) in [1usize, 7, 257, 4097, 70_000].into_iter().enumerate() {
            for (j, dtype) in [DataType::F32, DataType::I8, DataType::Bf16]
                .into_iter()
                .enumerate()
            {
                let c = Case {
                    collective: Collective::ALL[(i + j) % 3],
                    dtype,
                    op: Op::ALL[i % 5],
                    n,
                    in_place: i % 2 == 1,
                    offsets: if i % 3 == 0 {
                        Offsets::Scattered(1)
                    } else {
                        Offsets::Congruent(i % 4)
                    },
                    seed: i as u64,
                };
                assert_eq!(run_case(&*b, &c).unwrap().wrong, 0, "{c:?}");
                count += 1;
            }
        }
    }
    println!("gpu sanitize-small: {count} collectives, 0 wrong");
}

/// The soak: `RINGREDUCE_SOAK_OPS` mixed collectives per ring size over
/// several stream sets, checked every 500.
fn gpu_soak(dev: usize) {
    let ops: usize = env_or("RINGREDUCE_SOAK_OPS", 10_000);
    let max_count: usize = env_or("RINGREDUCE_SOAK_MAX_COUNT", 1 << 22);
    for k in soak_ks(&[4, 8]) {
        let ring = soak_ring(k);
        // k = 4 on the ring and direct algorithms, k = 8 local (`Auto`).
        let cfg = CommConfig::default().ring_order(ring).local(k != 4);
        let comm = gpu_comm(dev, k, cfg).unwrap();
        let set_count: usize = env_or("RINGREDUCE_SOAK_SETS", 3);
        let sets: Vec<Vec<Arc<CudaStream>>> = (0..set_count.max(1))
            .map(|_| comm.new_streams().unwrap())
            .collect();
        let t0 = Instant::now();
        let rep = soak(&comm, &sets, ops, 500, max_count, 11 + k as u64).unwrap();
        println!(
            "gpu soak k={k}: {} collectives ({} empty, {} in place), {} elements, {} checkpoints, {} wrong, {:.1} s \
             (pools {:.1} s, copy back and check {:.1} s)",
            rep.ops,
            rep.empty,
            rep.in_place,
            rep.elements,
            rep.checkpoints,
            rep.wrong,
            t0.elapsed().as_secs_f64(),
            rep.setup_s,
            rep.check_s
        );
        assert_eq!(rep.wrong, 0);
    }
}

fn main() -> std::process::ExitCode {
    run_gpu_tests(&[
        ("gpu_bad_input", gpu_bad_input),
        ("gpu_missing_rank_times_out", gpu_missing_rank_times_out),
        ("gpu_direct_faults", gpu_direct_faults),
        ("gpu_abort", gpu_abort),
        ("gpu_abort_before_enqueue", gpu_abort_before_enqueue),
        ("gpu_graph_faults", gpu_graph_faults),
        #[cfg(feature = "fault-injection")]
        ("gpu_lost_signal", gpu_lost_signal),
        (
            "gpu_poisoned_inputs_match_the_cpu",
            gpu_poisoned_inputs_match_the_cpu,
        ),
        ("gpu_sanitize_small", gpu_sanitize_small),
        ("gpu_soak", gpu_soak),
    ])
}
