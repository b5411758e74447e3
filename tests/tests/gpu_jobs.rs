//! GPU communicators across processes, one per rank, on this machine's
//! GPUs (several processes per GPU where it has fewer): each rank a
//! process of the `job` binary with `RINGREDUCE_TEST_GPU`, its memory
//! exported to its peers with CUDA IPC. The same checks as the CPU
//! execution's jobs (`jobs.rs`): the collectives bit for bit against the
//! reference, a rank killed mid-collective or one that aborts ending every
//! survivor's call with a typed error naming it, long before the timeout;
//! and the gradient layer's fused all-reduce, the same bits as in one
//! process.
//! Several processes share a GPU by time slices unless MPS runs, which
//! makes them slow, not wrong. Without a GPU the harness reports them as
//! ignored.

use ringreduce_tests::procs::{
    assert_abort_ends_every_call, assert_matrix_passes, assert_next_call_refused,
    assert_stall_ends_every_survivor, assert_survivors_fail, job_bin, kill_when_ready,
    stop_when_ready, Rank,
};
use ringreduce_tests::run_gpu_tests;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The fault tests' timeout: only the peer watch explains a quick error.
const LONG_TIMEOUT_MS: u64 = 60_000;

fn bin() -> PathBuf {
    job_bin(env!("CARGO_BIN_EXE_job"))
}

/// A job of `world` GPU ranks, rank `r` on device `(first + r) % GPUs`.
fn gpu_job(first: usize, world: usize, extra: &[(&str, String)]) -> Vec<Rank> {
    let count = ringreduce::gpu::device_count().unwrap_or(1).max(1);
    let mut extra = extra.to_vec();
    extra.push(("RINGREDUCE_TEST_GPU", "1".into()));
    ringreduce_tests::procs::job(&bin(), world, &extra, |r| {
        vec![("RINGREDUCE_TEST_DEVICE", ((first + r) % count).to_string())]
    })
}

fn gpu_job_matrix(dev: usize) {
    for (k, algo) in [(2, "auto"), (4, "auto"), (3, "ring"), (8, "auto")] {
        let extra = [
            ("RINGREDUCE_TEST_JOB", "matrix".to_string()),
            ("RINGREDUCE_TEST_ALGO", algo.to_string()),
        ];
        let t = Instant::now();
        assert_matrix_passes(gpu_job(dev, k, &extra), &format!("k = {k}, {algo}"));
        println!("{k} processes, {algo}: {:.1} s", t.elapsed().as_secs_f64());
    }
    let extra = [
        ("RINGREDUCE_TEST_JOB", "matrix".to_string()),
        ("RINGREDUCE_TEST_ALGO", "ring".to_string()),
        ("RINGREDUCE_TEST_RING", "2,0,3,1".to_string()),
    ];
    assert_matrix_passes(gpu_job(dev, 4, &extra), "k = 4, ring 2,0,3,1");
}

fn gpu_job_grad(dev: usize) {
    for (k, algo) in [(4, "ring"), (3, "one-shot")] {
        let extra = [
            ("RINGREDUCE_TEST_JOB", "grad".to_string()),
            ("RINGREDUCE_TEST_ALGO", algo.to_string()),
        ];
        for (r, rank) in gpu_job(dev, k, &extra).into_iter().enumerate() {
            let (code, lines) = rank.finish();
            assert!(
                code == 0 && lines.iter().any(|l| l == "ok 14 0"),
                "k = {k}, {algo}, rank {r}: exit {code}, {lines:?}"
            );
        }
    }
}

/// Two jobs of four processes at once on one GPU, each with two channels
/// a rank so that all their blocks fit together: both correct.
fn gpu_two_jobs_at_once(dev: usize) {
    let extra = [
        ("RINGREDUCE_TEST_JOB", "matrix".to_string()),
        ("RINGREDUCE_TEST_CHANNELS", "2".to_string()),
    ];
    let a = gpu_job(dev, 4, &extra);
    let b = gpu_job(dev, 4, &extra);
    assert_matrix_passes(a, "the first job");
    assert_matrix_passes(b, "the second job");
}

