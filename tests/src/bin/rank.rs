//! One process of a test job: reads its place from the launcher's
//! variables, meets the other ranks, and prints one line, `table <ranks>
//! <hash>` (the identities it received, hashed, so every rank's line can be
//! compared) or `error <text>` with exit code 2. `RINGREDUCE_TEST_STALL`
//! makes it wait forever before the rendezvous, to be killed there.
//!
//! With `RINGREDUCE_TEST_WATCH=<ms>` it then watches its peers for that
//! long, printing `lost <rank>` or `aborted <rank>` for each event;
//! `RINGREDUCE_TEST_ABORT=<ms>` makes it abort after that long, and
//! `RINGREDUCE_TEST_HOLD` makes it stay after the table until killed.

use ringreduce::bootstrap::{host_name, rendezvous, Event, Identity, Launch, Watch};
use ringreduce::CommConfig;
use std::hash::{Hash, Hasher};
use std::time::Duration;

fn main() -> std::process::ExitCode {
    if std::env::var_os("RINGREDUCE_TEST_STALL").is_some() {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
    let run = || -> ringreduce::Result<String> {
        let launch = Launch::from_env()?;
        let id = launch.unique_id()?;
        let me = Identity {
            rank: launch.rank as u32,
            host: host_name(),
            pid: std::process::id(),
            device: [0; 16],
            exports: format!("rank {} of {}", launch.rank, launch.world).into_bytes(),
        };
        let timeout = CommConfig::default().effective_timeout();
        let r = rendezvous(&id, me, launch.world, timeout)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for who in &r.ranks {
            (who.rank, &who.host, who.pid, &who.exports).hash(&mut h);
        }
        let table = format!("table {} {:016x}", r.ranks.len(), h.finish());
        let ms = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok());
        let Some(watch_ms) = ms("RINGREDUCE_TEST_WATCH") else {
            return Ok(table);
        };
        println!("{table}");
        let watch = Watch::start(r, |e| match e {
            Event::Lost(r) => println!("lost {r}"),
            Event::Aborted(r) => println!("aborted {r}"),
        })?;
        if std::env::var_os("RINGREDUCE_TEST_HOLD").is_some() {
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        if let Some(a) = ms("RINGREDUCE_TEST_ABORT") {
            std::thread::sleep(Duration::from_millis(a));
            watch.abort();
            println!("aborting");
        }
        std::thread::sleep(Duration::from_millis(watch_ms));
        drop(watch);
        Ok("done".into())
    };
    match run() {
        Ok(line) => {
            println!("{line}");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            println!("error {e}");
            std::process::ExitCode::from(2)
        }
    }
}
