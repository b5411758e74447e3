//! The PTX shipped with the kernel crate, so that a build needs neither the
//! nested nvptx build's minute nor the nightly toolchain it runs on.
//!
//! The kernel crate carries, under `prebuilt/`, the linked PTX of its
//! default build (no features, [`crate::DEFAULT_ARCH`]) compressed with
//! zstd, and the key of the sources it was built from. A build uses that
//! PTX only when the key of the sources it has matches; otherwise it builds
//! the kernels itself, so an edited kernel is never served stale PTX.
//! `cargo xtask ptx` writes the files, and `cargo xtask ptx --check` (run
//! in CI) builds the kernels and fails unless the shipped PTX is that
//! build, byte for byte.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::nested::PTX_ISA;
use crate::toolchain::KERNEL_TOOLCHAIN;

/// Set to `1` to build the kernels from source even where the shipped PTX
/// matches them (to check a toolchain, or to time the nested build).
pub const FROM_SOURCE_ENV: &str = "RINGREDUCE_PTX_FROM_SOURCE";

/// The version of the key's recipe: bumped when what it covers changes.
const KEY_RECIPE: &str = "ringreduce shipped ptx, recipe 1";

/// What the kernel crate ships for one architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShippedFiles {
    /// The zstd-compressed PTX.
    pub ptx: PathBuf,
    /// The key of the sources it was built from, one line of hex.
    pub key: PathBuf,
}

/// Where the kernel crate at `kernel_crate` keeps its PTX for `arch`.
pub fn shipped_files(kernel_crate: &Path, arch: &str) -> ShippedFiles {
    let dir = kernel_crate.join("prebuilt");
    ShippedFiles {
        ptx: dir.join(format!("kernels.{arch}.ptx.zst")),
        key: dir.join(format!("kernels.{arch}.key")),
    }
}

/// What a build finds shipped for its sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shipped {
    /// The shipped PTX was built from these sources: its text.
    Fresh(String),
    /// PTX is shipped, but for other sources (an edited kernel).
    Stale,
    /// Nothing is shipped for this architecture.
    Absent,
}

/// The key of the sources the PTX is built from: every file under the
/// kernel crate's `src/` and the build support's `src/` (paths and bytes,
/// in path order), the pinned toolchain, `arch` and the PTX ISA. FNV-1a,
/// 128 bits: a cache key against accidents, not an adversary.
///
/// The manifests are left out on purpose: `cargo package` rewrites them,
/// and a registry copy must find the same key as the workspace.
pub fn source_key(kernel_crate: &Path, build_crate: &Path, arch: &str) -> std::io::Result<String> {
    let mut h = Fnv128::new();
    for part in [KEY_RECIPE, KERNEL_TOOLCHAIN, arch, PTX_ISA] {
        h.field(part.as_bytes());
    }
    for (name, root) in [("kernels", kernel_crate), ("build", build_crate)] {
        let src = root.join("src");
        let mut files = Vec::new();
        walk(&src, &mut files)?;
        files.sort();
        for f in files {
            let rel = f.strip_prefix(&src).unwrap_or(&f);
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            h.field(format!("{name}/{}", rel.join("/")).as_bytes());
            h.field(&std::fs::read(&f)?);
        }
    }
    Ok(format!("{:032x}", h.0))
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// Reads what is shipped at `files` for sources with key `key`.
pub fn read_shipped(files: &ShippedFiles, key: &str) -> Result<Shipped, String> {
    let shipped_key = match std::fs::read_to_string(&files.key) {
        Ok(k) => k,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Shipped::Absent),
        Err(e) => return Err(format!("{}: {e}", files.key.display())),
    };
    if shipped_key.trim() != key {
        return Ok(Shipped::Stale);
    }
    let packed = std::fs::read(&files.ptx).map_err(|e| format!("{}: {e}", files.ptx.display()))?;
    let mut text = String::new();
    ruzstd::decoding::StreamingDecoder::new(packed.as_slice())
        .map_err(|e| format!("{}: {e}", files.ptx.display()))?
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", files.ptx.display()))?;
    Ok(Shipped::Fresh(text))
}

