//! One process of a test job: reads its place from the launcher's
//! variables, meets the other ranks, and prints one line, `table <ranks>
//! <hash>` (the identities it received, hashed, so every rank's line can be
//! compared) or `error <text>` with exit code 2. `RINGREDUCE_TEST_STALL`
//! makes it wait forever before the rendezvous, to be killed there.

use ringreduce::bootstrap::{host_name, rendezvous, Identity, Launch};
use ringreduce::CommConfig;
use std::hash::{Hash, Hasher};

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
        Ok(format!("table {} {:016x}", r.ranks.len(), h.finish()))
    };
    match run() {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            println!("error {e}");
            std::process::ExitCode::from(2)
        }
    }
}
