//! Hierarchical jobs on the CPU execution: processes of the `job` binary
//! on simulated hosts (`RINGREDUCE_HOST_NAME`), our kernels inside a host
//! and the test stand-in for the step between hosts. Every all-reduce,
//! reduce-scatter and all-gather matches the hierarchical reference bit
//! for bit; a rank on the other
//! host killed mid-collective (or mid fused call, with buckets in flight)
//! fails every survivor with an error naming it; hosts with different numbers of ranks fail every rank alike.

use ringreduce_tests::procs::{
    assert_abort_ends_every_call, assert_next_call_refused, assert_stall_ends_every_survivor,
    assert_survivors_fail, job, job_bin, kill_when_ready, stop_when_ready, Rank,
};
use std::path::PathBuf;
use std::time::Duration;

fn bin() -> PathBuf {
    job_bin(env!("CARGO_BIN_EXE_job"))
}

/// A hierarchical job: rank `r` on host `hosts[r]`, each with `extra`.
fn hier_job(hosts: &[&str], extra: &[(&str, String)]) -> Vec<Rank> {
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    job(&bin(), hosts.len(), extra, |r| {
        vec![("RINGREDUCE_HOST_NAME", hosts[r].clone())]
    })
}

/// Each rank's exit code and lines.
fn finish(ranks: Vec<Rank>) -> Vec<(i32, Vec<String>)> {
    ranks.into_iter().map(Rank::finish).collect()
}

/// More nodes than one local launch folds (`BATCH_RANKS`, 16): the step
/// between nodes chains its folds, each taking the running result first,
/// and must still match the reference's fold in node order.
#[test]
fn a_step_over_more_nodes_than_one_fold_takes_keeps_node_order() {
    let names: Vec<String> = (0..17).map(|h| format!("h{h}")).collect();
    let hosts: Vec<&str> = names.iter().map(String::as_str).collect();
    let extra = [("RINGREDUCE_TEST_JOB", "hier".to_string())];
    for (r, (code, lines)) in finish(hier_job(&hosts, &extra)).into_iter().enumerate() {
        assert!(
            code == 0 && lines.iter().any(|l| l == "ok 60 0"),
            "17 hosts x 1, rank {r}: exit {code}, {lines:?}"
        );
    }
}

#[test]
fn hierarchical_all_reduces_match_the_reference() {
    let shapes: [(&str, &[&str]); 5] = [
        ("2 hosts x 2", &["a", "a", "b", "b"]),
        ("2 hosts x 4", &["a", "a", "a", "a", "b", "b", "b", "b"]),
        ("4 hosts x 1", &["a", "b", "c", "d"]),
        // mpirun --map-by node: ranks alternate between the hosts.
        ("2 hosts x 2, round robin", &["b", "a", "b", "a"]),
        ("1 host x 3", &["a", "a", "a"]),
    ];
    for (what, hosts) in shapes {
        for algo in ["auto", "ring"] {
            let extra = [
                ("RINGREDUCE_TEST_JOB", "hier".to_string()),
                ("RINGREDUCE_TEST_ALGO", algo.to_string()),
            ];
            for (r, (code, lines)) in finish(hier_job(hosts, &extra)).into_iter().enumerate() {
                assert!(
                    code == 0 && lines.iter().any(|l| l == "ok 60 0"),
                    "{what}, {algo}, rank {r}: exit {code}, {lines:?}"
                );
                assert!(
                    lines.iter().any(|l| l == "left"),
                    "{what}, rank {r}: {lines:?}"
                );
            }
        }
    }
}

#[test]
fn the_gradient_layer_across_nodes_matches_the_reference() {
    // Dense fused (sum, average), half precision (f16 prescaled, bf16; one
    // tensor and fused), sparse (top-K with a residual, a threshold, a
    // share that goes dense; fused top-K), residuals and what was sent.
    let shapes: [(&str, &[&str]); 4] = [
        ("2 hosts x 2", &["a", "a", "b", "b"]),
        ("4 hosts x 1", &["a", "b", "c", "d"]),
        ("2 hosts x 2, round robin", &["b", "a", "b", "a"]),
        // One host: nothing is compressed.
        ("1 host x 2", &["a", "a"]),
    ];
    for (what, hosts) in shapes {
        let extra = [("RINGREDUCE_TEST_JOB", "hier-grad".to_string())];
        for (r, (code, lines)) in finish(hier_job(hosts, &extra)).into_iter().enumerate() {
            assert!(
                code == 0 && lines.iter().any(|l| l == "ok 30 0"),
                "{what}, rank {r}: exit {code}, {lines:?}"
            );
        }
    }
}

#[test]
fn hosts_with_different_numbers_of_ranks_fail_every_rank_alike() {
    let extra = [("RINGREDUCE_TEST_JOB", "hier".to_string())];
    for (r, (code, lines)) in finish(hier_job(&["a", "a", "b"], &extra))
        .into_iter()
        .enumerate()
    {
        let want = "error UnevenNodes { sizes: [(\"a\", 2), (\"b\", 1)] }";
        assert!(
            code == 2 && lines.iter().any(|l| l.starts_with(want)),
            "rank {r}: exit {code}, {lines:?}"
        );
    }
}

