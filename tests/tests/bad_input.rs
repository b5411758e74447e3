//! Every bad input is a typed error, launches nothing (the output sentinel
//! stays untouched) and leaves the communicator working.

use ringreduce::internals::{
    connect, plan, validate, BufferSpan, CallOpts, ChannelWiring, Plan, RankWiring, Static,
};
use ringreduce::kernels::abi::GPU_THREADS;
use ringreduce::{
    Collective, CommConfig, Communicator, CpuBuffers, CpuCommunicator, DataType, Error, HostBuffer,
    Op, RingOrder,
};

const K: usize = 3;
const N: usize = 100;
const SENTINEL: f32 = -7.25;

struct Setup {
    comm: CpuCommunicator,
    send: Vec<HostBuffer<f32>>,
    recv: Vec<HostBuffer<f32>>,
}

fn setup() -> Setup {
    let comm = CpuCommunicator::new(K).unwrap();
    let send = (0..K)
        .map(|r| HostBuffer::from_slice(&(0..K * N).map(|i| (i + r) as f32).collect::<Vec<_>>()))
        .collect();
    let recv = (0..K)
        .map(|_| HostBuffer::from_slice(&[SENTINEL; N]))
        .collect();
    Setup { comm, send, recv }
}

impl Setup {
    fn good(&self) -> Vec<CpuBuffers<f32>> {
        (0..K)
            .map(|u| CpuBuffers::out_of_place(self.send[u].as_view(), self.recv[u].as_view()))
            .collect()
    }

    /// The error, nothing written, and a correct collective afterwards.
    fn expect(&self, bufs: &[CpuBuffers<f32>], check: impl Fn(&Error) -> bool) {
        let e = self
            .comm
            .reduce_scatter(bufs, Op::Sum)
            .expect_err("bad input must fail");
        assert!(check(&e), "unexpected error: {e}");
        self.comm.synchronize().unwrap();
        for r in &self.recv {
            assert!(
                r.to_vec().iter().all(|&x| x == SENTINEL),
                "a buffer was touched after {e}"
            );
        }
        for (u, s) in self.send.iter().enumerate() {
            assert_eq!(
                s.to_vec(),
                (0..K * N).map(|i| (i + u) as f32).collect::<Vec<_>>()
            );
        }
        self.comm.reduce_scatter(&self.good(), Op::Sum).unwrap();
        self.comm.synchronize().unwrap();
        for (u, r) in self.recv.iter().enumerate() {
            let want: Vec<f32> = (0..N)
                .map(|i| (0..K).map(|j| (u * N + i + j) as f32).sum())
                .collect();
            assert_eq!(r.to_vec(), want, "communicator works after {e}");
            r.write(0, &[SENTINEL; N]).unwrap();
        }
    }
}

// Bad regions common to every backend (counts, lengths, ranges, the
// in-place layout) are `ringreduce_tests::scenarios::bad_input`, run by
// faults.rs and gpu_faults.rs; these are what only host views can express.

#[test]
fn overlapping_outputs_and_inputs() {
    let s = setup();
    let mut b = s.good();
    b[1] = CpuBuffers::out_of_place(s.send[1].as_view(), s.recv[0].as_view());
    s.expect(&b, |e| {
        matches!(
            e,
            Error::Overlap {
                a: 0,
                a_which: "recv",
                b: 1,
                b_which: "recv"
            }
        )
    });
    let mut b = s.good();
    b[2] = CpuBuffers::out_of_place(s.send[2].as_view(), s.send[0].view(N..2 * N).unwrap());
    s.expect(&b, |e| {
        matches!(
            e,
            Error::Overlap {
                a: 0,
                a_which: "send",
                b: 2,
                b_which: "recv"
            }
        )
    });
}

/// A call whose shape matches kept plans (the memo re-points those for
/// moved buffers) is still validated whole.
#[test]
fn bad_input_after_good_calls_of_its_shape() {
    let s = setup();
    for _ in 0..2 {
        s.comm.reduce_scatter(&s.good(), Op::Sum).unwrap();
    }
    s.comm.synchronize().unwrap();
    for r in &s.recv {
        r.write(0, &[SENTINEL; N]).unwrap();
    }
    let mut b = s.good();
    b[1] = CpuBuffers::out_of_place(s.send[1].as_view(), s.recv[0].as_view());
    s.expect(&b, |e| matches!(e, Error::Overlap { a: 0, b: 1, .. }));
    let mut b = s.good();
    b[2] = CpuBuffers::out_of_place(s.send[2].as_view(), s.send[2].view(0..N).unwrap());
    s.expect(&b, |e| matches!(e, Error::InPlaceMisplaced { rank: 2, .. }));
}

