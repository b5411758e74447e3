//! Fault and bad-input scenarios, written once over the one front end
//! ([`Comm<B>`]) and run on every backend: each backend's test file passes
//! a maker of communicators (`k` ranks from a config) and the sizes its
//! execution needs. What a scenario asserts holds for every backend.

use crate::checked::lengths;
use ringreduce::{
    Algo, Backend, Collective, Collectives, Comm, CommConfig, Error, Op, Region, WaitKind,
};
use std::ops::Deref;
use std::time::{Duration, Instant};

/// One rank's send and recv buffers on backend `B`.
pub type Pair<B> = (
    <Comm<B> as Collectives>::Buf<f32>,
    <Comm<B> as Collectives>::Buf<f32>,
);

/// Written to every output before a call, so that a write shows.
pub const SENTINEL: f32 = -7.25;

/// What rank `r` sends at element `i`: small integers, exact in any fold.
pub fn input(r: usize, i: usize) -> f32 {
    ((i * 3 + r) % 11) as f32
}

/// Each rank's (send, recv) for collective `c` with count `n`: inputs by
/// [`input`], outputs [`SENTINEL`].
pub fn buffers<B: Backend>(comm: &Comm<B>, c: Collective, n: usize) -> Vec<Pair<B>> {
    let (send_len, recv_len) = lengths(c, comm.k(), n);
    (0..comm.k())
        .map(|u| {
            let data: Vec<f32> = (0..send_len).map(|i| input(u, i)).collect();
            (
                comm.upload(u, &data).unwrap(),
                comm.upload(u, &vec![SENTINEL; recv_len]).unwrap(),
            )
        })
        .collect()
}

/// Collective `c` (sum) over `bufs`, out of place.
pub fn enqueue<B: Backend>(
    comm: &Comm<B>,
    c: Collective,
    bufs: &mut [Pair<B>],
) -> ringreduce::Result<()> {
    let mut regions: Vec<Region<'_, B::Buf<f32>>> = bufs
        .iter_mut()
        .map(|(s, r)| Region::OutOfPlace {
            send_at: 0..B::len_of(s),
            recv_at: 0..B::len_of(r),
            send: s,
            recv: r,
        })
        .collect();
    Collectives::collective(comm, c, &mut regions, Op::Sum)
}

/// The first output element that is not [`SENTINEL`], if any.
pub fn touched<B: Backend>(comm: &Comm<B>, bufs: &[Pair<B>]) -> Option<String> {
    bufs.iter().enumerate().find_map(|(u, (_, r))| {
        let got = comm.download(u, r).unwrap();
        got.iter()
            .position(|&x| x != SENTINEL)
            .map(|i| format!("rank {u} element {i} is {}", got[i]))
    })
}

/// Whether every rank's output of a sum of `c` with count `n` over
/// [`input`]s is right.
pub fn correct<B: Backend>(comm: &Comm<B>, c: Collective, n: usize, bufs: &[Pair<B>]) -> bool {
    let k = comm.k();
    let sum = |i: usize| (0..k).map(|r| input(r, i)).sum::<f32>();
    bufs.iter().enumerate().all(|(u, (_, r))| {
        let got = comm.download(u, r).unwrap();
        got.iter().enumerate().all(|(i, &g)| match c {
            Collective::ReduceScatter => g == sum(u * n + i),
            Collective::AllGather => g == input(i / n, i % n),
            Collective::AllReduce => g == sum(i),
        })
    })
}

/// A correct sum of `c` on a fresh communicator from `make`: what a
/// process can still do after a fault.
pub fn healthy<B: Backend, H: Deref<Target = Comm<B>>>(
    make: &impl Fn(usize, CommConfig) -> H,
    k: usize,
    c: Collective,
) {
    let comm = make(k, CommConfig::default());
    let n = 1000;
    let mut b = buffers(&comm, c, n);
    enqueue(&comm, c, &mut b).unwrap();
    comm.synchronize().unwrap();
    assert!(correct(&comm, c, n, &b), "a new communicator is wrong");
}

