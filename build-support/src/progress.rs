//! What a long kernel build tells the person waiting for it.
//!
//! Cargo keeps a build script's output to itself (and, for a registry
//! dependency, shows none of it), so a kernel build would look like a
//! frozen progress bar. Lines written to the controlling terminal reach
//! the person whatever cargo does with the script's output; without a
//! terminal (CI, IDEs) nothing is written.

use std::fs::File;
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Seconds between two lines while one step runs: cargo's bar is never
/// the only sign of life for longer.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Writes lines to the controlling terminal, if there is one.
pub struct Progress {
    tty: Option<File>,
}

impl Progress {
    /// The terminal of this process, or a silent reporter without one.
    pub fn to_terminal() -> Progress {
        let tty = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/tty")
            .ok();
        Progress { tty }
    }

    /// A reporter that says nothing.
    pub fn silent() -> Progress {
        Progress { tty: None }
    }

    /// Writes `msg` on a line of its own, over cargo's progress bar (which
    /// cargo draws again after it).
    pub fn say(&self, msg: &str) {
        if let Some(mut t) = self.tty.as_ref() {
            let _ = write!(t, "\r\x1b[2K   ringreduce: {msg}\n");
        }
    }

    /// Runs `f`, saying `what` when it starts and every [`HEARTBEAT`]
    /// after that with the seconds so far, then how long it took.
    pub fn step<R>(&self, what: &str, f: impl FnOnce() -> R) -> R {
        let Some(tty) = self.tty.as_ref().and_then(|t| t.try_clone().ok()) else {
            return f();
        };
        let start = Instant::now();
        self.say(&format!("{what}..."));
        let (done, ticks) = mpsc::channel::<()>();
        let what_later = what.to_string();
        let beat = std::thread::spawn(move || {
            let p = Progress { tty: Some(tty) };
            while let Err(mpsc::RecvTimeoutError::Timeout) = ticks.recv_timeout(HEARTBEAT) {
                p.say(&format!(
                    "{what_later}: {} s so far",
                    start.elapsed().as_secs()
                ));
            }
        });
        let r = f();
        let _ = done.send(());
        let _ = beat.join();
        self.say(&format!(
            "{what}: done in {:.1} s",
            start.elapsed().as_secs_f64()
        ));
        r
    }
}

/// Runs `f` on every item with as many threads as there are cores, and
/// returns the results in the items' order.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let slots: Vec<std::sync::Mutex<&mut Option<R>>> =
        out.iter_mut().map(std::sync::Mutex::new).collect();
    std::thread::scope(|s| {
        for _ in 0..cores.min(items.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                **slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    drop(slots);
    out.into_iter()
        .map(|r| r.expect("every item was mapped"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_map_keeps_the_order_and_maps_each_once() {
        let items: Vec<u64> = (0..100).collect();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let out = par_map(&items, |&x| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            x * x
        });
        assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert_eq!(calls.into_inner(), 100);
        assert!(par_map(&[] as &[u8], |_| 0).is_empty());
    }

    #[test]
    fn a_silent_reporter_still_runs_the_step() {
        assert_eq!(Progress::silent().step("x", || 7), 7);
    }
}