#[test]
fn a_rank_on_the_other_host_killed_mid_collective_fails_every_survivor() {
    kill_rank_3_of_2_hosts_x_2("hier-stall:3", "joined", false);
}

#[test]
fn a_rank_on_the_other_host_killed_with_buckets_in_flight_fails_every_survivor() {
    // Every rank loops fused all-reduces of seven buckets; rank 3 dies
    // inside one, with a bucket's step between hosts begun and not ended.
    // The survivors' next call is refused at once.
    kill_rank_3_of_2_hosts_x_2("hier-fused-loop", "looping", true);
}

/// A job of 2 hosts x 2 running `job`: once every rank has said `ready`
/// and run on for half a second, rank 3 is killed, and every survivor
/// fails naming it (and, with `next`, refuses its next call at once).
fn kill_rank_3_of_2_hosts_x_2(job: &str, ready: &str, next: bool) {
    // A long timeout, so that only the peer watch can explain a quick error.
    let timeout_ms = 20_000;
    let extra = [
        ("RINGREDUCE_TEST_JOB", job.to_string()),
        ("RINGREDUCE_TEST_TIMEOUT_MS", timeout_ms.to_string()),
    ];
    let mut ranks = hier_job(&["a", "a", "b", "b"], &extra);
    let wait = Duration::from_millis(timeout_ms + 5_000);
    let killed = kill_when_ready(&mut ranks, 3, ready, wait, Duration::from_millis(500));
    if next {
        assert_next_call_refused(&ranks[..3], 3, wait);
    }
    // The bound is the timeout plus a second; the watch does far
    // better, and anything near the timeout would mean it did not fire.
    let within = Duration::from_millis(timeout_ms / 2);
    assert_survivors_fail(ranks, 3, "PeerLost", killed, within, wait);
}

#[test]
fn an_abort_on_one_rank_with_buckets_in_flight_ends_every_ranks_call() {
    let extra = [
        ("RINGREDUCE_TEST_JOB", "hier-fused-abort:2".to_string()),
        ("RINGREDUCE_TEST_ABORT_MS", "400".to_string()),
        ("RINGREDUCE_TEST_TIMEOUT_MS", "20000".to_string()),
    ];
    let ranks = hier_job(&["a", "a", "b", "b"], &extra);
    assert_abort_ends_every_call(ranks, 2, 400, Duration::from_secs(25));
}

#[test]
fn a_stalled_rank_on_the_other_host_fails_every_survivor_within_the_timeout() {
    // Rank 3 stays alive and silent: no watch fires, so the timeouts must.
    let timeout_ms = 2_000;
    let extra = [
        ("RINGREDUCE_TEST_JOB", "hier-stall:3".to_string()),
        ("RINGREDUCE_TEST_TIMEOUT_MS", timeout_ms.to_string()),
    ];
    let mut ranks = hier_job(&["a", "a", "b", "b"], &extra);
    let wait = Duration::from_secs(30);
    let (joined, _) = ranks[0].expect("joined", wait);
    let mut stalled = ranks.remove(3);
    // From the join: the survivors start waiting a little later.
    let within = Duration::from_millis(timeout_ms + 3_000);
    assert_stall_ends_every_survivor(ranks, joined, within, wait, false, true);
    let _ = stalled.child.kill();
    let _ = stalled.child.wait();
}

#[test]
fn a_rank_on_the_other_host_stopped_with_buckets_in_flight_fails_every_survivor_within_the_timeout()
{
    // Every rank loops fused all-reduces of seven buckets; rank 3 is
    // stopped (SIGSTOP) inside one, its links open: only timeouts can end
    // the others' calls, with a bucket's step between hosts begun.
    let timeout_ms = 2_000;
    let extra = [
        ("RINGREDUCE_TEST_JOB", "hier-fused-loop".to_string()),
        ("RINGREDUCE_TEST_TIMEOUT_MS", timeout_ms.to_string()),
    ];
    let mut ranks = hier_job(&["a", "a", "b", "b"], &extra);
    let wait = Duration::from_secs(30);
    let stopped = stop_when_ready(&mut ranks, 3, "looping", wait, Duration::from_millis(500));
    let mut stalled = ranks.remove(3);
    // The first rank to time out ends every call, after a pause of
    // 400 ms: about the timeout and half a second (2.4 to 2.6 s here),
    // with room for a loaded machine. Without it, each rank waited out a
    // timeout of its own in turn: 6 s.
    let within = Duration::from_millis(timeout_ms + 2_000);
    assert_stall_ends_every_survivor(ranks, stopped, within, wait, true, true);
    let _ = stalled.child.kill();
    let _ = stalled.child.wait();
}
