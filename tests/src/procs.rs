//! Jobs of real processes for the tests: each rank a process of the `job`
//! binary (`src/bin/job.rs`) started with torchrun's variables, its lines
//! read as they come, so that a test can kill a rank at a known point and
//! time what the others say.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A port nothing listens at now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The `job` binary: `RINGREDUCE_JOB_BIN`, else the one beside this test
/// executable (a bundle's `tests/job`), else cargo's (`built`).
pub fn job_bin(built: &str) -> PathBuf {
    if let Ok(p) = std::env::var("RINGREDUCE_JOB_BIN") {
        return PathBuf::from(p);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("job")));
    match beside {
        Some(b) if b.is_file() => b,
        _ => PathBuf::from(built),
    }
}

/// One running rank: its process and its lines as they come, each with
/// the time it came.
pub struct Rank {
    pub child: Child,
    lines: Receiver<(Instant, String)>,
}

impl Rank {
    /// Rank process `bin` with exactly the variables `vars`.
    pub fn spawn(bin: &Path, vars: &[(String, String)]) -> Rank {
        let mut c = Command::new(bin);
        c.env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // The GPU machine's driver and libraries are found through these.
        for keep in [
            "PATH",
            "LD_LIBRARY_PATH",
            "CUDA_MPS_PIPE_DIRECTORY",
            "CUDA_CACHE_PATH",
            "RINGREDUCE_NCCL_LIBRARY",
        ] {
            if let Ok(v) = std::env::var(keep) {
                c.env(keep, v);
            }
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("spawn a rank");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Rank { child, lines }
    }

    /// Waits (at most `wait`) for a line that starts with `prefix`; a
    /// failure shows the lines passed over, which say why.
    pub fn expect(&self, prefix: &str, wait: Duration) -> (Instant, String) {
        let deadline = Instant::now() + wait;
        let mut passed = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((t, l)) if l.starts_with(prefix) => return (t, l),
                Ok((_, l)) => passed.push(l),
                Err(e) => panic!("no line {prefix:?} within {wait:?}: {e}; before: {passed:?}"),
            }
        }
    }

    /// Every line still to come, and the exit code.
    pub fn finish(mut self) -> (i32, Vec<String>) {
        let code = self.child.wait().unwrap().code().unwrap_or(-1);
        let lines = self.lines.iter().map(|(_, l)| l).collect();
        (code, lines)
    }
}

