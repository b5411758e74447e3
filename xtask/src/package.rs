//! `package-check`: the published crates as a user outside the workspace,
//! on stable Rust, gets them: the kernels from the PTX the kernel crate
//! ships, with no nested nvptx build.

use crate::util::{cargo, check, copy, fail, target_dir};
use std::path::Path;
use std::process::Command;

/// The crates a user's build needs, in dependency order.
const PUBLISHED: [&str; 3] = ["ringreduce-kernels", "ringreduce-build", "ringreduce"];

/// Removes earlier package-checks' unpacked copies of our crates from
/// cargo's local overlay registries (the `registry/{src,cache}/-<hash>`
/// folders). Cargo unpacks a crate version there once and reuses it, so
/// with an unchanged version number a second check on the same machine
/// would verify the previous run's sources, not this tree's.
fn forget_stale_packages() {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    let Some(home) = home else { return };
    let version = env!("CARGO_PKG_VERSION");
    for kind in ["src", "cache"] {
        let Ok(dirs) = std::fs::read_dir(home.join("registry").join(kind)) else {
            continue;
        };
        for d in dirs.flatten() {
            // Overlay registries only; crates.io's folders are named after it.
            if !d.file_name().to_string_lossy().starts_with('-') {
                continue;
            }
            for p in PUBLISHED {
                let _ = std::fs::remove_dir_all(d.path().join(format!("{p}-{version}")));
                let _ = std::fs::remove_file(d.path().join(format!("{p}-{version}.crate")));
            }
        }
    }
}

/// Packages the published crates, then builds and runs `xtask/user-crate`
/// on stable against them, outside the workspace and its toolchain file.
pub fn cmd_package_check(root: &Path) {
    forget_stale_packages();
    // `--no-verify`: the stable user build below compiles every packaged
    // crate from its archive, which is cargo's verification and more, so
    // verifying here too only built the host crate twice (3 of CI's minutes).
    let mut c = Command::new(cargo());
    c.current_dir(root)
        .args(["package", "--allow-dirty", "--no-verify"]);
    for p in PUBLISHED {
        c.args(["-p", p]);
    }
    check(&mut c);
    let work = std::env::temp_dir().join("ringreduce-package-check");
    let _ = std::fs::remove_dir_all(work.join("crates"));
    // The unpacked crates keep their archive times, so an earlier build
    // here would look fresh: build from scratch.
    let _ = std::fs::remove_dir_all(work.join("user").join("target"));
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
    // The packaged kernel crate ships its PTX with the key of its packaged
    // sources, so a registry build embeds it and never runs the nested
    // nvptx build (nor needs the nightly toolchain for it).
    let nested = user.join("target").join("ringreduce-ptx");
    if nested.exists() {
        fail(format!(
            "the registry build built the kernels ({} exists): the packaged crate's shipped \
             PTX did not match its sources",
            nested.display()
        ));
    }
    println!("package-check: ok (the shipped PTX served the registry build)");
}
