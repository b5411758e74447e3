//! `cargo xtask <command>`: build helpers and the bench.
//!
//! * `cargo xtask bench [bench options]` builds the bench in release mode
//!   and runs it (see `cargo xtask bench --help`).
//! * `cargo xtask bundle <dir>` builds it and copies the standalone binary
//!   to `<dir>`, to run on a GPU host without a Rust toolchain.
//! * `cargo xtask example` runs the small example reduce-scatter.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn build_bench() -> PathBuf {
    let st = Command::new(cargo())
        .current_dir(workspace_root())
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "xtask",
            "--bin",
            "ringreduce-bench",
        ])
        .status()
        .expect("running cargo");
    if !st.success() {
        exit(st.code().unwrap_or(1));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("release").join("ringreduce-bench")
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("bench") => {
            let bin = build_bench();
            let st = Command::new(bin)
                .args(args)
                .status()
                .expect("running the bench");
            exit(st.code().unwrap_or(1));
        }
        Some("bundle") => {
            let Some(dir) = args.next() else {
                eprintln!("usage: cargo xtask bundle <dir>");
                exit(2)
            };
            let bin = build_bench();
            std::fs::create_dir_all(&dir).expect("creating the bundle directory");
            let dst = Path::new(&dir).join("ringreduce-bench");
            std::fs::copy(&bin, &dst).expect("copying the bench");
            println!("{}", dst.display());
        }
        Some("example") => {
            let st = Command::new(cargo())
                .current_dir(workspace_root())
                .args([
                    "run",
                    "--release",
                    "--quiet",
                    "-p",
                    "ringreduce",
                    "--example",
                    "reduce_scatter",
                ])
                .status()
                .expect("running cargo");
            exit(st.code().unwrap_or(1));
        }
        _ => {
            eprintln!("usage: cargo xtask <bench [options] | bundle <dir> | example>");
            exit(2);
        }
    }
}
