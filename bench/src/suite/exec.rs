//! Runs one command of the suite: output to a log file, a hard time limit,
//! and the whole process group killed when it is reached, so that a hung
//! collective (or a sanitizer's child) cannot outlive its part.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// How a command ended.
#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    /// Killed at its time limit.
    TimedOut,
    /// It could not be started (missing binary, say).
    NotStarted(String),
}

impl Ended {
    pub fn success(&self) -> bool {
        matches!(self, Ended::Exited(s) if s.success())
    }
}

/// Runs `cmd` with stdout and stderr appended to `log`, for at most `limit`.
pub fn run_logged(mut cmd: Command, log: &Path, limit: Duration) -> (Ended, Duration) {
    let t0 = Instant::now();
    let out = match File::options().create(true).append(true).open(log) {
        Ok(f) => f,
        Err(e) => {
            return (
                Ended::NotStarted(format!("{}: {e}", log.display())),
                t0.elapsed(),
            )
        }
    };
    let err = match out.try_clone() {
        Ok(f) => f,
        Err(e) => return (Ended::NotStarted(e.to_string()), t0.elapsed()),
    };
    cmd.stdout(out).stderr(err).process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return (
                Ended::NotStarted(format!("{:?}: {e}", cmd.get_program())),
                t0.elapsed(),
            )
        }
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (Ended::Exited(status), t0.elapsed()),
            Ok(None) if t0.elapsed() >= limit => {
                kill_group(child.id());
                let _ = child.wait();
                return (Ended::TimedOut, t0.elapsed());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return (Ended::NotStarted(e.to_string()), t0.elapsed()),
        }
    }
}

/// SIGKILL to the group the child leads (it was started as its leader).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("suite-exec-{}-{name}", std::process::id()))
    }

    #[test]
    fn logs_output_and_exit_status() {
        let log = tmp("ok.log");
        let mut c = Command::new("sh");
        c.args(["-c", "echo out; echo err >&2; exit 3"]);
        let (e, _) = run_logged(c, &log, Duration::from_secs(10));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("out") && text.contains("err"), "{text}");
        assert!(matches!(e, Ended::Exited(s) if s.code() == Some(3)));
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn kills_the_whole_group_at_the_limit() {
        let log = tmp("slow.log");
        let mut c = Command::new("sh");
        // A grandchild that would outlive a kill of `sh` alone.
        c.args(["-c", "sleep 30 & sleep 30; echo late"]);
        let (e, took) = run_logged(c, &log, Duration::from_millis(300));
        assert!(matches!(e, Ended::TimedOut));
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert!(!std::fs::read_to_string(&log).unwrap().contains("late"));
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn a_missing_program_is_not_started() {
        let (e, _) = run_logged(
            Command::new("/nonexistent/ringreduce-x"),
            &tmp("none.log"),
            Duration::from_secs(1),
        );
        assert!(matches!(e, Ended::NotStarted(_)));
    }
}