/// A rank still running when its test ends, or when a failed assertion
/// unwinds it, is killed: a leftover rank would hold the suite's output
/// pipe open and stall it (a failed GPU test did, 2026-12-07).
impl Drop for Rank {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// torchrun's variables for rank `r` of `world`, with `extra`.
pub fn torchrun(
    r: usize,
    world: usize,
    port: u16,
    extra: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = ringreduce::bootstrap::Launch::torchrun_vars(r, world, port)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    v.extend(extra.iter().map(|(k, val)| (k.to_string(), val.clone())));
    v
}

/// A job of `world` ranks of `bin`, each with `extra` and rank `r` also
/// with `per_rank(r)`.
pub fn job(
    bin: &Path,
    world: usize,
    extra: &[(&str, String)],
    per_rank: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<Rank> {
    let port = free_port();
    (0..world)
        .map(|r| {
            let mut v = torchrun(r, world, port, extra);
            v.extend(per_rank(r).into_iter().map(|(k, val)| (k.to_string(), val)));
            Rank::spawn(bin, &v)
        })
        .collect()
}

/// Every rank ran the whole matrix with no wrong element, and left.
pub fn assert_matrix_passes(ranks: Vec<Rank>, what: &str) {
    for (r, rank) in ranks.into_iter().enumerate() {
        let (code, lines) = rank.finish();
        let ok = lines.iter().find(|l| l.starts_with("ok "));
        let fields: Vec<&str> = ok.map_or(vec![], |l| l.split(' ').collect());
        let cases = fields.get(1).and_then(|n| n.parse::<u32>().ok());
        assert!(
            code == 0 && fields.len() == 3 && fields[2] == "0" && cases > Some(100),
            "{what}, rank {r}: exit {code}, {lines:?}"
        );
        assert!(
            lines.iter().any(|l| l == "left"),
            "{what}, rank {r}: {lines:?}"
        );
    }
}

/// Waits (at most `wait` each) until every rank has said a line that
/// starts with `ready`, then lets them run on for `settle`; returns then.
fn when_ready(ranks: &[Rank], ready: &str, wait: Duration, settle: Duration) -> Instant {
    for r in ranks {
        r.expect(ready, wait);
    }
    std::thread::sleep(settle);
    Instant::now()
}

/// Waits (at most `wait` each) until every rank has said a line that
/// starts with `ready`, lets them run on for `settle`, then kills rank
/// `victim` with SIGKILL; returns when it did.
pub fn kill_when_ready(
    ranks: &mut [Rank],
    victim: usize,
    ready: &str,
    wait: Duration,
    settle: Duration,
) -> Instant {
    let killed = when_ready(ranks, ready, wait, settle);
    ranks[victim].child.kill().expect("kill -9");
    let _ = ranks[victim].child.wait();
    killed
}

/// As [`kill_when_ready`], but rank `victim` is stopped (`SIGSTOP`), not
/// killed: it hangs with its links open, so that no watch hears of it and
/// only the timeouts can end the others' calls. The caller kills it.
pub fn stop_when_ready(
    ranks: &mut [Rank],
    victim: usize,
    ready: &str,
    wait: Duration,
    settle: Duration,
) -> Instant {
    let stopped = when_ready(ranks, ready, wait, settle);
    let pid = libc::pid_t::try_from(ranks[victim].child.id()).expect("a pid");
    // SAFETY: a plain signal to a child this test started and still holds.
    let sent = unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert_eq!(sent, 0, "SIGSTOP rank {victim}");
    stopped
}

/// The survivors' errors: each names `dead` (a rank killed, or one that
/// aborted) as `variant` within `within` of `since`; every survivor then
/// leaves (its drop does not hang). `wait` bounds the wait for each error.
/// Returns rank `dead`, unchecked.
pub fn assert_survivors_fail(
    ranks: Vec<Rank>,
    dead: usize,
    variant: &str,
    since: Instant,
    within: Duration,
    wait: Duration,
) -> Option<Rank> {
    let want = format!("error {variant} {{ rank: {dead} }}");
    let mut skipped = None;
    for (r, rank) in ranks.into_iter().enumerate() {
        if r == dead {
            skipped = Some(rank);
            continue;
        }
        let (at, line) = rank.expect("error", wait);
        assert!(line.starts_with(&want), "rank {r}: {line}");
        ended_in_time_and_left(rank, r, (at, &line), since, within);
    }
    skipped
}

/// Rank `r`'s error `line`, heard at `at`, came within `within` of
/// `since`; the rank then left (its drop did not hang) with exit code 2.
fn ended_in_time_and_left(
    rank: Rank,
    r: usize,
    (at, line): (Instant, &str),
    since: Instant,
    within: Duration,
) {
    let took = at.saturating_duration_since(since);
    assert!(took < within, "rank {r} after {took:?}: {line}");
    let (code, lines) = rank.finish();
    assert_eq!(code, 2, "rank {r}: {lines:?}");
    assert!(lines.iter().any(|l| l == "left"), "rank {r}: {lines:?}");
}

/// Each of `ranks` says `next <error> <ms>` after its failed call: its
/// next call failed too, naming `dead` as lost, within a second.
pub fn assert_next_call_refused(ranks: &[Rank], dead: usize, wait: Duration) {
    let want = format!("next Some(PeerLost {{ rank: {dead} }}) ");
    for (r, rank) in ranks.iter().enumerate() {
        let (_, line) = rank.expect("next", wait);
        let ms = line.strip_prefix(&want).and_then(|m| m.parse::<u64>().ok());
        assert!(ms.is_some_and(|m| m < 1000), "rank {r}: {line}");
    }
}

/// Every one of `ranks` (a job's survivors, in rank order; the stalled
/// rank is the last of the job) ends its call within `within` of `since`,
/// and leaves; with `names_stalled`, some survivor's timeout names the
/// stalled rank. The first to time out says what it waited on
/// (`Timeout`, naming the rank and the peer in the job's ranks, or
/// `NoProgress` of the step between hosts) and makes the job give up:
/// every other survivor either timed out too or names a survivor that
/// did (`PeerAborted`). With `next` (a job that
/// prints `next`), each one's next call was refused: `Broken` after its
/// own timeout, else the same `PeerAborted`.
pub fn assert_stall_ends_every_survivor(
    ranks: Vec<Rank>,
    since: Instant,
    within: Duration,
    wait: Duration,
    next: bool,
    names_stalled: bool,
) {
    let stalled = ranks.len();
    let mut timed_out = Vec::new();
    let mut gave_up = Vec::new();
    let mut named_stalled = false;
    let mut errors = Vec::new();
    for (r, rank) in ranks.into_iter().enumerate() {
        let refused = next.then(|| rank.expect("next", wait).1);
        let (at, line) = rank.expect("error", wait);
        let took = at.saturating_duration_since(since);
        errors.push(format!("rank {r} after {took:?}: {line}"));
        if line.starts_with(&format!("error Timeout(TimeoutInfo {{ rank: {r},"))
            || line.starts_with("error NoProgress")
        {
            timed_out.push(r);
            named_stalled |= line.contains(&format!(" peer: {stalled},"))
                || line.contains(&format!("(waiting on rank {stalled})"));
            // Its own error broke it: the next call says so, at once.
            if let Some(n) = &refused {
                assert!(n.starts_with("next Some(Broken("), "rank {r}: {n}");
            }
        } else {
            let named = line
                .strip_prefix("error PeerAborted { rank: ")
                .and_then(|l| l.split_once(' '))
                .and_then(|(n, _)| n.parse::<usize>().ok());
            let named = named.unwrap_or_else(|| panic!("rank {r}: {line}"));
            gave_up.push((r, named));
            if let Some(n) = &refused {
                let want = format!("next Some(PeerAborted {{ rank: {named} }})");
                assert!(n.starts_with(&want), "rank {r}: {n}");
            }
        }
        ended_in_time_and_left(rank, r, (at, &line), since, within);
    }
    assert!(!timed_out.is_empty(), "no survivor timed out: {gave_up:?}");
    // On the CPU execution the ranks that wait on the stalled one time out
    // together, and one of them names it. On a GPU a rank's clock may
    // start on the device and another's on the host, and the first to
    // time out may name a peer that waits on the stalled one.
    assert!(
        named_stalled || !names_stalled,
        "no survivor named rank {stalled}: {timed_out:?} timed out; {errors:?}"
    );
    for (r, named) in gave_up {
        assert!(
            timed_out.contains(&named),
            "rank {r} names rank {named}, which did not time out ({timed_out:?})"
        );
    }
}

/// Rank `aborter` of a `hier-fused-abort` job aborts `after_ms` after it
/// started looping: its call ends with `Aborted`, every other rank's with
/// `PeerAborted` naming it (and its next call at once), all within two
/// seconds of the abort; every rank leaves. `wait` bounds each wait for a
/// line.
pub fn assert_abort_ends_every_call(
    mut ranks: Vec<Rank>,
    aborter: usize,
    after_ms: u64,
    wait: Duration,
) {
    let (looping, _) = ranks[aborter].expect("looping", wait);
    let since = looping + Duration::from_millis(after_ms);
    let within = Duration::from_secs(2);
    let me = ranks.remove(aborter);
    let (at, line) = me.expect("error", wait);
    assert!(line.starts_with("error Aborted"), "rank {aborter}: {line}");
    let named = format!("PeerAborted {{ rank: {aborter} }}");
    for (i, rank) in ranks.into_iter().enumerate() {
        let r = if i >= aborter { i + 1 } else { i };
        let (_, next) = rank.expect("next", wait);
        let refused = next.starts_with(&format!("next Some({named}) "));
        assert!(refused, "rank {r}: {next}");
        let (at, line) = rank.expect("error", wait);
        let named_it = line.starts_with(&format!("error {named}"));
        assert!(named_it, "rank {r}: {line}");
        ended_in_time_and_left(rank, r, (at, &line), since, within);
    }
    ended_in_time_and_left(me, aborter, (at, &line), since, within);
}
