//! `sass`: register counts and SASS of the embedded PTX, with NVIDIA's
//! ptxas and cuobjdump (`tools`), no GPU needed.

use crate::bundle::sass_target;
use crate::tools::{cuda_tools, with_sass};
use crate::util::{cargo, check, fail, target_dir};
use ringreduce_kernels::catalogue;
use ringreduce_kernels::{Algorithm, Collective, DataType, Op};
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
        let f32_sum =
            |a| catalogue::collective_entry(a, Collective::AllReduce, DataType::F32, Op::Sum);
        entries = vec![
            f32_sum(Algorithm::Ring).name.into(),
            f32_sum(Algorithm::Local).name.into(),
            catalogue::REDUCE_BLOCK.name.into(),
        ];
    }
    let bin = cuda_tools(root);
    let tools = target_dir(root).join("cuda-tools");
    // With the bundle's SASS request, so the two share one release build.
    let target = sass_target(root);
    let mut build = Command::new(cargo());
    build
        .current_dir(root)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--release", "-p", "ringreduce"]);
    with_sass(&mut build, root);
    check(&mut build);
    let modules = newest_modules(&target.join("release").join("build"))
        .unwrap_or_else(|| fail("no kernel modules under target/release/build"));
    println!("sass: {} for {arch}", modules.display());
    for e in entries {
        let module = catalogue::by_name(&e)
            .unwrap_or_else(|| fail(format!("{e} is no entry of the kernel catalogue")))
            .module;
        let ptx = modules.join(format!("{module}.ptx"));
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
        for l in unrolled_loads(&String::from_utf8_lossy(&sass.stdout)) {
            println!("{e}: unrolled body {l}");
        }
    }
}

/// The most recently built `ringreduce-*/out/modules`, the folder of the
/// kernels' modules.
fn newest_modules(build: &Path) -> Option<PathBuf> {
    std::fs::read_dir(build)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ringreduce-"))
        .map(|e| e.path().join("out").join("modules"))
        .filter(|p| p.is_dir())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

/// The straight-line runs of SASS with at least eight 16-byte loads, one
/// letter per access or float op: `L` a 16-byte load, `a` a float add or
/// multiply, `S` a 16-byte store, `P` an L2 prefetch. A reduce loop whose
/// sixteen loads do not all come before its first `a` waits on memory twice
/// a round: ptxas reused the first loads' registers for the rest
/// (`bench/NOTES.md`, 2026-12-06: Auto to 1 GiB).
fn unrolled_loads(sass: &str) -> Vec<String> {
    let mut runs = vec![String::new()];
    for line in sass.lines() {
        let Some((_, ins)) = line.split_once("*/") else {
            continue;
        };
        let op = ins.split_whitespace().find(|w| !w.starts_with('@'));
        let Some(op) = op else { continue };
        let c = match op {
            _ if op.starts_with("LD") && op.ends_with(".128") => 'L',
            _ if op.starts_with("ST") && op.ends_with(".128") => 'S',
            _ if op.starts_with("FADD") || op.starts_with("FMUL") => 'a',
            _ if op.starts_with("CCTL") => 'P',
            _ if op.starts_with("BRA") || op.starts_with("BAR") || op.starts_with("CALL") => '|',
            _ => continue,
        };
        match c {
            '|' => runs.push(String::new()),
            c => runs.last_mut().unwrap().push(c),
        }
    }
    runs.retain(|r| r.matches('L').count() >= 8);
    runs
}

#[cfg(test)]
mod tests {
    use super::unrolled_loads;

    #[test]
    fn runs_of_wide_loads_between_branches() {
        let sass = "\
        /*0010*/ LD.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/ @!P0 CCTL.E.PF2 [R8] ;
        /*0030*/ BRA 0x100 ;
        "
        .to_string()
            + &"        /*0040*/ LD.E.128 R8, desc[UR4][R2.64+0x10] ;\n".repeat(9)
            + "        /*0050*/ FADD R8, R8, R12 ;\n        /*0060*/ ST.E.128 desc[UR4][R6.64], R8 ;\n";
        assert_eq!(unrolled_loads(&sass), vec!["LLLLLLLLLaS".to_string()]);
    }
}
