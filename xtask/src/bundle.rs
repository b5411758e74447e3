//! `bundle`, and the suite and compare run from a bundle: what a GPU host
//! without Rust needs, built here.

use crate::tools::with_sass;
use crate::util::{cargo, check, copy, exec, fail, link_or_copy, target_dir};
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// How a bundle is built.
#[derive(Clone, Copy, PartialEq)]
pub enum Profile {
    /// Release binaries with embedded SASS (see `tools::with_sass`): the
    /// bench without test features, the tests with fault injection. What
    /// GPU evidence is gathered with. Built in a target folder of its own
    /// ([`sass_target`]), so that its SASS request never makes `example` or
    /// `bench` rebuild the library, nor they it.
    Release,
    /// Release binaries without SASS, in the usual target folder: what
    /// `example` and `bench` run, one build for both.
    Plain,
    /// The debug profile with every workspace feature: CI's test build, so
    /// a CPU suite right after `cargo test` rebuilds nothing.
    Dev,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Release | Profile::Plain => "release",
            Profile::Dev => "debug",
        }
    }

    /// The target folder its builds use.
    pub fn target(self, root: &Path) -> PathBuf {
        match self {
            Profile::Release => sass_target(root),
            Profile::Plain | Profile::Dev => target_dir(root),
        }
    }
}

/// The target folder of builds with SASS (bundles, `sass`).
pub fn sass_target(root: &Path) -> PathBuf {
    target_dir(root).join("sass")
}

/// Builds the bench crate's binaries for `profile` and returns their
/// folder.
pub fn build_tools(root: &Path, profile: Profile) -> PathBuf {
    let target = profile.target(root);
    let mut c = Command::new(cargo());
    c.current_dir(root)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build"]);
    match profile {
        Profile::Release => {
            with_sass(&mut c, root);
            c.args(["--release", "-p", "ringreduce-bench"])
        }
        Profile::Plain => c.args(["--release", "-p", "ringreduce-bench"]),
        Profile::Dev => c.args(["--workspace", "--all-features"]),
    };
    check(c.arg("--bins"));
    target.join(profile.dir())
}

/// The test binaries the suite runs, by target name.
const SUITE_TESTS: [&str; 11] = [
    "gpu",
    "gpu_loading",
    "gpu_faults",
    "gpu_grad",
    "gpu_jobs",
    "jobs",
    "grad",
    "cpu_matrix",
    "cpu_back_to_back",
    "faults",
    "bad_input",
];

/// Builds the integration tests and returns (name, executable) of those the
/// suite runs, read from cargo's JSON messages.
fn build_tests(root: &Path, profile: Profile) -> Vec<(String, PathBuf)> {
    let mut c = Command::new(cargo());
    c.current_dir(root)
        .env("CARGO_TARGET_DIR", profile.target(root))
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ]);
    let release = [
        "--release",
        "-p",
        "ringreduce-tests",
        "--features",
        "fault-injection,nccl",
    ];
    match profile {
        Profile::Release => {
            with_sass(&mut c, root);
            c.args(release)
        }
        Profile::Plain => c.args(release),
        Profile::Dev => c.args(["--workspace", "--all-features"]),
    };
    let out = c
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| fail(format!("cargo: {e}")));
    if !out.status.success() {
        exit(out.status.code().unwrap_or(1));
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let name = msg["target"]["name"].as_str().unwrap_or("");
        let is_test = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|x| x == "test"));
        if let (true, true, Some(exe)) = (
            is_test,
            SUITE_TESTS.contains(&name),
            msg["executable"].as_str(),
        ) {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    for t in SUITE_TESTS {
        if !found.iter().any(|(n, _)| n == t) {
            fail(format!("cargo built no test binary named {t}"));
        }
    }
    found
}