#[test]
fn shared_read_only_inputs_are_allowed() {
    let s = setup();
    let b: Vec<_> = (0..K)
        .map(|u| CpuBuffers::out_of_place(s.send[0].as_view(), s.recv[u].as_view()))
        .collect();
    s.comm.reduce_scatter(&b, Op::Max).unwrap();
    s.comm.synchronize().unwrap();
    assert_eq!(
        s.recv[1].to_vec(),
        (N..2 * N).map(|i| i as f32).collect::<Vec<_>>()
    );
}

#[test]
fn bad_communicators() {
    assert!(matches!(CpuCommunicator::new(0), Err(Error::ZeroRanks)));
    assert!(matches!(
        CpuCommunicator::with_config(4, CommConfig::default().buffer_bytes(1000)),
        Err(Error::BufferTooSmall { have: 1000, .. })
    ));
    // The limits a user can ask for before creating one, and their edges.
    let min = CpuCommunicator::MIN_BUFFER_BYTES;
    assert_eq!(min, 4224);
    assert!(CpuCommunicator::with_config(2, CommConfig::default().buffer_bytes(min)).is_ok());
    assert!(matches!(
        CpuCommunicator::with_config(2, CommConfig::default().buffer_bytes(min - 1)),
        Err(Error::BufferTooSmall { need, have }) if need == min && have == min - 1
    ));
    assert_eq!(ringreduce::Communicator::MIN_BUFFER_BYTES, 262_272);
    let max = CpuCommunicator::MAX_CHANNELS;
    assert!(CpuCommunicator::with_config(2, CommConfig::default().channels(max as u32)).is_ok());
    for ch in [0, max as u32 + 1] {
        assert!(matches!(
            CpuCommunicator::with_config(3, CommConfig::default().channels(ch)),
            Err(Error::TooManyChannels { channels, max: m, .. }) if channels == ch as usize && m == max
        ));
    }
    assert!(matches!(
        CpuCommunicator::with_config(3, CommConfig::default().ring_order(vec![0, 0, 1])),
        Err(Error::BadRingOrder { k: 3, .. })
    ));
    assert!(matches!(
        CpuCommunicator::with_config(3, CommConfig::default().ring_order(vec![0, 1])),
        Err(Error::RingOrderLength { k: 3, .. })
    ));
    let e = CpuCommunicator::with_config(3, CommConfig::default().ring_order(vec![0, 1]))
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "ring order [0, 1] names 2 ranks, but the communicator has 3"
    );
}

#[test]
fn no_driver_suggests_the_cpu_communicator() {
    match ringreduce::gpu::device_count() {
        Err(Error::NoDriver) => {
            let e = Communicator::new(0, 2).err().expect("no driver, no communicator");
            assert_eq!(e, Error::NoDriver);
            assert!(e.to_string().contains("CpuCommunicator"));
        }
        Ok(n) => println!("no_driver_suggests_the_cpu_communicator: skipped: a driver with {n} device(s) is present"),
        Err(e) => println!("no_driver_suggests_the_cpu_communicator: skipped: {e}"),
    }
}

fn spans(k: usize, n: u64, sz: u64) -> Vec<BufferSpan> {
    (0..k as u64)
        .map(|u| BufferSpan {
            send: 1 << 40 | u << 32,
            send_len: k as u64 * n,
            recv: 1 << 41 | u << 32,
            recv_len: n,
        })
        .map(|mut s| {
            s.send -= s.send % sz;
            s
        })
        .collect()
}

