//! `sass`: register counts and SASS of the embedded PTX, with NVIDIA's
//! ptxas and cuobjdump (`tools`), no GPU needed.

use crate::tools::{cuda_tools, with_sass};
use crate::util::{cargo, check, fail, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn cmd_sass(root: &Path, args: Vec<String>) {
    let mut arch = "sm_90".to_string();
    let mut entries = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--arch" {
            arch = it.next().unwrap_or_else(|| fail("--arch needs a value"));
        } else {
            entries.push(a);
        }
    }
    if entries.is_empty() {
        entries = vec![
            "ringreduce_float_sum".into(),
            "ringreduce_reduce_block".into(),
        ];
    }
    let bin = cuda_tools(root);
    let tools = target_dir(root).join("cuda-tools");
    // With the bundle's SASS request, so the two share one release build.
    let mut build = Command::new(cargo());
    build
        .current_dir(root)
        .args(["build", "--release", "-p", "ringreduce"]);
    with_sass(&mut build, root);
    check(&mut build);
    let ptx = newest_ptx(&target_dir(root).join("release").join("build"))
        .unwrap_or_else(|| fail("no kernels.ptx under target/release/build"));
    println!("sass: {} for {arch}", ptx.display());
    for e in entries {
        let cubin = tools.join(format!("{e}.cubin"));
        let out = Command::new(bin.join("ptxas"))
            .args([&format!("-arch={arch}"), "-O3", "-v", "-e", &e])
            .arg(&ptx)
            .arg("-o")
            .arg(&cubin)
            .output()
            .unwrap_or_else(|e| fail(format!("ptxas: {e}")));
        let text = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            fail(format!("ptxas failed on {e}: {text}"));
        }
        for l in text.lines().filter(|l| l.contains("Used")) {
            println!("{e}: {}", l.trim_start_matches("ptxas info    : "));
        }
        let sass = Command::new(bin.join("cuobjdump"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .arg("-sass")
            .arg(&cubin)
            .output()
            .unwrap_or_else(|e| fail(format!("cuobjdump: {e}")));
        let file = tools.join(format!("{e}.sass"));
        std::fs::write(&file, &sass.stdout).unwrap_or_else(|e| fail(e));
        println!("{e}: SASS in {}", file.display());
    }
}

/// The most recently built `ringreduce-*/out/kernels.ptx`.
fn newest_ptx(build: &Path) -> Option<PathBuf> {
    std::fs::read_dir(build)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ringreduce-"))
        .map(|e| e.path().join("out").join("kernels.ptx"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}
