//! Optional SASS beside the PTX. The driver JIT-compiles a PTX module the
//! first time a process loads it (one entry's module, a fraction of a
//! second to a second or two). ptxas run at build time for the GPUs named
//! in [`SASS_ENV`] gives them machine code that loads at once.

use std::path::Path;
use std::process::Command;

/// The GPUs to build SASS for, as `sm_XY` names separated by commas
/// (`sm_90,sm_80`); unset, empty or `none` builds none.
pub const SASS_ENV: &str = "RINGREDUCE_SASS";
/// The ptxas to build it with (`ptxas` on the `PATH` by default).
pub const PTXAS_ENV: &str = "RINGREDUCE_PTXAS";

/// The compute capabilities a [`SASS_ENV`] value names, in order, each once:
/// `sm_90` is 90. Anything else (`compute_90`, `sm_9`, `sm_90a`) is an error
/// that says what is accepted, since a wrong name would silently ship no
/// SASS for that GPU.
pub fn parse_sass_archs(value: &str) -> Result<Vec<u32>, String> {
    let value = value.trim();
    if value.is_empty() || value == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim) {
        let cc = part
            .strip_prefix("sm_")
            .filter(|d| (2..=3).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<u32>().ok())
            .ok_or_else(|| {
                format!("{SASS_ENV}: `{part}` is not a GPU name like sm_90 (use commas between several, or `none`)")
            })?;
        if !out.contains(&cc) {
            out.push(cc);
        }
    }
    Ok(out)
}

/// Compiles `ptx` for compute capability `cc` into the cubin `out` with
/// `ptxas`. One module is one entry, so callers run one ptxas per core
/// rather than splitting one module's compile.
pub fn compile_sass(ptxas: &Path, ptx: &Path, cc: u32, out: &Path) -> Result<(), String> {
    let run = Command::new(ptxas)
        .arg(format!("-arch=sm_{cc}"))
        .arg("-O3")
        .arg(ptx)
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|e| {
            format!(
                "running {} for {SASS_ENV} (set {PTXAS_ENV} to ptxas's path): {e}",
                ptxas.display()
            )
        })?;
    if !run.status.success() {
        return Err(format!(
            "{} -arch=sm_{cc} failed ({}): {}",
            ptxas.display(),
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    if !out.is_file() {
        return Err(format!(
            "{} -arch=sm_{cc} succeeded but wrote no {}",
            ptxas.display(),
            out.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_lists_parse_to_compute_capabilities() {
        assert_eq!(parse_sass_archs(""), Ok(vec![]));
        assert_eq!(parse_sass_archs(" none "), Ok(vec![]));
        assert_eq!(parse_sass_archs("sm_90"), Ok(vec![90]));
        assert_eq!(
            parse_sass_archs("sm_90, sm_80,sm_90,sm_100"),
            Ok(vec![90, 80, 100])
        );
        for bad in [
            "compute_90",
            "sm_9",
            "sm_90a",
            "sm_",
            "90",
            "sm_90,",
            "sm_1000",
        ] {
            let e = parse_sass_archs(bad).unwrap_err();
            assert!(e.contains(SASS_ENV), "{bad}: {e}");
        }
    }

    /// A stand-in ptxas (a shell script) shows the arguments and the
    /// failure paths without NVIDIA's tools.
    #[cfg(unix)]
    #[test]
    fn ptxas_is_called_with_the_arch_and_its_failures_are_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rr-sass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = |name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let ptx = dir.join("k.ptx");
        std::fs::write(&ptx, "// ptx").unwrap();
        let out = dir.join("k.cubin");
        // Writes its arguments into the output named after `-o`.
        let good = script(
            "good",
            r#"args="$*"; while [ "$1" != "-o" ]; do shift; done; echo "$args" > "$2""#,
        );
        compile_sass(&good, &ptx, 90, &out).unwrap();
        let args = std::fs::read_to_string(&out).unwrap();
        assert!(args.starts_with("-arch=sm_90 -O3 "), "{args}");
        assert!(args.contains(ptx.to_str().unwrap()), "{args}");

        let bad = script("bad", "echo 'ptxas fatal: no' >&2; exit 3");
        let e = compile_sass(&bad, &ptx, 80, &out).unwrap_err();
        assert!(e.contains("sm_80") && e.contains("ptxas fatal: no"), "{e}");

        let silent = script("silent", "exit 0");
        let _ = std::fs::remove_file(&out);
        let e = compile_sass(&silent, &ptx, 90, &out).unwrap_err();
        assert!(e.contains("wrote no"), "{e}");

        let e = compile_sass(&dir.join("absent"), &ptx, 90, &out).unwrap_err();
        assert!(e.contains(PTXAS_ENV), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
