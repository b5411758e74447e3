//! Builds the kernels to PTX (or takes the PTX the kernel crate ships for
//! these very sources), one module per entry of the kernel catalogue
//! (`ringreduce_kernels::catalogue`), and embeds them, with SASS for the
//! GPUs named in `RINGREDUCE_SASS` if any. The same executable is also the
//! PTX linker of that nested build (see `ringreduce_build`).

use ringreduce_build::{
    build_ptx, compile_sass, make_modules, par_map, parse_sass_archs, read_shipped, shipped_files,
    source_key, EntrySpec, ModuleSpec, Progress, PtxBuild, Shipped, ARCH_ENV, DEFAULT_ARCH,
    FROM_SOURCE_ENV, LINKER_ENV, PREBUILT_ENV, PTXAS_ENV, SASS_ENV,
};
use ringreduce_kernels::catalogue;
use std::path::{Path, PathBuf};

/// Ends the build script with `msg` on cargo's error output: a clear
/// message rather than a panic's backtrace.
fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: ringreduce: {msg}");
    std::process::exit(1)
}

fn main() {
    if std::env::var_os(LINKER_ENV).is_some() {
        ringreduce_build::link_main(&|e| catalogue::module_of(e).map(String::from));
    }
    // The kernel source comes with the `ringreduce-kernels` build dependency,
    // so a packaged `ringreduce` finds it in the registry as in the workspace.
    let kernels = PathBuf::from(ringreduce_kernels::MANIFEST_DIR);
    let out_dir =
        PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| fail("OUT_DIR is not set")));
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        kernels.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-env-changed={ARCH_ENV}");
    println!("cargo:rerun-if-env-changed={PREBUILT_ENV}");
    println!("cargo:rerun-if-env-changed={SASS_ENV}");
    println!("cargo:rerun-if-env-changed={PTXAS_ENV}");
    println!("cargo:rerun-if-env-changed={FROM_SOURCE_ENV}");
    println!(
        "cargo:rerun-if-changed={}",
        kernels.join("prebuilt").display()
    );

    let progress = Progress::to_terminal();
    let (text, ptx) = kernel_ptx(&kernels, &out_dir, &progress);
    let modules = make_modules(
        &text,
        &module_specs(),
        ringreduce_kernels::arch::SHARED_DECLARATIONS,
    )
    .unwrap_or_else(|e| fail(format!("{e} (in {ptx})")));
    let dir = out_dir.join("modules");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
    let mut table = String::from("&[\n");
    for (name, text) in &modules {
        let file = dir.join(format!("{name}.ptx"));
        std::fs::write(&file, text).unwrap_or_else(|e| fail(format!("{}: {e}", file.display())));
        table.push_str(&format!("    ({name:?}, include_str!({file:?})),\n"));
    }
    table.push(']');
    std::fs::write(out_dir.join("modules.rs"), table).unwrap_or_else(|e| {
        fail(format!(
            "writing modules.rs into {}: {e}",
            out_dir.display()
        ))
    });
    let names: Vec<&str> = modules.iter().map(|(n, _)| n.as_str()).collect();
    embed_sass(&dir, &names, &out_dir, &progress);
}

