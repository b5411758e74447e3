//! The toolchain the kernels are built with. nvptx needs a nightly
//! (`-Zbuild-std`) with `rust-src` and `llvm-tools`, whatever toolchain
//! builds the crate that depends on `ringreduce`, so the nested build runs
//! its own pinned one through rustup, as rust-gpu's `spirv-builder` does.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned nightly; `rust-toolchain.toml` names the same one (a test
/// checks that they agree).
pub const KERNEL_TOOLCHAIN: &str = "nightly-2026-05-20";

/// The components the nested build needs besides rustc and cargo.
pub const KERNEL_COMPONENTS: [&str; 2] = ["rust-src", "llvm-tools"];

/// rustup: on `PATH`, else in `$CARGO_HOME/bin` or `~/.cargo/bin`.
pub fn find_rustup() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("rustup"))
            .find(|f| f.is_file())
    });
    let home = || {
        std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
            .map(|d| d.join("bin").join("rustup"))
            .filter(|f| f.is_file())
    };
    on_path.or_else(home)
}

/// Whether `installed` (the output of `rustup component list --installed`)
/// holds every component the kernels need.
pub fn has_components(installed: &str) -> bool {
    KERNEL_COMPONENTS.iter().all(|c| {
        installed
            .lines()
            .any(|l| l.trim() == *c || l.trim().starts_with(&format!("{c}-")))
    })
}

/// Installs the pinned toolchain and its components unless they are there,
/// saying so in the build's output: it is a download of a few hundred MB.
pub fn ensure_toolchain(rustup: &Path) -> Result<(), String> {
    let listed = Command::new(rustup)
        .args([
            "component",
            "list",
            "--installed",
            "--toolchain",
            KERNEL_TOOLCHAIN,
        ])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output();
    if let Ok(o) = &listed {
        if o.status.success() && has_components(&String::from_utf8_lossy(&o.stdout)) {
            return Ok(());
        }
    }
    let note = format!(
        "installing the kernels' toolchain {KERNEL_TOOLCHAIN} with {} through rustup \
         (once, a few hundred MB)",
        KERNEL_COMPONENTS.join(" and ")
    );
    // On the terminal now, before the download; in cargo's warnings too,
    // for logs.
    crate::Progress::to_terminal().say(&note);
    println!("cargo:warning=ringreduce: {note}");
    let mut c = Command::new(rustup);
    c.args([
        "toolchain",
        "install",
        KERNEL_TOOLCHAIN,
        "--profile",
        "minimal",
        "--no-self-update",
    ])
    .env_remove("RUSTUP_TOOLCHAIN");
    for comp in KERNEL_COMPONENTS {
        c.args(["-c", comp]);
    }
    match c.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!(
            "`rustup toolchain install {KERNEL_TOOLCHAIN}` failed ({s})"
        )),
        Err(e) => Err(format!("could not run {}: {e}", rustup.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pin_matches_rust_toolchain_toml() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rust-toolchain.toml");
        // Only in the repository; a packaged crate has no toolchain file.
        if let Ok(text) = std::fs::read_to_string(file) {
            let channel = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("channel"))
                .and_then(|r| r.split('"').nth(1))
                .expect("a channel line");
            assert_eq!(channel, KERNEL_TOOLCHAIN);
            for c in KERNEL_COMPONENTS {
                assert!(
                    text.contains(&format!("\"{c}\"")),
                    "{c} missing from rust-toolchain.toml"
                );
            }
        }
    }

    #[test]
    fn components_are_recognised_with_or_without_a_target_suffix() {
        assert!(has_components(
            "cargo-x86_64-unknown-linux-gnu\nllvm-tools-x86_64-unknown-linux-gnu\nrust-src\n"
        ));
        assert!(!has_components(
            "rust-src\nrustc-x86_64-unknown-linux-gnu\n"
        ));
        assert!(!has_components(""));
    }
}
