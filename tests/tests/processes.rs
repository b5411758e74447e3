//! Jobs of real processes, one per rank, started as `torchrun` and
//! `mpirun` start them (their variables), meeting through the bootstrap:
//! every rank gets the same table; a rank killed before it arrives makes
//! every other rank fail within the timeout, naming it; a bad variable is
//! an error that names it.

use ringreduce_tests::procs::{self, free_port};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RANK_BIN: &str = env!("CARGO_BIN_EXE_rank");

fn spawn<K: AsRef<std::ffi::OsStr>>(vars: &[(K, String)]) -> Child {
    let mut c = Command::new(RANK_BIN);
    c.env_clear()
        .env("RINGREDUCE_TIMEOUT_SECS", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in vars {
        c.env(k, v);
    }
    c.spawn().expect("spawn a rank")
}

/// Each process's exit code and its one line.
fn finish(children: Vec<Child>) -> Vec<(i32, String)> {
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.code().unwrap_or(-1), line)
        })
        .collect()
}

/// torchrun's variables for rank `rank` of `world`, rank 0 at `port`.
fn torchrun(rank: usize, world: usize, port: u16) -> Vec<(String, String)> {
    procs::torchrun(rank, world, port, &[])
}

#[test]
fn torchrun_and_mpirun_jobs_meet() {
    let world = 4;
    let port = free_port();
    let got = finish(
        (0..world)
            .map(|r| spawn(&torchrun(r, world, port)))
            .collect(),
    );
    let first = &got[0].1;
    assert!(first.starts_with("table 4 "), "{got:?}");
    assert!(
        got.iter().all(|(code, line)| *code == 0 && line == first),
        "{got:?}"
    );

    let port = free_port();
    let mpi = |r: usize| {
        vec![
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "3".to_string()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "3".to_string()),
            ("RINGREDUCE_ROOT", format!("127.0.0.1:{port}")),
        ]
    };
    let got = finish((0..3).map(|r| spawn(&mpi(r))).collect());
    assert!(
        got.iter()
            .all(|(code, line)| *code == 0 && line == &got[0].1 && line.starts_with("table 3 ")),
        "{got:?}"
    );
}

#[test]
fn a_rank_killed_before_it_arrives_fails_the_others_naming_it() {
    let (world, port) = (3, free_port());
    let t0 = Instant::now();
    let mut stalled = {
        spawn(&procs::torchrun(
            2,
            world,
            port,
            &[("RINGREDUCE_TEST_STALL", "1".into())],
        ))
    };
    let others: Vec<Child> = (0..2).map(|r| spawn(&torchrun(r, world, port))).collect();
    std::thread::sleep(Duration::from_millis(300));
    stalled.kill().expect("kill -9 the stalled rank");
    let _ = stalled.wait();
    let got = finish(others);
    let took = t0.elapsed();
    for (code, line) in &got {
        assert_eq!(*code, 2, "{got:?}");
        assert!(line.contains("ranks [2] never arrived"), "{got:?}");
    }
    // The timeout is 2 s: no rank gave up before it, and every rank has
    // answered within it and a second (and the processes' start).
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(
        took < Duration::from_secs(3) + Duration::from_millis(500),
        "{took:?}"
    );
}

#[test]
fn a_bad_variable_is_an_error_naming_it() {
    let mut v = torchrun(0, 2, free_port());
    v.retain(|(k, _)| *k != "WORLD_SIZE");
    let got = finish(vec![spawn(&v)]);
    assert_eq!(got[0].0, 2);
    assert!(got[0].1.contains("WORLD_SIZE"), "{got:?}");
    let got = finish(vec![spawn(&[("PATH", "/usr/bin".into())])]);
    assert_eq!(got[0].0, 2);
    assert!(got[0].1.contains("no launcher"), "{got:?}");
}

/// A job of `world` ranks that watch their peers for `watch_ms` after
/// the rendezvous, with extra variables for some ranks.
fn watching(
    world: usize,
    watch_ms: u64,
    extra: &[(usize, &'static str, &'static str)],
) -> Vec<Child> {
    let port = free_port();
    (0..world)
        .map(|r| {
            let mut v = vec![("RINGREDUCE_TEST_WATCH", watch_ms.to_string())];
            for &(who, k, val) in extra {
                if who == r {
                    v.push((k, val.to_string()));
                }
            }
            spawn(&procs::torchrun(r, world, port, &v))
        })
        .collect()
}

#[test]
fn a_peer_killed_after_the_rendezvous_is_reported_to_every_rank() {
    // A member dies, then rank 0 (the hub) itself.
    for dead in [2usize, 0] {
        let mut all = watching(3, 2500, &[(dead, "RINGREDUCE_TEST_HOLD", "1")]);
        std::thread::sleep(Duration::from_millis(1000));
        let mut victim = all.remove(dead);
        victim.kill().expect("kill -9");
        let _ = victim.wait();
        let got = finish(all);
        for (code, out) in &got {
            assert_eq!(*code, 0, "{got:?}");
            assert!(out.starts_with("table 3 "), "{got:?}");
            assert!(
                out.contains(&format!("lost {dead}")),
                "rank {dead} died: {got:?}"
            );
            assert_eq!(out.matches("lost").count(), 1, "{got:?}");
        }
    }
}

#[test]
fn an_abort_on_one_rank_reaches_every_rank() {
    let got = finish(watching(3, 1500, &[(1, "RINGREDUCE_TEST_ABORT", "500")]));
    for (r, (code, out)) in got.iter().enumerate() {
        assert_eq!(*code, 0, "{got:?}");
        if r == 1 {
            assert!(out.contains("aborting"), "{got:?}");
        } else {
            assert!(out.contains("aborted 1"), "{got:?}");
        }
        // Everyone leaves cleanly afterwards: no death is reported.
        assert!(!out.contains("lost"), "{got:?}");
    }
}