fn fault_vars(job: &str) -> Vec<(&'static str, String)> {
    vec![
        ("RINGREDUCE_TEST_JOB", job.to_string()),
        ("RINGREDUCE_TEST_TIMEOUT_MS", LONG_TIMEOUT_MS.to_string()),
    ]
}

fn gpu_job_killed_mid_collective(dev: usize) {
    let mut ranks = gpu_job(dev, 3, &fault_vars("stall:2"));
    let (ready, settle) = (Duration::from_secs(120), Duration::from_millis(500));
    let killed = kill_when_ready(&mut ranks, 2, "joined", ready, settle);
    let answer = Duration::from_millis(LONG_TIMEOUT_MS + 10_000);
    assert_survivors_fail(ranks, 2, "PeerLost", killed, Duration::from_secs(3), answer);
}

/// One of four processes killed in the middle of 256 MiB all-reduces:
/// the others fail naming it, and the GPU then runs a new job.
fn gpu_job_killed_mid_256m(dev: usize) {
    let mut extra = fault_vars("loop");
    extra.push(("RINGREDUCE_TEST_ELEMS", (64 << 20).to_string()));
    let mut ranks = gpu_job(dev, 4, &extra);
    let (ready, settle) = (Duration::from_secs(120), Duration::from_millis(1500));
    let killed = kill_when_ready(&mut ranks, 1, "looping", ready, settle);
    let answer = Duration::from_millis(LONG_TIMEOUT_MS + 10_000);
    assert_survivors_fail(ranks, 1, "PeerLost", killed, Duration::from_secs(3), answer);
    let extra = [("RINGREDUCE_TEST_JOB", "matrix".to_string())];
    assert_matrix_passes(gpu_job(dev, 2, &extra), "the next job");
}

fn gpu_job_abort(dev: usize) {
    let mut extra = fault_vars("abort:0");
    extra.push(("RINGREDUCE_TEST_ABORT_MS", "1000".into()));
    let ranks = gpu_job(dev, 3, &extra);
    let (joined, _) = ranks[0].expect("joined", Duration::from_secs(120));
    let since = joined + Duration::from_millis(1000);
    let answer = Duration::from_millis(LONG_TIMEOUT_MS + 10_000);
    let within = Duration::from_secs(3);
    let aborter =
        assert_survivors_fail(ranks, 0, "PeerAborted", since, within, answer).expect("rank 0");
    let (code, lines) = aborter.finish();
    assert_eq!(code, 0, "{lines:?}");
}

/// A hierarchical job of GPU ranks on simulated hosts: our kernels among
/// a host's processes (CUDA IPC), the test stand-in between hosts; every
/// case bit for bit against the hierarchical reference.
/// A hierarchical job of GPU ranks on simulated hosts: `job` in every
/// rank, and NCCL's settings for processes on one GPU where the build has
/// NCCL (each process its own `NCCL_HOSTID`, the socket transport on
/// loopback); `RINGREDUCE_NCCL_LIBRARY` comes from the environment.
fn hier_gpu_job(
    dev: usize,
    hosts: &[&str],
    job: &str,
    library: Option<&str>,
) -> Vec<(i32, Vec<String>)> {
    hier_gpu_ranks(dev, hosts, job, library, &[])
        .into_iter()
        .map(|r| r.finish())
        .collect()
}

/// [`hier_gpu_job`]'s ranks as they run, each also with `more`.
fn hier_gpu_ranks(
    dev: usize,
    hosts: &[&str],
    job: &str,
    library: Option<&str>,
    more: &[(&str, String)],
) -> Vec<Rank> {
    let count = ringreduce::gpu::device_count().unwrap_or(1).max(1);
    let mut extra = vec![
        ("RINGREDUCE_TEST_JOB", job.to_string()),
        ("RINGREDUCE_TEST_GPU", "1".to_string()),
    ];
    extra.extend(more.iter().cloned());
    ringreduce_tests::procs::job(&bin(), hosts.len(), &extra, |r| {
        let mut v = vec![
            ("RINGREDUCE_HOST_NAME", hosts[r].to_string()),
            ("RINGREDUCE_TEST_DEVICE", ((dev + r) % count).to_string()),
            ("NCCL_HOSTID", format!("{}-{r}", hosts[r])),
            ("NCCL_SOCKET_IFNAME", "lo".to_string()),
            ("NCCL_IB_DISABLE", "1".to_string()),
            ("NCCL_NVLS_ENABLE", "0".to_string()),
        ];
        if let Some(l) = library {
            v.push(("RINGREDUCE_NCCL_LIBRARY", l.to_string()));
        }
        v
    })
}