/// Writes `ptx`, built from sources with key `key`, to `files`: packed by
/// the `zstd` program at its highest level where there is one (a quarter
/// of the size), else by `ruzstd`'s fastest level. Either reads back the
/// same.
pub fn write_shipped(files: &ShippedFiles, key: &str, ptx: &str) -> std::io::Result<()> {
    if let Some(dir) = files.ptx.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let packed = match zstd_program(ptx.as_bytes()) {
        Some(p) => p,
        None => ruzstd::encoding::compress_to_vec(
            ptx.as_bytes(),
            ruzstd::encoding::CompressionLevel::Fastest,
        ),
    };
    std::fs::write(&files.ptx, packed)?;
    std::fs::write(&files.key, format!("{key}\n"))
}

/// `data` packed by `zstd -19`, if that program runs here.
fn zstd_program(data: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("zstd")
        .args(["-19", "-q", "-c", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let data = data.to_vec();
    let feed = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().ok()?;
    let fed = feed.join().ok()?.is_ok();
    (fed && out.status.success()).then_some(out.stdout)
}

/// FNV-1a over length-prefixed fields, so that no two field lists hash
/// the same bytes.
struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    fn new() -> Self {
        Fnv128(Self::OFFSET)
    }

    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u128::from(x);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn field(&mut self, b: &[u8]) {
        self.bytes(&(b.len() as u64).to_le_bytes());
        self.bytes(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh pair of crate folders with a `src/` each.
    fn crates(tag: &str) -> (PathBuf, PathBuf) {
        let base =
            std::env::temp_dir().join(format!("ringreduce-shipped-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (k, b) = (base.join("k"), base.join("b"));
        std::fs::create_dir_all(k.join("src/sub")).unwrap();
        std::fs::create_dir_all(b.join("src")).unwrap();
        std::fs::write(k.join("src/lib.rs"), "pub fn a() {}").unwrap();
        std::fs::write(k.join("src/sub/x.rs"), "pub fn x() {}").unwrap();
        std::fs::write(b.join("src/lib.rs"), "pub fn b() {}").unwrap();
        (k, b)
    }

    #[test]
    fn the_key_follows_every_source_file_and_the_arch_only() {
        let (k, b) = crates("key");
        let key = source_key(&k, &b, "sm_80").unwrap();
        assert_eq!(key.len(), 32);
        assert_eq!(key, source_key(&k, &b, "sm_80").unwrap(), "stable");
        assert_ne!(key, source_key(&k, &b, "sm_70").unwrap(), "arch");
        // The manifest is not part of it (cargo package rewrites it).
        std::fs::write(k.join("Cargo.toml"), "[package]").unwrap();
        assert_eq!(key, source_key(&k, &b, "sm_80").unwrap());
        // A nested kernel file, a build support file, a rename.
        std::fs::write(k.join("src/sub/x.rs"), "pub fn x() { }").unwrap();
        let edited = source_key(&k, &b, "sm_80").unwrap();
        assert_ne!(key, edited);
        std::fs::write(b.join("src/lib.rs"), "pub fn b() { }").unwrap();
        let edited2 = source_key(&k, &b, "sm_80").unwrap();
        assert_ne!(edited, edited2);
        std::fs::rename(k.join("src/sub/x.rs"), k.join("src/sub/y.rs")).unwrap();
        assert_ne!(edited2, source_key(&k, &b, "sm_80").unwrap());
        // Bytes that move between two files do not hash the same.
        let (k2, b2) = crates("key2");
        std::fs::write(k2.join("src/lib.rs"), "pub fn a() {}pub").unwrap();
        std::fs::write(k2.join("src/sub/x.rs"), " fn x() {}").unwrap();
        assert_ne!(key, source_key(&k2, &b2, "sm_80").unwrap());
    }

    #[test]
    fn shipped_ptx_is_served_only_for_its_key() {
        let (k, _) = crates("read");
        let files = shipped_files(&k, "sm_80");
        assert_eq!(read_shipped(&files, "abc").unwrap(), Shipped::Absent);
        let ptx = ".version 7.1\n.target sm_80\n".repeat(1000);
        write_shipped(&files, "abc", &ptx).unwrap();
        assert!(std::fs::metadata(&files.ptx).unwrap().len() < ptx.len() as u64 / 10);
        assert_eq!(read_shipped(&files, "abc").unwrap(), Shipped::Fresh(ptx));
        assert_eq!(read_shipped(&files, "abd").unwrap(), Shipped::Stale);
        // A damaged file is an error, never PTX.
        std::fs::write(&files.ptx, b"not zstd").unwrap();
        assert!(read_shipped(&files, "abc").is_err());
    }
}
