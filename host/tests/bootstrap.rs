//! The rendezvous on this host, ranks as threads: every rank gets every
//! identity; a job that cannot start gives every rank the same typed
//! error, within its timeout; strangers and other jobs on the port are
//! refused without harming the job.

use ringreduce::bootstrap::{rendezvous, Identity, Rendezvous, UniqueId};
use ringreduce::Error;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn me(rank: u32) -> Identity {
    Identity {
        rank,
        host: "test-host".into(),
        pid: std::process::id(),
        device: [rank as u8; 16],
        exports: vec![rank as u8; rank as usize + 1],
    }
}

/// Ranks `(rank, world)` of job `id` as threads, rank 0 first.
fn meet(
    id: UniqueId,
    ranks: &[(u32, usize)],
    timeout: Duration,
) -> Vec<ringreduce::Result<Rendezvous>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .map(|&(r, world)| s.spawn(move || rendezvous(&id, me(r), world, timeout)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_rank_gets_every_identity() {
    let id = UniqueId::new().unwrap();
    let world = 5;
    let ranks: Vec<(u32, usize)> = (0..world as u32).map(|r| (r, world)).collect();
    for (r, got) in meet(id, &ranks, Duration::from_secs(10))
        .into_iter()
        .enumerate()
    {
        let got = got.unwrap();
        assert_eq!(got.rank, r);
        assert_eq!(got.ranks, (0..world as u32).map(me).collect::<Vec<_>>());
        // Rank 0 holds a link to every member; a member one to rank 0.
        let links = got.links.iter().filter(|l| l.is_some()).count();
        assert_eq!(links, if r == 0 { world - 1 } else { 1 });
    }
}

#[test]
fn a_job_of_one_needs_nobody() {
    let id = UniqueId::new().unwrap();
    let got = rendezvous(&id, me(0), 1, Duration::from_secs(1)).unwrap();
    assert_eq!(got.ranks, vec![me(0)]);
}

#[test]
fn a_missing_rank_fails_every_rank_within_the_timeout_naming_it() {
    let id = UniqueId::new().unwrap();
    let timeout = Duration::from_millis(700);
    let t0 = Instant::now();
    let got = meet(id, &[(0, 4), (1, 4), (3, 4)], timeout);
    let took = t0.elapsed();
    for g in got {
        match g {
            Err(Error::RanksMissing { ranks, .. }) => assert_eq!(ranks, vec![2]),
            other => panic!("{other:?}"),
        }
    }
    assert!(took >= timeout, "gave up early: {took:?}");
    assert!(took < timeout + Duration::from_secs(1), "took {took:?}");
}

#[test]
fn a_member_without_rank_0_fails_naming_it() {
    // An address nothing listens at: a port just freed.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let id = UniqueId::at(free.local_addr().unwrap(), 1);
    drop(free);
    let timeout = Duration::from_millis(400);
    let t0 = Instant::now();
    let got = rendezvous(&id, me(1), 2, timeout);
    assert!(
        matches!(&got, Err(Error::RanksMissing { ranks, .. }) if ranks == &vec![0]),
        "{got:?}"
    );
    let took = t0.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(1),
        "{took:?}"
    );
}

#[test]
fn disagreements_fail_the_whole_job_with_one_error() {
    let id = UniqueId::new().unwrap();
    let t = Duration::from_secs(10);
    for g in meet(id, &[(0, 3), (1, 3), (2, 4)], t) {
        assert!(
            matches!(
                g,
                Err(Error::WorldMismatch {
                    rank: 2,
                    theirs: 4,
                    ours: 3
                })
            ),
            "{g:?}"
        );
    }
    let id = UniqueId::new().unwrap();
    let got = meet(id, &[(0, 3), (1, 3), (1, 3)], t);
    for g in &got {
        assert!(matches!(g, Err(Error::DuplicateRank { rank: 1 })), "{g:?}");
    }
    // Checked before any socket: a rank outside the world.
    let id = UniqueId::new().unwrap();
    assert!(matches!(
        rendezvous(&id, me(3), 3, t),
        Err(Error::RankOutOfRange { rank: 3, world: 3 })
    ));
    assert!(matches!(
        rendezvous(&id, me(0), 0, t),
        Err(Error::ZeroRanks)
    ));
}

#[test]
fn another_job_or_a_stranger_on_the_port_is_refused_and_the_job_goes_on() {
    let id = UniqueId::new().unwrap();
    let other = UniqueId::at(id.root(), id.job() ^ 1);
    let t = Duration::from_secs(10);
    std::thread::scope(|s| {
        let root = s.spawn(|| rendezvous(&id, me(0), 2, t));
        // A stranger: connects, sends bytes that are no message, leaves.
        let mut c = loop {
            if let Ok(c) = TcpStream::connect(id.root()) {
                break c;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        drop(c);
        // A rank of another job.
        let foreign = rendezvous(&other, me(1), 2, t);
        assert!(matches!(foreign, Err(Error::ForeignJob)), "{foreign:?}");
        // The job's own rank 1 still meets rank 0.
        let member = rendezvous(&id, me(1), 2, t).unwrap();
        let root = root.join().unwrap().unwrap();
        assert_eq!(member.ranks, root.ranks);
    });
}

/// After the rendezvous, `exchange` gives every rank every rank's bytes
/// (a barrier); a rank that leaves instead fails it on every other rank,
/// named, well before the timeout.
#[test]
fn the_exchange_gathers_or_names_the_rank_that_left() {
    let id = UniqueId::new().unwrap();
    let world = 4;
    let ranks: Vec<(u32, usize)> = (0..world as u32).map(|r| (r, world)).collect();
    let met: Vec<Rendezvous> = meet(id, &ranks, Duration::from_secs(10))
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let wait = Duration::from_secs(10);
    let got: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = met
            .into_iter()
            .map(|mut m| s.spawn(move || (m.exchange(&[m.rank as u8; 3], wait), m)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: Vec<Vec<u8>> = (0..world as u8).map(|r| vec![r; 3]).collect();
    let mut again = Vec::new();
    for (parts, m) in got {
        assert_eq!(parts.unwrap(), want, "rank {}", m.rank);
        again.push(m);
    }
    // Rank 2 leaves: the others' next exchange fails naming it.
    let t0 = Instant::now();
    let leaver = again.remove(2);
    let got: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = again
            .into_iter()
            .map(|mut m| s.spawn(move || (m.rank, m.exchange(b"x", wait))))
            .collect();
        drop(leaver);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, e) in got {
        assert!(
            matches!(e, Err(Error::PeerLost { rank: 2 })),
            "rank {r}: {e:?}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}