/// A rank withheld from every launch: the collective ends in
/// [`Error::Timeout`] naming it, no earlier than the timeout and less than
/// a second after; every rank that ran names its wait; the communicator is
/// broken afterwards. `cfg` carries the timeout and whatever makes the
/// call long enough (count `n`) to wait on the missing rank.
pub fn missing_rank<B: Backend, H: Deref<Target = Comm<B>>>(
    make: &impl Fn(usize, CommConfig) -> H,
    cfg: CommConfig,
    k: usize,
    c: Collective,
    algo: Algo,
    n: usize,
) {
    let missing = 1;
    let timeout = cfg.timeout.expect("the scenario's timeout");
    let comm = make(k, cfg.algorithm(algo));
    comm.withhold_rank(Some(missing));
    let mut b = buffers(&comm, c, n);
    let t0 = Instant::now();
    enqueue(&comm, c, &mut b).unwrap();
    let err = comm
        .synchronize()
        .expect_err("a missing rank must time out");
    let took = t0.elapsed();
    let what = format!("{} {} missing rank", algo.name(), c.name());
    println!("{what}: error after {took:?}: {err}");
    // A wait gives up no earlier than its timeout, and not much later.
    assert!(took >= timeout, "{what}: gave up early, after {took:?}");
    assert!(
        took < timeout + Duration::from_secs(1),
        "{what}: took {took:?}"
    );
    assert!(
        matches!(&err, Error::Timeout(t) if t.peer == missing),
        "{what}: {err}"
    );
    let errs = comm.rank_errors();
    let (pred, succ) = comm.ring_order().neighbours(missing);
    for (u, e) in errs.iter().enumerate() {
        if u == missing {
            assert!(e.is_none(), "{what}: the missing rank reported {e:?}");
            continue;
        }
        let Some(Error::Timeout(t)) = e else {
            panic!("{what}: rank {u} reported {e:?}")
        };
        if algo != Algo::Ring {
            // Every rank waits on every peer's ready word directly.
            assert!(
                t.peer == missing && t.waiting_for == WaitKind::PeerReady,
                "{what}: rank {u}: {t:?}"
            );
        } else if u == succ {
            assert_eq!(t.peer, missing, "{what}: the successor");
        } else if u == pred {
            // It stalls either on the missing rank's full staging ring or,
            // sooner, on data from upstream, which itself waits on it.
            assert_eq!(
                t.peer == missing,
                t.waiting_for == WaitKind::SlotFree,
                "{what}: the predecessor: {t:?}"
            );
        }
    }
    // Broken from now on, with nothing run.
    assert!(matches!(enqueue(&comm, c, &mut b), Err(Error::Broken(_))));
    assert!(matches!(comm.synchronize(), Err(Error::Broken(_))));
}

/// An abort from another thread while a collective waits for a rank that
/// never comes: every rank that ran returns [`Error::Aborted`] within
/// `within` of the call.
pub fn abort_mid_call<B: Backend, H: Deref<Target = Comm<B>> + Sync>(
    make: &impl Fn(usize, CommConfig) -> H,
    cfg: CommConfig,
    k: usize,
    c: Collective,
    algo: Algo,
    n: usize,
    within: Duration,
) {
    let comm = make(k, cfg.timeout(Duration::from_secs(60)).algorithm(algo));
    let withheld = k - 1;
    comm.withhold_rank(Some(withheld));
    let mut b = buffers(&comm, c, n);
    enqueue(&comm, c, &mut b).unwrap();
    let waited = std::thread::scope(|s| {
        let h = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            let t = Instant::now();
            comm.abort();
            t
        });
        let err = comm.synchronize().expect_err("aborted");
        assert!(matches!(err, Error::Aborted { .. }), "{err}");
        h.join().unwrap().elapsed()
    });
    let what = format!("{} {} abort", algo.name(), c.name());
    println!("{what}: every rank returned {waited:?} after abort()");
    assert!(waited < within, "{what}: took {waited:?}");
    for (u, e) in comm.rank_errors().iter().enumerate() {
        if u != withheld {
            assert!(
                matches!(e, Some(Error::Aborted { .. })),
                "{what}: rank {u}: {e:?}"
            );
        }
    }
    // Every later call is refused.
    assert!(matches!(
        enqueue(&comm, c, &mut b),
        Err(Error::Aborted { .. })
    ));
}

