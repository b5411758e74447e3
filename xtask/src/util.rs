//! Small helpers every command uses: cargo, the workspace and target
//! folders, running commands, failing with a message.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

pub fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("xtask: {msg}");
    exit(1)
}

/// Runs a command to completion; exits with its status if it failed.
pub fn check(cmd: &mut Command) {
    let st = cmd
        .status()
        .unwrap_or_else(|e| fail(format!("{:?}: {e}", cmd.get_program())));
    if !st.success() {
        exit(st.code().unwrap_or(1));
    }
}

/// Runs a command and exits with its status.
pub fn exec(cmd: &mut Command) -> ! {
    let st = cmd
        .status()
        .unwrap_or_else(|e| fail(format!("{:?}: {e}", cmd.get_program())));
    exit(st.code().unwrap_or(1))
}

/// A second name for `from` at `to` where both are on one file system,
/// else a copy: a bundle inside the target folder (the CPU suite's) then
/// takes no disk of its own, which CI's machines may be short of.
pub fn link_or_copy(from: &Path, to: &Path) {
    let _ = std::fs::remove_file(to);
    if std::fs::hard_link(from, to).is_err() {
        copy(from, to);
    }
}

pub fn copy(from: &Path, to: &Path) {
    // Remove first: the destination may be a running or read-only binary.
    let _ = std::fs::remove_file(to);
    std::fs::copy(from, to)
        .unwrap_or_else(|e| fail(format!("{} -> {}: {e}", from.display(), to.display())));
}