fn bundle(root: &Path, dir: &Path, profile: Profile) {
    let bins = build_tools(root, profile);
    let tests = build_tests(root, profile);
    std::fs::create_dir_all(dir.join("tests"))
        .unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
    // The CPU suite's bundle lives beside the build in the target folder
    // and is remade by every run, so it need not survive a rebuild: it
    // links. A GPU bundle is carried away, so it is a copy.
    let put = if profile == Profile::Dev {
        link_or_copy
    } else {
        copy
    };
    for b in [
        "ringreduce-bench",
        "gpu-suite",
        "ringreduce-compare",
        "ringreduce-probe",
    ] {
        put(&bins.join(b), &dir.join(b));
    }
    for (name, exe) in tests {
        put(&exe, &dir.join("tests").join(name));
    }
    // The process tests' rank binary, where they look for it: beside them.
    let job = profile.target(root).join(profile.dir()).join("job");
    put(&job, &dir.join("tests").join("job"));
    println!("bundle: {}", dir.display());
}

/// Builds the bench of another revision (a branch, a commit, or a worktree
/// folder) into `dir/var/<name>/ringreduce-bench`.
fn bundle_variant(root: &Path, dir: &Path, rev: &str, name: Option<&str>) {
    let name = name
        .map(str::to_string)
        .unwrap_or_else(|| rev.trim_end_matches('/').replace(['/', '\\', ':'], "-"));
    let src = if Path::new(rev).is_dir() {
        PathBuf::from(rev)
    } else {
        let wt = target_dir(root).join("variants").join(&name);
        if wt.exists() {
            check(
                Command::new("git")
                    .current_dir(&wt)
                    .args(["checkout", "--quiet", "--detach", rev]),
            );
        } else {
            check(
                Command::new("git")
                    .current_dir(root)
                    .args(["worktree", "add", "--detach"])
                    .arg(&wt)
                    .arg(rev),
            );
        }
        wt
    };
    // One target folder for every variant, so dependencies build once.
    let target = target_dir(root).join("variants-target");
    // By binary name, not package: older revisions kept it in `xtask`.
    let mut c = Command::new(cargo());
    c.current_dir(&src).env("CARGO_TARGET_DIR", &target).args([
        "build",
        "--release",
        "--bin",
        "ringreduce-bench",
    ]);
    // Older revisions ignore the request and keep the JIT.
    with_sass(&mut c, root);
    check(&mut c);
    let bins = target.join("release");
    let out = dir.join("var").join(&name);
    std::fs::create_dir_all(&out).unwrap_or_else(|e| fail(format!("{}: {e}", out.display())));
    copy(
        &bins.join("ringreduce-bench"),
        &out.join("ringreduce-bench"),
    );
    println!("variant {name}: {}", out.join("ringreduce-bench").display());
}

pub fn cmd_bundle(root: &Path, mut args: Vec<String>) {
    let mut take = |flag: &str| -> Option<String> {
        let i = args.iter().position(|a| a == flag)?;
        args.remove(i);
        if i < args.len() {
            Some(args.remove(i))
        } else {
            fail(format!("{flag} needs a value"))
        }
    };
    let variant = take("--variant");
    let name = take("--name");
    let dev = args
        .iter()
        .position(|a| a == "--dev")
        .map(|i| args.remove(i))
        .is_some();
    let [dir] = args.as_slice() else {
        fail("usage: cargo xtask bundle [--dev] [--variant REV|WORKTREE [--name NAME]] DIR")
    };
    let dir = PathBuf::from(dir);
    match variant {
        Some(rev) => bundle_variant(root, &dir, &rev, name.as_deref()),
        None => bundle(
            root,
            &dir,
            if dev { Profile::Dev } else { Profile::Release },
        ),
    }
}

/// The suite and compare run from a bundle in `target/`, as on a GPU host.
pub fn run_bundled(root: &Path, bin: &str, args: Vec<String>) -> ! {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        // Help needs no bundle: the debug build of the one binary will do.
        exec(
            Command::new(cargo())
                .current_dir(root)
                .args(["run", "-p", "ringreduce-bench", "--bin", bin, "--"])
                .args(args),
        )
    }
    let profile = if args.iter().any(|a| a == "--cpu") {
        Profile::Dev
    } else {
        Profile::Release
    };
    let dir = target_dir(root).join(format!("bundle-{}", profile.dir()));
    bundle(root, &dir, profile);
    exec(Command::new(dir.join(bin)).args(args))
}
