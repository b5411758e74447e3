//! `cargo xtask ptx [--check]`: builds the kernels' PTX from source and
//! ships it with the kernel crate (`kernels-gpu/prebuilt/`), so that a
//! build of the library skips the nested nvptx build; `--check` (CI)
//! fails unless the shipped PTX is exactly what the sources build.

use std::path::Path;

use ringreduce_build::{
    build_ptx, read_shipped, shipped_files, source_key, write_shipped, Progress, PtxBuild, Shipped,
    DEFAULT_ARCH, LINKER_ENV,
};
use ringreduce_kernels::catalogue;

use crate::util::{fail, target_dir};

/// The nested build runs rustc with this program as its linker: when it
/// is started so, it links and exits.
pub fn link_if_asked() {
    if std::env::var_os(LINKER_ENV).is_some() {
        ringreduce_build::link_main(&|e| catalogue::module_of(e).map(String::from));
    }
}

pub fn cmd_ptx(root: &Path, args: Vec<String>) {
    let check = match args.as_slice() {
        [] => false,
        [a] if a == "--check" => true,
        _ => fail("usage: cargo xtask ptx [--check]"),
    };
    let kernels = root.join("kernels-gpu");
    let key = source_key(&kernels, &root.join("build-support"), DEFAULT_ARCH)
        .unwrap_or_else(|e| fail(format!("reading the kernel sources: {e}")));
    let req = PtxBuild {
        kernel_crate: kernels.clone(),
        package: "ringreduce-kernels".into(),
        features: Vec::new(),
        arch: DEFAULT_ARCH.into(),
        // Its own folder: the library's builds name another linker (their
        // build script), and sharing would rebuild `core` at every switch.
        target_dir: target_dir(root).join("ringreduce-ptx-shipped"),
        linker: std::env::current_exe().unwrap_or_else(|e| fail(format!("xtask's own path: {e}"))),
    };
    let what = format!("building the GPU kernels for {DEFAULT_ARCH} (nvptx64) from source");
    let built = Progress::to_terminal()
        .step(&what, || build_ptx(&req))
        .unwrap_or_else(|e| fail(e));
    let text = std::fs::read_to_string(&built)
        .unwrap_or_else(|e| fail(format!("reading {}: {e}", built.display())));
    let files = shipped_files(&kernels, DEFAULT_ARCH);
    if check {
        let refresh = "run `cargo xtask ptx` and commit kernels-gpu/prebuilt/";
        match read_shipped(&files, &key).unwrap_or_else(|e| fail(e)) {
            Shipped::Fresh(t) if t == text => println!(
                "the shipped PTX ({}) is what these sources build ({} bytes, key {key})",
                files.ptx.display(),
                text.len()
            ),
            Shipped::Fresh(_) => fail(format!(
                "the shipped PTX has these sources' key but differs from their build: {refresh} \
                 (and check that the build is reproducible: a second build must give the same bytes)"
            )),
            Shipped::Stale => fail(format!(
                "the shipped PTX is for other sources than these (key {key}): {refresh}"
            )),
            Shipped::Absent => fail(format!("no PTX is shipped: {refresh}")),
        }
    } else {
        write_shipped(&files, &key, &text)
            .unwrap_or_else(|e| fail(format!("writing {}: {e}", files.ptx.display())));
        let packed = std::fs::metadata(&files.ptx).map_or(0, |m| m.len());
        println!(
            "shipped {} ({} bytes of PTX, {packed} compressed, key {key})",
            files.ptx.display(),
            text.len()
        );
    }
}