/// The all-gather's and the all-reduce's own shapes: a typed error, and
/// nothing written.
#[test]
fn all_gather_and_all_reduce_shapes() {
    let comm = CpuCommunicator::new(K).unwrap();
    let send: Vec<HostBuffer<f32>> = (0..K).map(|_| HostBuffer::from_slice(&[1.0; N])).collect();
    let recv: Vec<HostBuffer<f32>> = (0..K)
        .map(|_| HostBuffer::from_slice(&[SENTINEL; K * N]))
        .collect();
    let untouched = |recv: &[HostBuffer<f32>]| {
        assert!(recv
            .iter()
            .all(|r| r.to_vec().iter().all(|&x| x == SENTINEL)));
    };
    // All-gather: recv must be k times send.
    let mut b: Vec<CpuBuffers<f32>> = (0..K)
        .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view()))
        .collect();
    b[1] = CpuBuffers::out_of_place(send[1].as_view(), recv[1].view(0..K * N - 1).unwrap());
    let e = comm.all_gather(&b).unwrap_err();
    assert!(
        matches!(
            e,
            Error::RecvLength {
                rank: 1,
                recv_len: 299,
                expected: 300,
                collective: "all-gather"
            }
        ),
        "{e}"
    );
    // All-gather in place: send must be block `rank` of recv.
    b[1] = CpuBuffers::out_of_place(recv[1].view(0..N).unwrap(), recv[1].as_view());
    let e = comm.all_gather(&b).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InPlaceMisplaced {
                rank: 1,
                collective: "all-gather"
            }
        ),
        "{e}"
    );
    // All-reduce: recv as long as send, and in place only exactly.
    let mut b: Vec<CpuBuffers<f32>> = (0..K)
        .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].view(0..N).unwrap()))
        .collect();
    b[2] = CpuBuffers::out_of_place(send[2].as_view(), recv[2].view(0..N + 1).unwrap());
    let e = comm.all_reduce(&b, Op::Sum).unwrap_err();
    assert!(
        matches!(
            e,
            Error::RecvLength {
                rank: 2,
                expected: 100,
                ..
            }
        ),
        "{e}"
    );
    b[2] = CpuBuffers::out_of_place(recv[2].view(1..N + 1).unwrap(), recv[2].view(0..N).unwrap());
    let e = comm.all_reduce(&b, Op::Sum).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InPlaceMisplaced {
                rank: 2,
                collective: "all-reduce"
            }
        ),
        "{e}"
    );
    b[2] = CpuBuffers::out_of_place(
        send[2].view(0..N - 1).unwrap(),
        recv[2].view(0..N - 1).unwrap(),
    );
    let e = comm.all_reduce(&b, Op::Sum).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CountMismatch {
                rank: 2,
                got: 99,
                want: 100
            }
        ),
        "{e}"
    );
    // An in-place all-gather buffer must be k equal blocks.
    let b: Vec<CpuBuffers<f32>> = (0..K)
        .map(|u| CpuBuffers::in_place(recv[u].view(0..K * N - 1).unwrap()))
        .collect();
    assert!(matches!(
        comm.all_gather(&b).unwrap_err(),
        Error::InPlaceLength { rank: 0, .. }
    ));
    comm.synchronize().unwrap();
    untouched(&recv);
    // And the communicator still works: an in-place all-reduce of ones.
    let b: Vec<CpuBuffers<f32>> = (0..K)
        .map(|u| CpuBuffers::in_place(send[u].as_view()))
        .collect();
    comm.all_reduce(&b, Op::Sum).unwrap();
    comm.synchronize().unwrap();
    assert!(send.iter().all(|s| s.to_vec() == vec![K as f32; N]));
}

#[test]
fn byte_sizes_that_overflow() {
    // 2^60 f64 per block fit in 64 bits of bytes; four blocks do not.
    let k = 4;
    let n = 1u64 << 60;
    let mut s = spans(k, 1, 8);
    for x in &mut s {
        x.recv_len = n;
        x.send_len = n * k as u64;
    }
    assert!(matches!(
        validate(Collective::ReduceScatter, &s, k, DataType::F64),
        Err(Error::Overflow { k: 4, .. })
    ));
}

#[test]
fn misaligned_addresses() {
    let mut s = spans(2, 10, 4);
    s[1].recv += 2;
    assert!(matches!(
        validate(Collective::ReduceScatter, &s, 2, DataType::F32),
        Err(Error::Misaligned {
            rank: 1,
            which: "recv",
            ..
        })
    ));
}

fn opts(buffer_bytes: u64, threads: u64) -> CallOpts {
    CallOpts {
        buffer_bytes,
        threads,
        channels: None,
        max_channels: 1,
        prefetch_rounds: 0,
        fault: None,
        algorithm: ringreduce::Algo::Ring,
        direct_half_bytes: 0,
        direct_channels: 1,
        local_blocks: 0,
        part: None,
    }
}

#[test]
fn plan_for_k1_is_a_copy_or_nothing() {
    let s = spans(1, 10, 4);
    let p = plan(
        Collective::ReduceScatter,
        &[0],
        &s,
        DataType::F32,
        opts(1 << 21, 4),
    )
    .unwrap();
    assert!(matches!(p, Plan::Copy { bytes: 40, .. }));
    let mut s = s;
    s[0].recv = s[0].send;
    let p = plan(
        Collective::ReduceScatter,
        &[0],
        &s,
        DataType::F32,
        opts(1 << 21, 4),
    )
    .unwrap();
    assert_eq!(p, Plan::Nothing);
}

