//! `cargo xtask <command>`: the developer commands. Everything that runs on
//! a GPU host lives in the `ringreduce-bench` crate; this only builds,
//! bundles and starts it.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

const HELP: &str = "\
cargo xtask <command> [options]

Commands:
  example                 the small reduce-scatter example: on the GPU if one is
                          present, then on the CPU execution
  bench [FLAGS]           build the bench (release) and run it; nccl-tests flags,
                          see `cargo xtask bench --help`
  bundle [--dev] [--variant REV|WORKTREE [--name NAME]] DIR
                          copy what a GPU host without Rust needs into DIR:
                          ringreduce-bench, gpu-suite, ringreduce-compare and the
                          test binaries (DIR/tests/). With --variant, build only
                          the bench of a branch, commit or worktree into
                          DIR/var/NAME/ (for compare). --dev: the debug profile
                          and every feature, as CI's test build
  gpu-suite [ARGS]        bundle into target/bundle, then run its gpu-suite: all
                          GPU evidence (tests, faults, sanitizers, soaks, bench
                          sweeps) into one dated folder with a summary. --cpu runs
                          it on the CPU execution (what CI does). See
                          `cargo xtask gpu-suite --help`
  compare BASE VARIANT... [ARGS]
                          bundle, then run ringreduce-compare: bench builds
                          against each other in one job, interleaved, base first
                          and last. See `cargo xtask compare --help`
  sass [--arch sm_90] [ENTRY...]
                          register counts and SASS of the embedded PTX, no GPU
                          needed (ptxas/cuobjdump from NVIDIA's PyPI wheels)
  package-check           `cargo package` the kernel, build-support and library
                          crates, then build and run a small crate outside the
                          workspace on stable Rust against them (a CPU collective)
  help                    this text
";

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("xtask: {msg}");
    exit(1)
}

/// Runs a command to completion; exits with its status if it failed.
fn check(cmd: &mut Command) {
    let st = cmd
        .status()
        .unwrap_or_else(|e| fail(format!("{:?}: {e}", cmd.get_program())));
    if !st.success() {
        exit(st.code().unwrap_or(1));
    }
}

/// Runs a command and exits with its status.
fn exec(cmd: &mut Command) -> ! {
    let st = cmd
        .status()
        .unwrap_or_else(|e| fail(format!("{:?}: {e}", cmd.get_program())));
    exit(st.code().unwrap_or(1))
}

/// How a bundle is built.
#[derive(Clone, Copy, PartialEq)]
enum Profile {
    /// Release binaries: the bench without test features, the tests with
    /// fault injection. What GPU evidence is gathered with.
    Release,
    /// The debug profile with every workspace feature: CI's test build, so
    /// a CPU suite right after `cargo test` rebuilds nothing.
    Dev,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Dev => "debug",
        }
    }
}

/// Builds the bench crate's binaries into `target` and returns their folder.
fn build_tools(root: &Path, target: &Path, profile: Profile) -> PathBuf {
    let mut c = Command::new(cargo());
    c.current_dir(root)
        .env("CARGO_TARGET_DIR", target)
        .args(["build"]);
    match profile {
        Profile::Release => c.args(["--release", "-p", "ringreduce-bench"]),
        Profile::Dev => c.args(["--workspace", "--all-features"]),
    };
    check(c.arg("--bins"));
    target.join(profile.dir())
}

/// The test binaries the suite runs, by target name.
const SUITE_TESTS: [&str; 6] = [
    "gpu",
    "gpu_faults",
    "cpu_matrix",
    "cpu_back_to_back",
    "faults",
    "bad_input",
];