/// The kernels' linked PTX and where it came from: a file named in
/// `RINGREDUCE_PTX_FILE`, else the PTX the kernel crate ships when it was
/// built from these very sources (the default build only), else a nested
/// build of the kernels.
fn kernel_ptx(kernels: &Path, out_dir: &Path, progress: &Progress) -> (String, String) {
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| fail(format!("reading {}: {e}", p.display())))
    };
    if let Some(p) = std::env::var_os(PREBUILT_ENV) {
        let p = PathBuf::from(p);
        return (read(&p), p.display().to_string());
    }
    let mut features = Vec::new();
    if std::env::var_os("CARGO_FEATURE_FAULT_INJECTION").is_some() {
        features.push("fault-injection".to_string());
    }
    let arch = std::env::var(ARCH_ENV).unwrap_or_else(|_| DEFAULT_ARCH.to_string());
    let from_source = std::env::var(FROM_SOURCE_ENV).is_ok_and(|v| v == "1");
    if features.is_empty() && !from_source {
        let build_crate = Path::new(ringreduce_build::MANIFEST_DIR);
        let key = source_key(kernels, build_crate, &arch)
            .unwrap_or_else(|e| fail(format!("reading the kernel sources: {e}")));
        let files = shipped_files(kernels, &arch);
        match read_shipped(&files, &key).unwrap_or_else(|e| fail(e)) {
            Shipped::Fresh(text) => return (text, files.ptx.display().to_string()),
            Shipped::Stale => progress.say(&format!(
                "the shipped PTX ({}) is for other kernel sources: building the kernels \
                 (`cargo xtask ptx` ships the new PTX)",
                files.ptx.display()
            )),
            Shipped::Absent => {}
        }
    }
    let mut target_dir = ringreduce_build::shared_target_dir(out_dir);
    if !features.is_empty() {
        target_dir = target_dir.join(features.join("-"));
    }
    let req = PtxBuild {
        kernel_crate: kernels.to_path_buf(),
        package: "ringreduce-kernels".into(),
        features,
        arch: arch.clone(),
        target_dir,
        linker: std::env::current_exe()
            .unwrap_or_else(|e| fail(format!("the build script's own path: {e}"))),
    };
    let what = format!("building the GPU kernels for {arch} (nvptx64)");
    let p = progress
        .step(&what, || build_ptx(&req))
        .unwrap_or_else(|e| fail(e));
    (read(&p), p.display().to_string())
}

/// The catalogue's modules, in the order of their first entries, each
/// with its entries' launch bounds.
fn module_specs() -> Vec<ModuleSpec> {
    let mut specs: Vec<ModuleSpec> = Vec::new();
    for e in catalogue::all() {
        let spec = EntrySpec {
            name: e.name.to_string(),
            threads: e.threads,
            min_blocks_per_sm: e.min_blocks_per_sm,
        };
        match specs.iter_mut().find(|m| m.name == e.module) {
            Some(m) => m.entries.push(spec),
            None => specs.push(ModuleSpec {
                name: e.module.to_string(),
                entries: vec![spec],
            }),
        }
    }
    specs
}

/// Writes `sass.rs`, the table `gpu::module` includes: for each GPU named
/// in `RINGREDUCE_SASS`, its compute capability and a cubin per module,
/// each built from that module's final PTX (launch bounds included), every
/// core at once. Empty by default, so a build needs no CUDA tools.
fn embed_sass(dir: &Path, modules: &[&str], out_dir: &Path, progress: &Progress) {
    let archs =
        parse_sass_archs(&std::env::var(SASS_ENV).unwrap_or_default()).unwrap_or_else(|e| fail(e));
    let ptxas = std::env::var_os(PTXAS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ptxas"));
    let mut table = String::from("&[\n");
    for cc in archs {
        let what = format!("SASS for sm_{cc} ({} modules, ptxas)", modules.len());
        let built = progress.step(&what, || {
            par_map(modules, |m| {
                let cubin = dir.join(format!("{m}.sm_{cc}.cubin"));
                compile_sass(&ptxas, &dir.join(format!("{m}.ptx")), cc, &cubin).map(|()| cubin)
            })
        });
        table.push_str(&format!("    ({cc}, &[\n"));
        for (m, cubin) in modules.iter().zip(built) {
            let cubin = cubin.unwrap_or_else(|e| fail(e));
            table.push_str(&format!("        ({m:?}, include_bytes!({cubin:?})),\n"));
        }
        table.push_str("    ]),\n");
    }
    table.push(']');
    std::fs::write(out_dir.join("sass.rs"), table)
        .unwrap_or_else(|e| fail(format!("writing sass.rs into {}: {e}", out_dir.display())));
}
