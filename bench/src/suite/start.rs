//! How long a job of processes takes to start: `k` processes of the test
//! `job` binary (`RINGREDUCE_TEST_JOB=join`, torchrun's variables, GPU
//! ranks all on GPU 0) spawned together, timed from the spawn to the last
//! rank's `joined <ms since the epoch>` line, in a few rounds.

use super::ctx::Ctx;
use super::judge::file_name;
use super::Status;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Rounds of a start part: the first may pay what later ones find cached.
pub(super) const ROUNDS: usize = 3;

/// Runs the rounds within `limit`, writing every rank's lines to the
/// part's log: passes when every rank of every round joined and left.
pub(super) fn start(
    ctx: &Ctx,
    limit: Duration,
    name: &str,
    k: usize,
) -> (Status, String, Vec<String>) {
    let log = ctx.log(name);
    let deadline = Instant::now() + limit;
    let (mut text, mut took) = (String::new(), Vec::new());
    let mut failed = None;
    for round in 1..=ROUNDS {
        match one_round(ctx, k, deadline) {
            Ok((ms, lines)) => {
                text += &format!(
                    "# round {round}: the last rank joined {ms} ms after the spawn\n{lines}"
                );
                took.push(ms.to_string());
            }
            Err(e) => {
                text += &format!("# round {round}: {e}\n");
                failed = Some(format!("round {round}: {e}"));
                break;
            }
        }
    }
    let _ = std::fs::write(&log, text);
    let files = vec![file_name(&log)];
    match failed {
        Some(e) => (Status::Fail, e, files),
        None => (
            Status::Pass,
            format!(
                "{k} processes joined {} ms after their spawn",
                took.join(", ")
            ),
            files,
        ),
    }
}

fn epoch_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// One round: the milliseconds from the spawn to the last `joined`, and
/// every rank's lines.
fn one_round(ctx: &Ctx, k: usize, deadline: Instant) -> Result<(u128, String), String> {
    let port = crate::procs::free_port()?;
    let spawned = epoch_ms();
    let mut children = Vec::new();
    for r in 0..k {
        let mut c = Command::new(ctx.test_bin("job"));
        c.envs(ctx.env.iter().map(|(k, v)| (k, v)))
            .envs(ringreduce::bootstrap::Launch::torchrun_vars(r, k, port))
            .env("RINGREDUCE_TEST_JOB", "join")
            .env("RINGREDUCE_TEST_DEVICE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if !ctx.cpu {
            c.env("RINGREDUCE_TEST_GPU", "1");
        }
        match c.spawn() {
            Ok(child) => children.push(child),
            Err(e) => {
                end(&mut children);
                return Err(format!("starting rank {r}: {e}"));
            }
        }
    }
    let mut lines = String::new();
    let mut last = 0;
    for r in 0..k {
        let code = loop {
            match children[r].try_wait() {
                Ok(Some(s)) => break s.code(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    end(&mut children);
                    return Err(format!("rank {r} had not left by the part's limit"));
                }
            }
        };
        let mut out = String::new();
        if let Some(mut o) = children[r].stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        let joined = out
            .lines()
            .find_map(|l| l.strip_prefix("joined ")?.trim().parse::<u128>().ok());
        for l in out.lines() {
            lines += &format!("rank {r}: {l}\n");
        }
        match (code, joined) {
            (Some(0), Some(t)) => last = last.max(t),
            _ => {
                end(&mut children);
                return Err(format!("rank {r} exited with {code:?}: {}", out.trim()));
            }
        }
    }
    Ok((last.saturating_sub(spawned), lines))
}

/// Kills and reaps every rank still running.
fn end(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