/// Builds the integration tests and returns (name, executable) of those the
/// suite runs, read from cargo's JSON messages.
fn build_tests(root: &Path, profile: Profile) -> Vec<(String, PathBuf)> {
    let mut c = Command::new(cargo());
    c.current_dir(root).args([
        "test",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    match profile {
        Profile::Release => c.args([
            "--release",
            "-p",
            "ringreduce-tests",
            "--features",
            "fault-injection",
        ]),
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

fn copy(from: &Path, to: &Path) {
    // Remove first: the destination may be a running or read-only binary.
    let _ = std::fs::remove_file(to);
    std::fs::copy(from, to)
        .unwrap_or_else(|e| fail(format!("{} -> {}: {e}", from.display(), to.display())));
}

fn bundle(root: &Path, dir: &Path, profile: Profile) {
    let bins = build_tools(root, &target_dir(root), profile);
    let tests = build_tests(root, profile);
    std::fs::create_dir_all(dir.join("tests"))
        .unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
    for b in ["ringreduce-bench", "gpu-suite", "ringreduce-compare"] {
        copy(&bins.join(b), &dir.join(b));
    }
    for (name, exe) in tests {
        copy(&exe, &dir.join("tests").join(name));
    }
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
    check(
        Command::new(cargo())
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", &target)
            .args(["build", "--release", "--bin", "ringreduce-bench"]),
    );
    let bins = target.join("release");
    let out = dir.join("var").join(&name);
    std::fs::create_dir_all(&out).unwrap_or_else(|e| fail(format!("{}: {e}", out.display())));
    copy(
        &bins.join("ringreduce-bench"),
        &out.join("ringreduce-bench"),
    );
    println!("variant {name}: {}", out.join("ringreduce-bench").display());
}

fn cmd_bundle(root: &Path, mut args: Vec<String>) {
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
fn run_bundled(root: &Path, bin: &str, args: Vec<String>) -> ! {
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

fn cmd_sass(root: &Path, args: Vec<String>) {
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
            "ringreduce_rs_float_sum".into(),
            "ringreduce_reduce_block".into(),
        ];
    }
    let tools = target_dir(root).join("cuda-tools");
    let bin = tools.join("bin");
    if !bin.join("ptxas").is_file() || !bin.join("cuobjdump").is_file() {
        println!(
            "sass: fetching NVIDIA's ptxas and cuobjdump wheels from PyPI into {}",
            tools.display()
        );
        let wheels = tools.join("wheels");
        check(
            Command::new("python3")
                .args(["-m", "pip", "download", "-q", "--no-deps", "-d"])
                .arg(&wheels)
                .args([
                    "nvidia-cuda-nvcc",
                    "nvidia-cuda-nvdisasm",
                    "nvidia-cuda-cuobjdump",
                ]),
        );
        std::fs::create_dir_all(&bin).unwrap_or_else(|e| fail(e));
        for w in std::fs::read_dir(&wheels)
            .unwrap_or_else(|e| fail(e))
            .flatten()
        {
            check(
                Command::new("python3")
                    .args(["-m", "zipfile", "-e"])
                    .arg(w.path())
                    .arg(tools.join("x")),
            );
        }
        for b in ["ptxas", "nvdisasm", "cuobjdump"] {
            let found = find_file(&tools.join("x"), b)
                .unwrap_or_else(|| fail(format!("no {b} in the wheels")));
            copy(&found, &bin.join(b));
            check(Command::new("chmod").arg("+x").arg(bin.join(b)));
        }
    }
    check(
        Command::new(cargo())
            .current_dir(root)
            .args(["build", "--release", "-p", "ringreduce"]),
    );
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

/// The crates a user's build needs, in dependency order.
const PUBLISHED: [&str; 3] = ["ringreduce-kernels", "ringreduce-build", "ringreduce"];

/// Packages the published crates (cargo verifies each by building it from
/// its package), then builds and runs `xtask/user-crate` on stable against
/// them, outside the workspace and its toolchain file.
fn cmd_package_check(root: &Path) {
    let mut c = Command::new(cargo());
    c.current_dir(root).args(["package", "--allow-dirty"]);
    for p in PUBLISHED {
        c.args(["-p", p]);
    }
    check(&mut c);
    let work = std::env::temp_dir().join("ringreduce-package-check");
    let _ = std::fs::remove_dir_all(work.join("crates"));
    let crates = work.join("crates");
    let user = work.join("user");
    std::fs::create_dir_all(&crates).unwrap_or_else(|e| fail(e));
    std::fs::create_dir_all(user.join("src")).unwrap_or_else(|e| fail(e));
    let version = env!("CARGO_PKG_VERSION");
    let mut patch = String::new();
    for p in PUBLISHED {
        let file = target_dir(root)
            .join("package")
            .join(format!("{p}-{version}.crate"));
        check(
            Command::new("tar")
                .arg("xzf")
                .arg(&file)
                .arg("-C")
                .arg(&crates),
        );
        patch += &format!(
            "{p} = {{ path = {:?} }}\n",
            crates.join(format!("{p}-{version}"))
        );
    }
    let manifest = format!(
        "[package]\nname = \"ringreduce-user\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nringreduce = \"{version}\"\n\n[patch.crates-io]\n{patch}\n\
         # Not part of any workspace around it.\n[workspace]\n"
    );
    std::fs::write(user.join("Cargo.toml"), manifest).unwrap_or_else(|e| fail(e));
    copy(
        &root.join("xtask/user-crate/src/main.rs"),
        &user.join("src/main.rs"),
    );
    // Stable through rustup's proxy, with none of this cargo's settings.
    let mut run = Command::new("cargo");
    run.current_dir(&user)
        .env("RUSTUP_TOOLCHAIN", "stable")
        .args(["run"]);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("CARGO") && k != "CARGO_HOME"
            || ["RUSTC", "RUSTDOC", "RUSTFLAGS", "RUSTC_WRAPPER"].contains(&k.as_str())
        {
            run.env_remove(k);
        }
    }
    println!("package-check: building {} on stable", user.display());
    let out = run.output().unwrap_or_else(|e| fail(format!("cargo: {e}")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    print!("{stdout}");
    if !out.status.success() || !stdout.contains(", 0 wrong") {
        fail("the user crate did not build or run on stable");
    }
    println!("package-check: ok");
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
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

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    if args.is_empty() {
        eprint!("{HELP}");
        exit(2);
    }
    let cmd = args.remove(0);
    match cmd.as_str() {
        "help" | "--help" | "-h" => print!("{HELP}"),
        "example" => exec(Command::new(cargo()).current_dir(&root).args([
            "run",
            "--release",
            "-p",
            "ringreduce",
            "--example",
            "reduce_scatter",
        ])),
        "bench" if args.iter().any(|a| a == "--help" || a == "-h") => exec(
            // Help needs no release build.
            Command::new(cargo())
                .current_dir(&root)
                .args([
                    "run",
                    "-p",
                    "ringreduce-bench",
                    "--bin",
                    "ringreduce-bench",
                    "--",
                ])
                .args(args),
        ),
        "bench" => {
            let bins = build_tools(&root, &target_dir(&root), Profile::Release);
            exec(Command::new(bins.join("ringreduce-bench")).args(args))
        }
        "bundle" => cmd_bundle(&root, args),
        "gpu-suite" => run_bundled(&root, "gpu-suite", args),
        "compare" => run_bundled(&root, "ringreduce-compare", args),
        "sass" => cmd_sass(&root, args),
        "package-check" => cmd_package_check(&root),
        other => {
            eprint!("xtask: unknown command {other:?}\n\n{HELP}");
            exit(2);
        }
    }
}