/// An abort before the enqueue, `runs` times: the collective is refused
/// with `Aborted` and nothing is written, every time (the kernels' own
/// abort polling would miss it when every flag is ready at the first look).
pub fn abort_before_enqueue<B: Backend, H: Deref<Target = Comm<B>>>(
    make: &impl Fn(usize, CommConfig) -> H,
    runs: usize,
) {
    let c = Collective::ReduceScatter;
    for i in 0..runs {
        let comm = make(2, CommConfig::default());
        let mut b = buffers(&comm, c, 64);
        comm.abort();
        let aborted = Err(Error::Aborted { seen: None });
        assert_eq!(enqueue(&comm, c, &mut b), aborted, "run {i}");
        assert_eq!(comm.synchronize(), aborted, "run {i}");
        assert_eq!(touched(&comm, &b), None, "run {i}");
    }
    println!("abort before enqueue: {runs} of {runs} refused, nothing written");
}

/// Every kind of bad buffer a region can describe, on one communicator:
/// each call is a typed error, writes nothing, and leaves the communicator
/// working (a correct call follows each).
pub fn bad_input<B: Backend, H: Deref<Target = Comm<B>>>(make: &impl Fn(usize, CommConfig) -> H) {
    let (k, n) = (3, 100);
    let comm = make(k, CommConfig::default());
    let c = Collective::ReduceScatter;
    let (send_len, recv_len) = lengths(c, k, n);
    let mut b = buffers(&comm, c, n);
    // A rank the communicator does not have, for its buffers' calls.
    let nowhere = Err(Error::RankOutOfRange { rank: k, world: k });
    assert_eq!(comm.upload(k, &[1.0f32]).map(|_| ()), nowhere);
    assert_eq!(comm.read(k, &b[0].1, 0..1).map(|_| ()), nowhere);
    assert_eq!(comm.write(k, &mut b[0].1, 0, &[1.0]), nowhere);
    for bad in Bad::ALL {
        let what = bad.what();
        let mut regions = bad.regions(&mut b, send_len, recv_len);
        let e = Collectives::collective(&*comm, c, &mut regions, Op::Sum).expect_err(what);
        drop(regions);
        assert!(bad.expected(&e), "{what}: unexpected error {e}");
        comm.synchronize().unwrap();
        // Nothing written: no output, and no input.
        if let Some(t) = touched(&comm, &b) {
            panic!("{what}: written after {e}: {t}");
        }
        for (u, (s, _)) in b.iter().enumerate() {
            let got = comm.download(u, s).unwrap();
            assert!(
                got.iter().enumerate().all(|(i, &x)| x == input(u, i)),
                "{what}: rank {u}'s input changed"
            );
        }
        // Still working, on the same buffers.
        enqueue(&comm, c, &mut b).unwrap();
        comm.synchronize().unwrap();
        assert!(correct(&comm, c, n, &b), "{what}: broken after {e}");
        for (u, (_, r)) in b.iter_mut().enumerate() {
            comm.write(u, r, 0, &vec![SENTINEL; recv_len]).unwrap();
        }
        println!("bad input ({what}): {e}");
    }
}

/// The bad reduce-scatters of [`bad_input`], on 3 ranks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bad {
    Missing,
    ShortSend,
    CountDiffers,
    PastEnd,
    Misplaced,
    InPlaceLength,
}

impl Bad {
    const ALL: [Bad; 6] = [
        Bad::Missing,
        Bad::ShortSend,
        Bad::CountDiffers,
        Bad::PastEnd,
        Bad::Misplaced,
        Bad::InPlaceLength,
    ];

