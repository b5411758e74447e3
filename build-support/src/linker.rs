//! The PTX linker: `llvm-link`, then `opt` with internalisation, then `llc`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What rustc tells a bitcode linker, reduced to what we use.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LinkArgs {
    pub exports: Vec<String>,
    pub inputs: Vec<PathBuf>,
    pub target_cpu: Option<String>,
    pub target_features: Vec<String>,
    pub output: Option<PathBuf>,
    pub opt_level: Option<String>,
}

#[derive(Debug)]
pub enum LinkError {
    Usage(String),
    Tool { tool: String, status: String },
    Io(String),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Usage(m) => write!(f, "ptx linker: {m}"),
            LinkError::Tool { tool, status } => write!(f, "ptx linker: {tool} failed ({status})"),
            LinkError::Io(m) => write!(f, "ptx linker: {m}"),
        }
    }
}

impl std::error::Error for LinkError {}

/// Parses the arguments rustc passes to an `llbc`-flavoured linker:
/// `--export-symbol K … inputs --target-cpu sm_XX -o out.ptx -O3`, plus a few
/// flags (`-L`, `--target`, `--debug`) that we accept and ignore.
pub fn parse_link_args<I: IntoIterator<Item = String>>(args: I) -> Result<LinkArgs, LinkError> {
    let mut out = LinkArgs::default();
    let mut it = args.into_iter();
    let need = |it: &mut dyn Iterator<Item = String>, flag: &str| {
        it.next()
            .ok_or_else(|| LinkError::Usage(format!("{flag} needs a value")))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--export-symbol" => out.exports.push(need(&mut it, &a)?),
            "--target-cpu" => out.target_cpu = Some(need(&mut it, &a)?),
            "-o" => out.output = Some(PathBuf::from(need(&mut it, &a)?)),
            "-L" | "--target" => {
                need(&mut it, &a)?;
            }
            "--debug" => {}
            s if s.starts_with("--target-feature=") => out
                .target_features
                .push(s["--target-feature=".len()..].to_string()),
            s if s.starts_with("--target-feature") => out.target_features.push(need(&mut it, &a)?),
            s if s.starts_with("-O") => out.opt_level = Some(s[2..].to_string()),
            s if s.starts_with("-L") => {}
            s if s.starts_with('-') => {
                return Err(LinkError::Usage(format!("unknown flag {s}")));
            }
            _ => out.inputs.push(PathBuf::from(a)),
        }
    }
    if out.output.is_none() {
        return Err(LinkError::Usage("no -o given".into()));
    }
    if out.inputs.is_empty() {
        return Err(LinkError::Usage("no inputs".into()));
    }
    Ok(out)
}

/// The LLVM tools that ship in rustc's `llvm-tools` component.
fn llvm_tool(name: &str) -> Result<PathBuf, LinkError> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| LinkError::Io(format!("running {rustc} --print sysroot: {e}")))?;
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    let host = std::env::var("RINGREDUCE_HOST_TRIPLE")
        .unwrap_or_else(|_| "x86_64-unknown-linux-gnu".to_string());
    let p = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(LinkError::Io(format!(
            "{} not found: install the toolchain's llvm-tools component",
            p.display()
        )))
    }
}

fn run(mut cmd: Command, tool: &str) -> Result<(), LinkError> {
    let status = cmd
        .status()
        .map_err(|e| LinkError::Io(format!("starting {tool}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(LinkError::Tool {
            tool: tool.into(),
            status: status.to_string(),
        })
    }
}

/// Links bitcode into one PTX file. Internalising everything but the kernel
/// entries lets `globaldce` drop all of `core` we do not call, so the PTX has
/// no unresolved `.extern .func`.
pub fn link(args: &LinkArgs) -> Result<(), LinkError> {
    let out = args.output.as_ref().expect("checked by parse");
    let linked = out.with_extension("linked.bc");
    let optimised = out.with_extension("opt.bc");

    let mut c = Command::new(llvm_tool("llvm-link")?);
    c.arg("--ignore-non-bitcode")
        .args(&args.inputs)
        .arg("-o")
        .arg(&linked);
    run(c, "llvm-link")?;

    let mut c = Command::new(llvm_tool("opt")?);
    c.arg(format!(
        "-internalize-public-api-list={}",
        args.exports.join(",")
    ))
    .arg("-passes=default<O3>,internalize,globaldce")
    .arg(&linked)
    .arg("-o")
    .arg(&optimised);
    run(c, "opt")?;

    let mut c = Command::new(llvm_tool("llc")?);
    if let Some(cpu) = &args.target_cpu {
        c.arg(format!("-mcpu={cpu}"));
    }
    if !args.target_features.is_empty() {
        c.arg(format!("-mattr={}", args.target_features.join(",")));
    }
    c.arg("-O3").arg(&optimised).arg("-o").arg(out);
    run(c, "llc")?;
    let _ = std::fs::remove_file(linked);
    let _ = std::fs::remove_file(optimised);
    Ok(())
}

/// Entry point when the build script runs as rustc's linker.
pub fn link_main() -> ! {
    let res = parse_link_args(std::env::args().skip(1)).and_then(|a| link(&a));
    match res {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_what_rustc_passes() {
        let a = parse_link_args(s(&[
            "--export-symbol",
            "k1",
            "--export-symbol",
            "k2",
            "a.o",
            "libcore.rlib",
            "-L",
            "/x",
            "--target",
            "nvptx64-nvidia-cuda",
            "--target-cpu",
            "sm_70",
            "--target-feature=+ptx70",
            "-L",
            "/y",
            "-o",
            "out.ptx",
            "-O3",
            "--debug",
        ]))
        .unwrap();
        assert_eq!(a.exports, vec!["k1", "k2"]);
        assert_eq!(
            a.inputs,
            vec![PathBuf::from("a.o"), PathBuf::from("libcore.rlib")]
        );
        assert_eq!(a.target_cpu.as_deref(), Some("sm_70"));
        assert_eq!(a.target_features, vec!["+ptx70"]);
        assert_eq!(a.output, Some(PathBuf::from("out.ptx")));
        assert_eq!(a.opt_level.as_deref(), Some("3"));
    }

    #[test]
    fn rejects_missing_output_and_unknown_flags() {
        assert!(matches!(
            parse_link_args(s(&["a.o"])),
            Err(LinkError::Usage(_))
        ));
        assert!(matches!(
            parse_link_args(s(&["a.o", "-o", "x", "--frobnicate"])),
            Err(LinkError::Usage(_))
        ));
        assert!(matches!(
            parse_link_args(s(&["-o"])),
            Err(LinkError::Usage(_))
        ));
    }
}
