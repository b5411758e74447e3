//! The bench as a job of processes, one rank each: `--procs N` spawns N
//! copies of itself with torchrun's variables, and a bench a launcher
//! started (torchrun, mpirun, srun) joins its job from theirs, as
//! nccl-tests runs under `mpirun -np N ... -g 1`. Rank 0 prints.

use ringreduce::bootstrap::Launch;
use ringreduce::Error;
use std::process::{Command, Stdio};

/// The launcher's job this process is a rank of, if it was started as one
/// of several; a malformed variable is an error naming it.
pub fn launched() -> Result<Option<Launch>, String> {
    match Launch::from_env() {
        Ok(l) if l.world > 1 => Ok(Some(l)),
        Ok(_) | Err(Error::NoLauncher) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// `argv` without the program and without `--procs N` (or `--procs=N`).
pub fn without_procs(argv: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in argv.iter().skip(1) {
        if skip {
            skip = false;
        } else if a == "--procs" {
            skip = true;
        } else if !a.starts_with("--procs=") {
            out.push(a.clone());
        }
    }
    out
}

/// NCCL's settings for processes on one machine: each its own
/// `NCCL_HOSTID` (NCCL refuses two ranks of one host on one GPU), its
/// socket transport on loopback unless the caller set otherwise, never
/// NVLink multicast, and the Python wheel's library where none is named.
fn nccl_env(host: &str, r: usize, library: Option<&str>) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("NCCL_HOSTID", format!("{host}-{r}")),
        ("NCCL_NVLS_ENABLE", "0".to_string()),
    ];
    for (k, d) in [("NCCL_SOCKET_IFNAME", "lo"), ("NCCL_IB_DISABLE", "1")] {
        if std::env::var_os(k).is_none() {
            v.push((k, d.to_string()));
        }
    }
    if let Some(l) = library {
        v.push((ringreduce::nccl::LIBRARY_ENV, l.to_string()));
    }
    v
}

/// A loopback port nothing listens at now: a spawned job's rendezvous.
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))
}

/// Runs this bench as `n` processes with torchrun's variables (rank 0's
/// output is this one's), on `nodes` simulated hosts when given (ranks
/// node-major, each host named by `RINGREDUCE_HOST_NAME`), and returns
/// the first failing exit code, else 0.
pub fn spawn_job(n: usize, nodes: Option<usize>, argv: &[String]) -> Result<i32, String> {
    let per = match nodes {
        Some(m) if m == 0 || !n.is_multiple_of(m) => {
            return Err(format!("--nodes {m} does not divide --procs {n}"));
        }
        Some(m) => n / m,
        None => n,
    };
    let host = |r: usize| format!("node{}", r / per);
    // A pip wheel's libnccl.so.2 is off the loader's path: name it.
    let library = match std::env::var_os(ringreduce::nccl::LIBRARY_ENV) {
        Some(_) => None,
        None => crate::nccl::find_wheel_nccl().map(|p| p.display().to_string()),
    };
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let port = free_port()?;
    let args = without_procs(argv);
    let children = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args(&args)
                .envs(Launch::torchrun_vars(r, n, port))
                .envs(nccl_env(&host(r), r, library.as_deref()))
                .envs(nodes.map(|_| ("RINGREDUCE_HOST_NAME", host(r))))
                .stdout(if r == 0 {
                    Stdio::inherit()
                } else {
                    Stdio::null()
                })
                .spawn()
                .map_err(|e| format!("starting rank {r}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut code = 0;
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().map_err(|e| format!("rank {r}: {e}"))?;
        let this = status.code().unwrap_or(2);
        if code == 0 && this != 0 {
            eprintln!("ringreduce-bench: rank {r} exited with {this}");
            code = this;
        }
    }
    Ok(code)
}

/// Sends this process's standard output nowhere: only rank 0 prints.
pub fn silence_stdout() {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: duplicates an open descriptor onto standard output.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procs_is_taken_out_in_both_spellings() {
        let argv = |s: &str| -> Vec<String> { s.split(' ').map(String::from).collect() };
        assert_eq!(
            without_procs(&argv("bench -g 1 --procs 4 -b 8")),
            argv("-g 1 -b 8")
        );
        assert_eq!(without_procs(&argv("bench --procs=4 --cpu")), argv("--cpu"));
    }
}