/// Staging padding is only paid for when a block starts off a pack boundary:
/// aligned f32 blocks of whole packs get 8 tiles of 32 KiB per slot out of
/// 2 MiB, shifted or ragged ones 7 tiles (the slots stay 256 KiB apart in
/// every call).
#[test]
fn plan_pads_only_when_a_residue_needs_it() {
    let tiles = |s: &[BufferSpan]| match plan(
        Collective::ReduceScatter,
        &[0; 4],
        s,
        DataType::F32,
        opts(2 << 20, GPU_THREADS),
    )
    .unwrap()
    {
        Plan::Launch { sizing, .. } => {
            assert_eq!(sizing.slot_stride_bytes, 8 * 32768);
            sizing.slot_elems / sizing.tile_elems
        }
        p => panic!("expected a launch, got {p:?}"),
    };
    let n = 1 << 20;
    assert_eq!(tiles(&spans(4, n, 4)), 8);
    // Ragged blocks: each recv sits at its block's residue (wide path).
    let ragged: Vec<BufferSpan> = spans(4, n + 1, 4)
        .into_iter()
        .enumerate()
        .map(|(u, mut s)| {
            s.recv += (u as u64 * (n + 1) * 4) % 16;
            s
        })
        .collect();
    assert_eq!(tiles(&ragged), 7);
    // The same recvs left on pack boundaries force the scalar path, whose
    // slots start at 0 and need no padding.
    assert_eq!(tiles(&spans(4, n + 1, 4)), 8);
    let shifted: Vec<BufferSpan> = spans(4, n, 4)
        .into_iter()
        .map(|mut s| {
            s.send += 4;
            s.recv += 4;
            s
        })
        .collect();
    assert_eq!(tiles(&shifted), 7);
}

/// Automatic channels grow with the message, up to what the ranks have; a
/// configured count is used as given.
#[test]
fn plan_chooses_channels_by_size() {
    let channels = |n: u64, ch: Option<u64>| {
        let o = CallOpts {
            channels: ch,
            max_channels: 8,
            ..opts(2 << 20, GPU_THREADS)
        };
        match plan(
            Collective::ReduceScatter,
            &[0; 4],
            &spans(4, n, 4),
            DataType::F32,
            o,
        )
        .unwrap()
        {
            Plan::Launch {
                channels, works, ..
            } => {
                assert!(works.iter().all(|w| w.channels == channels));
                channels
            }
            p => panic!("expected a launch, got {p:?}"),
        }
    };
    assert_eq!(channels(1000, None), 1);
    assert_eq!(channels(1 << 16, None), 1);
    assert_eq!(channels(1 << 17, None), 2);
    assert_eq!(channels(1 << 28, None), 8);
    assert_eq!(channels(1000, Some(3)), 3);
}

/// The flag scope and the neighbours' state travel into every rank's
/// connection: system scope only when the ranks span devices, and each
/// channel wired to the same channel of its ring neighbours.
#[test]
fn connections_wire_the_ring() {
    use ringreduce::kernels::Scope;
    let ring = RingOrder::new(&[2, 0, 1]).unwrap();
    let w: Vec<RankWiring> = (0..3u64)
        .map(|u| RankWiring {
            user_from_ring: 0,
            channels: (0..2u64)
                .map(|c| ChannelWiring {
                    staging: 1000 * u + c,
                    tail: 2000 * u + c,
                    head: 3000 * u + c,
                    status: 0,
                })
                .collect(),
            direct_peers: 0,
        })
        .collect();
    for system_scope in [false, true] {
        let st = Static {
            system_scope,
            ..Static::default()
        };
        let conns = connect(&ring, &w, st);
        let want = if system_scope { Scope::Sys } else { Scope::Gpu };
        assert!(conns.iter().all(|c| c.rank.scope() == want));
        // User 2 is at ring position 0: its successor is 0, its predecessor 1.
        let c = &conns[2];
        assert_eq!(c.rank.ring_pos, 0);
        for ch in 0..2u64 {
            let cc = &c.channels[ch as usize];
            assert_eq!(cc.next_staging, ch);
            assert_eq!(cc.next_tail, ch);
            assert_eq!(cc.prev_head, 3000 + ch);
            assert_eq!((cc.this_staging, cc.seq), (2000 + ch, 0));
        }
    }
}