    fn what(self) -> &'static str {
        match self {
            Bad::Missing => "one rank's buffers missing",
            Bad::ShortSend => "a send shorter than k blocks",
            Bad::CountDiffers => "counts that differ between ranks",
            Bad::PastEnd => "a range past a buffer's end",
            Bad::Misplaced => "send and recv overlapping, but not in place",
            Bad::InPlaceLength => "an in-place buffer that is no k equal blocks",
        }
    }

    fn expected(self, e: &Error) -> bool {
        match self {
            Bad::Missing => matches!(e, Error::WrongBufferCount { got: 2, k: 3 }),
            Bad::ShortSend => matches!(
                e,
                Error::SendLength {
                    rank: 1,
                    send_len: 299,
                    expected: 300,
                    collective: "reduce-scatter"
                }
            ),
            Bad::CountDiffers => matches!(
                e,
                Error::CountMismatch {
                    rank: 2,
                    got: 99,
                    want: 100
                }
            ),
            Bad::PastEnd => matches!(
                e,
                Error::BufferOutOfBounds {
                    rank: 0,
                    which: "recv",
                    ..
                }
            ),
            Bad::Misplaced => matches!(e, Error::InPlaceMisplaced { rank: 1, .. }),
            Bad::InPlaceLength => {
                matches!(e, Error::InPlaceLength { rank: 0, k: 3, .. })
                    && e.to_string().contains("in-place buffer holds")
            }
        }
    }

    /// Good out-of-place regions of `s` and `r` elements, but for the one
    /// rank this case spoils.
    fn regions<Buf>(self, bufs: &mut [(Buf, Buf)], s: usize, r: usize) -> Vec<Region<'_, Buf>> {
        bufs.iter_mut()
            .enumerate()
            .filter_map(|(u, (send, recv))| {
                let (mut send_at, mut recv_at) = (0..s, 0..r);
                match (self, u) {
                    (Bad::Missing, 2) => return None,
                    (Bad::ShortSend, 1) => send_at.end -= 1,
                    (Bad::CountDiffers, 2) => (send_at.end, recv_at.end) = (s - 3, r - 1),
                    (Bad::PastEnd, 0) => recv_at = 1..r + 1,
                    // Rank 1's output inside its input, at block 2 (its
                    // in-place place is block 1).
                    (Bad::Misplaced, 1) => {
                        return Some(Region::Split {
                            buf: send,
                            send_at,
                            recv_at: 2 * r..3 * r,
                        })
                    }
                    (Bad::InPlaceLength, 0) => {
                        return Some(Region::InPlace {
                            buf: send,
                            at: 0..s - 1,
                        })
                    }
                    _ => {}
                }
                Some(Region::OutOfPlace {
                    send,
                    send_at,
                    recv,
                    recv_at,
                })
            })
            .collect()
    }
}

/// Send and recv as two parts of one allocation ([`Region::Split`]), for
/// every collective, apart (input first or output first) and in the
/// collective's in-place layout: each result equals the out-of-place one.
pub fn split_regions<B: Backend, H: Deref<Target = Comm<B>>>(
    make: &impl Fn(usize, CommConfig) -> H,
) {
    let (k, n) = (3, 257);
    let comm = make(k, CommConfig::default());
    for c in Collective::ALL {
        let (send_len, recv_len) = lengths(c, k, n);
        let mut want = buffers(&comm, c, n);
        enqueue(&comm, c, &mut want).unwrap();
        comm.synchronize().unwrap();
        for layout in ["input first", "output first", "in place"] {
            let len = match layout {
                "in place" => send_len.max(recv_len),
                _ => send_len + recv_len + 5,
            };
            let mut bufs: Vec<B::Buf<f32>> = (0..k)
                .map(|u| comm.upload(u, &vec![SENTINEL; len]).unwrap())
                .collect();
            let at = |u: usize| -> (std::ops::Range<usize>, std::ops::Range<usize>) {
                match layout {
                    "input first" => (0..send_len, send_len + 5..len),
                    "output first" => (recv_len + 5..len, 0..recv_len),
                    _ => {
                        let (i, o) = c.in_place_offsets(u as u64, n as u64);
                        let (i, o) = (i as usize, o as usize);
                        (i..i + send_len, o..o + recv_len)
                    }
                }
            };
            for (u, buf) in bufs.iter_mut().enumerate() {
                let data: Vec<f32> = (0..send_len).map(|i| input(u, i)).collect();
                comm.write(u, buf, at(u).0.start, &data).unwrap();
            }
            let mut regions: Vec<Region<'_, B::Buf<f32>>> = bufs
                .iter_mut()
                .enumerate()
                .map(|(u, buf)| Region::Split {
                    buf,
                    send_at: at(u).0,
                    recv_at: at(u).1,
                })
                .collect();
            Collectives::collective(&*comm, c, &mut regions, Op::Sum).unwrap();
            drop(regions);
            comm.synchronize().unwrap();
            for (u, buf) in bufs.iter().enumerate() {
                let got = comm.read(u, buf, at(u).1).unwrap();
                let expect = comm.download(u, &want[u].1).unwrap();
                assert_eq!(got, expect, "{} {layout}: rank {u}", c.name());
            }
        }
    }
    println!("split regions: every collective, apart and in place");
}