/// The shapes of the hierarchical GPU tests: node-major, as torchrun and
/// srun place ranks, and round-robin (`mpirun --map-by node`), whose
/// reduce-scatter gathers each node's blocks into device scratch first.
const HIER_SHAPES: [&[&str]; 4] = [
    &["a", "a", "b", "b"],
    &["a", "a", "a", "a", "b", "b", "b", "b"],
    &["a", "b", "c", "d"],
    &["b", "a", "b", "a"],
];

fn gpu_hierarchical_job(dev: usize) {
    for hosts in HIER_SHAPES {
        for (r, (code, lines)) in hier_gpu_job(dev, hosts, "hier", None)
            .into_iter()
            .enumerate()
        {
            assert!(
                code == 0 && lines.iter().any(|l| l == "ok 60 0"),
                "{hosts:?}, rank {r}: exit {code}, {lines:?}"
            );
        }
    }
}

fn gpu_hierarchical_grad(dev: usize) {
    for hosts in HIER_SHAPES {
        for (r, (code, lines)) in hier_gpu_job(dev, hosts, "hier-grad", None)
            .into_iter()
            .enumerate()
        {
            assert!(
                code == 0 && lines.iter().any(|l| l == "ok 30 0"),
                "{hosts:?}, rank {r}: exit {code}, {lines:?}"
            );
        }
    }
}

/// A rank of the other host killed inside a large hierarchical
/// all-reduce: every survivor, inside its node's kernels or inside NCCL,
/// fails naming it well within the timeout.
fn gpu_hierarchical_killed(dev: usize) {
    kill_gpu_rank_3_of_2_hosts_x_2(dev, "hier-stall:3", "joined", false);
}

/// A rank of the other host killed while every rank loops fused
/// all-reduces of seven buckets: most likely with one bucket's NCCL step
/// queued behind the next bucket's node kernels. Every survivor fails
/// naming it well within the timeout, refuses its next call at once, and
/// leaves.
fn gpu_hierarchical_killed_in_flight(dev: usize) {
    kill_gpu_rank_3_of_2_hosts_x_2(dev, "hier-fused-loop", "looping", true);
}

/// GPU ranks of 2 hosts x 2 running `job`: once every rank has said
/// `ready` and run on for half a second, rank 3 is killed, and every
/// survivor fails naming it within 3 s (and, with `next`, refuses its
/// next call at once).
fn kill_gpu_rank_3_of_2_hosts_x_2(dev: usize, job: &str, ready: &str, next: bool) {
    let timeout = [("RINGREDUCE_TEST_TIMEOUT_MS", LONG_TIMEOUT_MS.to_string())];
    let mut ranks = hier_gpu_ranks(dev, HIER_SHAPES[0], job, None, &timeout);
    let (wait, settle) = (Duration::from_secs(120), Duration::from_millis(500));
    let killed = kill_when_ready(&mut ranks, 3, ready, wait, settle);
    let answer = Duration::from_millis(LONG_TIMEOUT_MS + 10_000);
    if next {
        assert_next_call_refused(&ranks[..3], 3, answer);
    }
    assert_survivors_fail(ranks, 3, "PeerLost", killed, Duration::from_secs(3), answer);
}

