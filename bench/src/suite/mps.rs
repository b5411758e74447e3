//! MPS for the suite's multi-process parts: started with private pipe and
//! log folders when the host has it, so that the processes of one GPU run
//! at once instead of by time slices, and stopped (`quit`) when the part
//! ends. GPU settings are left as they are.

use super::ctx::{cuda_tool, Ctx};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A running MPS daemon of this suite's, stopped when dropped.
pub(super) struct Mps {
    control: PathBuf,
    env: Vec<(String, String)>,
}

impl Mps {
    /// MPS for a part on `ctx`'s GPU, or `None`: on the CPU execution, or
    /// where `nvidia-cuda-mps-control` is missing or does not start (the
    /// part then runs time-sliced, and says so in its log).
    pub(super) fn start(ctx: &Ctx) -> Option<Mps> {
        if ctx.cpu {
            return None;
        }
        let control = cuda_tool("nvidia-cuda-mps-control")?;
        let dir = ctx.out.join("mps");
        let (pipe, log) = (dir.join("pipe"), dir.join("log"));
        std::fs::create_dir_all(&pipe).ok()?;
        std::fs::create_dir_all(&log).ok()?;
        let env = vec![
            ("CUDA_MPS_PIPE_DIRECTORY".into(), pipe.display().to_string()),
            ("CUDA_MPS_LOG_DIRECTORY".into(), log.display().to_string()),
        ];
        let started = Command::new(&control)
            .arg("-d")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .status()
            .is_ok_and(|s| s.success());
        started.then_some(Mps { control, env })
    }

    /// What the part's processes need to reach the daemon.
    pub(super) fn env(&self) -> &[(String, String)] {
        &self.env
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        let quit = Command::new(&self.control)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .spawn();
        if let Ok(mut c) = quit {
            if let Some(mut i) = c.stdin.take() {
                let _ = i.write_all(b"quit\n");
            }
            let _ = c.wait();
        }
    }
}
