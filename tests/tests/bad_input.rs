//! Every bad input is a typed error, launches nothing (the output sentinel
//! stays untouched) and leaves the communicator working.

use ringreduce::internals::{plan_reduce_scatter, validate, BufferSpan, Control, RankWiring};
use ringreduce::{
    CommConfig, Communicator, CpuBuffers, CpuCommunicator, DataType, Error, HostBuffer, Op,
    RingOrder,
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
            r.write(0, &[SENTINEL; N]);
        }
    }
}

#[test]
fn wrong_number_of_pairs() {
    let s = setup();
    let mut b = s.good();
    b.pop();
    s.expect(&b, |e| {
        matches!(e, Error::WrongBufferCount { got: 2, k: 3 })
    });
}

#[test]
fn send_not_k_times_recv() {
    let s = setup();
    let mut b = s.good();
    b[1] = CpuBuffers::out_of_place(s.send[1].view(0..K * N - 1), s.recv[1].as_view());
    s.expect(&b, |e| {
        matches!(
            e,
            Error::SendLength {
                rank: 1,
                send_len: 299,
                expected: 300
            }
        )
    });
}

#[test]
fn counts_differ_between_ranks() {
    let s = setup();
    let mut b = s.good();
    b[2] = CpuBuffers::out_of_place(s.send[2].view(0..K * (N - 1)), s.recv[2].view(0..N - 1));
    s.expect(&b, |e| {
        matches!(
            e,
            Error::CountMismatch {
                rank: 2,
                got: 99,
                want: 100
            }
        )
    });
}

#[test]
fn in_place_at_the_wrong_block() {
    let s = setup();
    let mut b = s.good();
    // Rank 1's recv inside its own send, but at block 2.
    b[1] = CpuBuffers::out_of_place(s.send[1].as_view(), s.send[1].view(2 * N..3 * N));
    s.expect(&b, |e| matches!(e, Error::InPlaceMisplaced { rank: 1 }));
}

#[test]
fn in_place_buffer_of_the_wrong_length() {
    let s = setup();
    let mut b = s.good();
    // K * N - 1 elements cannot be K equal blocks.
    b[2] = CpuBuffers::in_place(s.send[2].view(0..K * N - 1));
    s.expect(&b, |e| {
        matches!(e, Error::InPlaceLength { rank: 2, k: K, .. })
            && e.to_string().contains("in-place buffer holds")
    });
}

#[test]
fn overlapping_outputs_and_inputs() {
    let s = setup();
    let mut b = s.good();
    b[1] = CpuBuffers::out_of_place(s.send[1].as_view(), s.recv[0].as_view());
    s.expect(&b, |e| matches!(e, Error::Overlap { a: 0, b: 1, .. }));
    let mut b = s.good();
    b[2] = CpuBuffers::out_of_place(s.send[2].as_view(), s.send[0].view(N..2 * N));
    s.expect(&b, |e| matches!(e, Error::Overlap { a: 0, b: 2, .. }));
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
        Err(Error::BufferTooSmall {
            k: 4,
            have: 1000,
            ..
        })
    ));
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
        validate(&s, k, DataType::F64),
        Err(Error::Overflow { k: 4, .. })
    ));
}

#[test]
fn misaligned_addresses() {
    let mut s = spans(2, 10, 4);
    s[1].recv += 2;
    assert!(matches!(
        validate(&s, 2, DataType::F32),
        Err(Error::Misaligned {
            rank: 1,
            which: "recv",
            ..
        })
    ));
}

#[test]
fn plan_for_k1_is_a_copy_or_nothing() {
    let ring = RingOrder::identity(1);
    let w = [RankWiring::default()];
    let s = spans(1, 10, 4);
    let p =
        plan_reduce_scatter(&ring, &w, &s, DataType::F32, 1 << 21, 4, Control::default()).unwrap();
    assert!(matches!(
        p,
        ringreduce::internals::Plan::Copy { bytes: 40, .. }
    ));
    let mut s = s;
    s[0].recv = s[0].send;
    let p =
        plan_reduce_scatter(&ring, &w, &s, DataType::F32, 1 << 21, 4, Control::default()).unwrap();
    assert_eq!(p, ringreduce::internals::Plan::Nothing);
}

/// Staging padding is only paid for when a block starts off a pack boundary:
/// aligned f32 blocks of whole packs get 8 tiles of 32 KiB per slot out of
/// 2 MiB, shifted or ragged ones 7 tiles and a pack.
#[test]
fn plan_pads_only_when_a_residue_needs_it() {
    use ringreduce::kernels::plan::GPU_THREADS;
    let ring = RingOrder::identity(4);
    let w = [RankWiring::default(); 4];
    let stride = |s: &[BufferSpan]| match plan_reduce_scatter(
        &ring,
        &w,
        s,
        DataType::F32,
        2 << 20,
        GPU_THREADS,
        Control::default(),
    )
    .unwrap()
    {
        ringreduce::internals::Plan::Launch { sizing, .. } => sizing.slot_stride_bytes,
        p => panic!("expected a launch, got {p:?}"),
    };
    let n = 1 << 20;
    assert_eq!(stride(&spans(4, n, 4)), 8 * 32768);
    // Ragged blocks: each recv sits at its block's residue (wide path).
    let ragged: Vec<BufferSpan> = spans(4, n + 1, 4)
        .into_iter()
        .enumerate()
        .map(|(u, mut s)| {
            s.recv += (u as u64 * (n + 1) * 4) % 16;
            s
        })
        .collect();
    assert_eq!(stride(&ragged), 7 * 32768 + 16);
    // The same recvs left on pack boundaries force the scalar path, whose
    // slots start at 0 and need no padding.
    assert_eq!(stride(&spans(4, n + 1, 4)), 8 * 32768);
    let shifted: Vec<BufferSpan> = spans(4, n, 4)
        .into_iter()
        .map(|mut s| {
            s.send += 4;
            s.recv += 4;
            s
        })
        .collect();
    assert_eq!(stride(&shifted), 7 * 32768 + 16);
}

/// The flag scope travels to every rank's arguments: system scope only when
/// the communicator says its ranks span devices.
#[test]
fn plan_carries_the_flag_scope() {
    use ringreduce::kernels::Scope;
    let ring = RingOrder::identity(3);
    let w = [RankWiring::default(); 3];
    let s = spans(3, 1000, 4);
    for system_scope in [false, true] {
        let control = Control {
            system_scope,
            ..Control::default()
        };
        match plan_reduce_scatter(&ring, &w, &s, DataType::F32, 1 << 21, 4, control).unwrap() {
            ringreduce::internals::Plan::Launch { args, .. } => {
                let want = if system_scope { Scope::Sys } else { Scope::Gpu };
                assert!(args.iter().all(|a| a.scope() == want));
            }
            p => panic!("expected a launch, got {p:?}"),
        }
    }
}
