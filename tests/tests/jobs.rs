//! Communicators across processes, one per rank, on the CPU execution:
//! each rank a process of the `job` binary, started with a launcher's
//! variables, its memory shared with its peers. The collectives match the
//! reference bit for bit; a peer killed with SIGKILL in the middle of a
//! collective or between two, or one that aborts, ends every survivor's
//! call with a typed error naming it, long before the timeout; ranks with
//! different settings fail alike.

use ringreduce_tests::procs::{
    assert_matrix_passes, assert_survivors_fail, free_port, job_bin, kill_when_ready, Rank,
};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    job_bin(env!("CARGO_BIN_EXE_job"))
}

/// A job of `world` CPU ranks (see [`ringreduce_tests::procs::job`]).
fn job(
    world: usize,
    extra: &[(&str, String)],
    per_rank: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<Rank> {
    ringreduce_tests::procs::job(&bin(), world, extra, per_rank)
}

/// How long a survivor may take to say anything at all.
const ANSWER: Duration = Duration::from_millis(LONG_TIMEOUT_MS + 5_000);

/// The timeout of the fault tests: far longer than the errors may take,
/// so that only the peer watch can explain a quick one.
const LONG_TIMEOUT_MS: u64 = 20_000;

#[test]
fn collectives_across_processes_match_the_reference() {
    for (k, algo) in [
        (2, "auto"),
        (3, "ring"),
        (3, "one-shot"),
        (3, "two-shot"),
        (4, "auto"),
    ] {
        let extra = [
            ("RINGREDUCE_TEST_JOB", "matrix".to_string()),
            ("RINGREDUCE_TEST_ALGO", algo.to_string()),
        ];
        assert_matrix_passes(job(k, &extra, |_| vec![]), &format!("k = {k}, {algo}"));
    }
    // A ring that is not the ranks' order: each process wires its
    // neighbours by the ring, and folds as one process would.
    let extra = [
        ("RINGREDUCE_TEST_JOB", "matrix".to_string()),
        ("RINGREDUCE_TEST_ALGO", "ring".to_string()),
        ("RINGREDUCE_TEST_RING", "2,0,3,1".to_string()),
    ];
    assert_matrix_passes(job(4, &extra, |_| vec![]), "k = 4, ring 2,0,3,1");
}

#[test]
fn open_mpi_and_slurm_jobs_run_too() {
    let port = free_port();
    let root = ("RINGREDUCE_ROOT".to_string(), format!("127.0.0.1:{port}"));
    let mpi: Vec<Rank> = (0..2)
        .map(|r| {
            Rank::spawn(
                &bin(),
                &[
                    ("OMPI_COMM_WORLD_RANK".into(), r.to_string()),
                    ("OMPI_COMM_WORLD_SIZE".into(), "2".into()),
                    ("OMPI_COMM_WORLD_LOCAL_RANK".into(), r.to_string()),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE".into(), "2".into()),
                    root.clone(),
                ],
            )
        })
        .collect();
    assert_matrix_passes(mpi, "mpirun");
    let port = free_port();
    let slurm: Vec<Rank> = (0..3)
        .map(|r| {
            Rank::spawn(
                &bin(),
                &[
                    ("SLURM_PROCID".into(), r.to_string()),
                    ("SLURM_NTASKS".into(), "3".into()),
                    ("SLURM_LOCALID".into(), r.to_string()),
                    ("SLURM_JOB_ID".into(), "4242".into()),
                    ("MASTER_ADDR".into(), "127.0.0.1".into()),
                    ("MASTER_PORT".into(), port.to_string()),
                ],
            )
        })
        .collect();
    assert_matrix_passes(slurm, "srun");
}

fn fault_vars(job: String) -> Vec<(&'static str, String)> {
    vec![
        ("RINGREDUCE_TEST_JOB", job),
        ("RINGREDUCE_TEST_TIMEOUT_MS", LONG_TIMEOUT_MS.to_string()),
    ]
}

#[test]
fn a_rank_killed_mid_collective_fails_every_survivor_naming_it() {
    // A member, then rank 0, whose process is the watch's hub.
    for dead in [2usize, 0] {
        let mut ranks = job(3, &fault_vars(format!("stall:{dead}")), |_| vec![]);
        let pid = ranks[dead].child.id();
        // The others are in their all-reduce, waiting for the dead rank.
        let (ready, settle) = (Duration::from_secs(10), Duration::from_millis(300));
        let killed = kill_when_ready(&mut ranks, dead, "joined", ready, settle);
        assert_survivors_fail(
            ranks,
            dead,
            "PeerLost",
            killed,
            Duration::from_secs(2),
            ANSWER,
        );
        // Its shared memory's name went once its peers had mapped it: a
        // killed job leaves nothing in /dev/shm.
        let left: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        let mine = format!("-p{pid}");
        assert!(!left.iter().any(|n| n.ends_with(&mine)), "{left:?}");
    }
}

#[test]
fn a_rank_killed_while_data_moves_fails_the_others_and_a_new_job_runs() {
    let mut extra = fault_vars("loop".into());
    extra.push(("RINGREDUCE_TEST_ELEMS", (1 << 18).to_string()));
    let mut ranks = job(4, &extra, |_| vec![]);
    // Every rank is in its all-reduces, data in flight, when one dies.
    let (ready, settle) = (Duration::from_secs(10), Duration::from_millis(500));
    let killed = kill_when_ready(&mut ranks, 2, "looping", ready, settle);
    assert_survivors_fail(ranks, 2, "PeerLost", killed, Duration::from_secs(2), ANSWER);
    // The host is usable afterwards: a new job runs its collectives.
    let extra = [("RINGREDUCE_TEST_JOB", "matrix".to_string())];
    assert_matrix_passes(job(2, &extra, |_| vec![]), "the next job");
}

#[test]
fn a_rank_killed_between_collectives_fails_the_next_call() {
    let go = std::env::temp_dir().join(format!("ringreduce-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let mut extra = fault_vars("between:1".into());
    extra.push(("RINGREDUCE_TEST_GO", go.display().to_string()));
    let mut ranks = job(3, &extra, |_| vec![]);
    kill_when_ready(
        &mut ranks,
        1,
        "first ok",
        Duration::from_secs(20),
        Duration::ZERO,
    );
    // The watch hears within a poll; the next call then fails at once.
    std::thread::sleep(Duration::from_millis(500));
    let go_at = Instant::now();
    std::fs::write(&go, b"go").unwrap();
    assert_survivors_fail(ranks, 1, "PeerLost", go_at, Duration::from_secs(1), ANSWER);
    let _ = std::fs::remove_file(&go);
}

#[test]
fn an_abort_on_one_rank_ends_every_ranks_collective() {
    let mut extra = fault_vars("abort:1".into());
    extra.push(("RINGREDUCE_TEST_ABORT_MS", "400".into()));
    let ranks = job(3, &extra, |_| vec![]);
    let (joined, _) = ranks[1].expect("joined", Duration::from_secs(10));
    // The abort comes 400 ms after rank 1 joined; the others hear within
    // a poll or two.
    let since = joined + Duration::from_millis(400);
    let within = Duration::from_secs(2);
    let aborter =
        assert_survivors_fail(ranks, 1, "PeerAborted", since, within, ANSWER).expect("rank 1");
    let (code, lines) = aborter.finish();
    assert_eq!(code, 0, "{lines:?}");
    assert!(lines.iter().any(|l| l == "aborted"), "{lines:?}");
}

#[test]
fn ranks_created_with_different_settings_fail_alike() {
    let extra = [("RINGREDUCE_TEST_JOB", "matrix".to_string())];
    let ranks = job(3, &extra, |r| {
        if r == 2 {
            vec![("RINGREDUCE_TEST_BUFFER", "65536".to_string())]
        } else {
            vec![]
        }
    });
    for (r, rank) in ranks.into_iter().enumerate() {
        let (code, lines) = rank.finish();
        assert_eq!(code, 2, "rank {r}: {lines:?}");
        assert!(
            lines[0]
                .starts_with("error JobMismatch { rank: 2, what: \"staging bytes per channel\""),
            "rank {r}: {lines:?}"
        );
    }
}

/// A job of `world` ranks of which only `started` run, each with `extra`
/// and rank `r` also with `per_rank(r)`, all on one port: every rank
/// started, and its exit code and lines.
fn partial_job(
    world: usize,
    started: &[usize],
    extra: &[(&str, String)],
    per_rank: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<(usize, i32, Vec<String>)> {
    let port = free_port();
    let ranks: Vec<(usize, Rank)> = started
        .iter()
        .map(|&r| {
            let mut v = ringreduce_tests::procs::torchrun(r, world, port, extra);
            for (k, val) in per_rank(r) {
                v.retain(|(k0, _)| *k0 != k);
                v.push((k, val));
            }
            (r, Rank::spawn(&bin(), &v))
        })
        .collect();
    ranks
        .into_iter()
        .map(|(r, rank)| {
            let (code, lines) = rank.finish();
            (r, code, lines)
        })
        .collect()
}

fn short() -> Vec<(&'static str, String)> {
    vec![
        ("RINGREDUCE_TEST_JOB", "join".to_string()),
        ("RINGREDUCE_TEST_TIMEOUT_MS", "2000".to_string()),
    ]
}

/// Every rank failed to join with an error that starts with `want`.
fn assert_all_fail(got: &[(usize, i32, Vec<String>)], want: &str) {
    for (r, code, lines) in got {
        assert_eq!(*code, 2, "rank {r}: {lines:?}");
        assert!(
            lines.first().is_some_and(|l| l.starts_with(want)),
            "rank {r}: {lines:?}, want {want}"
        );
    }
}

#[test]
fn a_rank_that_never_starts_fails_every_rank_naming_it() {
    let t0 = Instant::now();
    let got = partial_job(3, &[0, 1], &short(), |_| vec![]);
    assert_all_fail(&got, "error RanksMissing { ranks: [2]");
    // Not before the 2 s timeout, and not long after it.
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn a_mismatched_world_size_fails_every_rank() {
    let got = partial_job(3, &[0, 1, 2], &short(), |r| {
        if r == 1 {
            vec![("WORLD_SIZE".into(), "4".into())]
        } else {
            vec![]
        }
    });
    assert_all_fail(&got, "error WorldMismatch { rank: 1, theirs: 4, ours: 3 }");
}

#[test]
fn a_bad_address_is_an_error_naming_the_variable() {
    let got = partial_job(2, &[0, 1], &short(), |_| {
        vec![("MASTER_PORT".into(), "http".into())]
    });
    assert_all_fail(&got, "error Env { var: \"MASTER_PORT\"");
}

#[test]
fn a_port_taken_by_something_else_fails_every_rank_in_time() {
    // Something that accepts connections and never speaks.
    let squatter = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let t0 = Instant::now();
    let got = partial_job(3, &[0, 1, 2], &short(), |_| {
        vec![("MASTER_PORT".into(), port.to_string())]
    });
    for (r, code, lines) in &got {
        assert_eq!(*code, 2, "rank {r}: {lines:?}");
        assert!(lines[0].starts_with("error "), "rank {r}: {lines:?}");
    }
    // Rank 0 cannot listen; the others hear nothing from the squatter and
    // give up by their timeout and its grace.
    assert!(got[0].2[0].contains("Bootstrap"), "{got:?}");
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    drop(squatter);
}

#[test]
fn the_gradient_layer_across_processes_matches_one_process() {
    for (k, algo) in [(3, "ring"), (2, "one-shot"), (4, "two-shot")] {
        let extra = [
            ("RINGREDUCE_TEST_JOB", "grad".to_string()),
            ("RINGREDUCE_TEST_ALGO", algo.to_string()),
        ];
        for (r, rank) in job(k, &extra, |_| vec![]).into_iter().enumerate() {
            let (code, lines) = rank.finish();
            assert!(
                code == 0 && lines.iter().any(|l| l == "ok 14 0"),
                "k = {k}, {algo}, rank {r}: exit {code}, {lines:?}"
            );
        }
    }
}