/// A rank of the other host stopped (`SIGSTOP`) while every rank loops
/// fused all-reduces of seven buckets: its links stay open, so only the
/// timeouts (ours inside the host, the NCCL wait's between hosts) can end
/// the others' calls; the first to time out makes the job give up, so
/// every survivor ends within the timeout and two seconds, and leaves.
/// Which rank times out first, and so what it names, depends on clocks
/// kept on the device and on the host: not asserted here.
fn gpu_hierarchical_stopped_in_flight(dev: usize) {
    let timeout_ms = 5_000;
    let timeout = [("RINGREDUCE_TEST_TIMEOUT_MS", timeout_ms.to_string())];
    let mut ranks = hier_gpu_ranks(dev, HIER_SHAPES[0], "hier-fused-loop", None, &timeout);
    let (ready, settle) = (Duration::from_secs(120), Duration::from_millis(500));
    let stopped = stop_when_ready(&mut ranks, 3, "looping", ready, settle);
    let mut stalled = ranks.remove(3);
    let within = Duration::from_millis(timeout_ms + 2_000);
    assert_stall_ends_every_survivor(ranks, stopped, within, Duration::from_secs(60), true, false);
    let _ = stalled.child.kill();
    let _ = stalled.child.wait();
}

/// Rank 2 aborts while every rank loops fused all-reduces of seven
/// buckets, with NCCL's steps queued: its call ends with `Aborted`, every
/// other rank's with `PeerAborted` naming it, within two seconds.
fn gpu_hierarchical_abort_in_flight(dev: usize) {
    let more = [
        ("RINGREDUCE_TEST_TIMEOUT_MS", LONG_TIMEOUT_MS.to_string()),
        ("RINGREDUCE_TEST_ABORT_MS", "400".to_string()),
    ];
    let ranks = hier_gpu_ranks(dev, HIER_SHAPES[0], "hier-fused-abort:2", None, &more);
    assert_abort_ends_every_call(ranks, 2, 400, Duration::from_secs(120));
}

/// With NCCL built in but not loadable, every rank of a job across nodes
/// fails with the same typed error (one node never needs NCCL).
fn gpu_hierarchical_without_nccl(dev: usize) {
    let missing = Some("/nonexistent/libnccl.so.2");
    for (r, (code, lines)) in hier_gpu_job(dev, HIER_SHAPES[0], "hier", missing)
        .into_iter()
        .enumerate()
    {
        let failed = code == 2 && lines.iter().any(|l| l.starts_with("error NcclUnavailable"));
        let ran = code == 0 && lines.iter().any(|l| l == "ok 60 0");
        let want = if cfg!(feature = "nccl") { failed } else { ran };
        assert!(want, "rank {r}: exit {code}, {lines:?}");
    }
    for (r, (code, lines)) in hier_gpu_job(dev, &["a", "a"], "hier", missing)
        .into_iter()
        .enumerate()
    {
        assert!(
            code == 0 && lines.iter().any(|l| l == "ok 60 0"),
            "one host, rank {r}: exit {code}, {lines:?}"
        );
    }
}

fn main() -> std::process::ExitCode {
    run_gpu_tests(&[
        ("gpu_hierarchical_job", gpu_hierarchical_job),
        ("gpu_hierarchical_grad", gpu_hierarchical_grad),
        (
            "gpu_hierarchical_without_nccl",
            gpu_hierarchical_without_nccl,
        ),
        ("gpu_hierarchical_killed", gpu_hierarchical_killed),
        (
            "gpu_hierarchical_killed_in_flight",
            gpu_hierarchical_killed_in_flight,
        ),
        (
            "gpu_hierarchical_stopped_in_flight",
            gpu_hierarchical_stopped_in_flight,
        ),
        (
            "gpu_hierarchical_abort_in_flight",
            gpu_hierarchical_abort_in_flight,
        ),
        ("gpu_job_matrix", gpu_job_matrix),
        ("gpu_job_grad", gpu_job_grad),
        ("gpu_two_jobs_at_once", gpu_two_jobs_at_once),
        (
            "gpu_job_killed_mid_collective",
            gpu_job_killed_mid_collective,
        ),
        ("gpu_job_killed_mid_256m", gpu_job_killed_mid_256m),
        ("gpu_job_abort", gpu_job_abort),
    ])
}
