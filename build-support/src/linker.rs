//! The PTX linker: `llvm-link`, then `opt` with internalisation and `llc`
//! for each part of the entries, in parallel.
//!
//! The parts follow the modules the entries are loaded in (a module's
//! entries stay in one part), and their PTX texts are written one after
//! another, each after a [`PART_MARKER`] line, so the host's build script
//! can cut each part into its modules ([`crate::ptx`]).

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

/// The line before each part's PTX in the linker's output.
pub const PART_MARKER: &str = "// ringreduce-build: part";

/// Cuts `exports` into at most `parts` groups of about equal size, keeping
/// the exports of one module (as `module_of` names it; an export it does
/// not know is a module of its own) together, in the order they came.
pub fn partition(
    exports: &[String],
    parts: usize,
    module_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<Vec<String>> {
    let mut modules: Vec<(String, Vec<String>)> = Vec::new();
    for e in exports {
        let m = module_of(e).unwrap_or_else(|| e.clone());
        match modules.iter_mut().find(|(n, _)| *n == m) {
            Some((_, v)) => v.push(e.clone()),
            None => modules.push((m, vec![e.clone()])),
        }
    }
    let parts = parts.clamp(1, modules.len().max(1));
    let mut out = vec![Vec::new(); parts];
    for (i, (_, v)) in modules.into_iter().enumerate() {
        out[i % parts].extend(v);
    }
    out.retain(|p| !p.is_empty());
    out
}

/// Links bitcode into PTX: one `llvm-link`, then for each part of the
/// exports (see [`partition`]) at once, `opt` and `llc`. Internalising
/// everything but the part's entries first lets `globaldce` drop all of
/// `core` and of the other parts, so each `opt` and `llc` sees only what
/// its part calls, and the PTX has no unresolved `.extern .func`.
pub fn link(args: &LinkArgs, module_of: &dyn Fn(&str) -> Option<String>) -> Result<(), LinkError> {
    let out = args.output.as_ref().expect("checked by parse");
    let linked = out.with_extension("linked.bc");

    let mut c = Command::new(llvm_tool("llvm-link")?);
    c.arg("--ignore-non-bitcode")
        .args(&args.inputs)
        .arg("-o")
        .arg(&linked);
    run(c, "llvm-link")?;

    // A fixed number of parts, whatever the machine: the PTX is then the
    // same on every machine, so a shipped copy can be checked against a
    // fresh build byte for byte (see `crate::shipped`).
    let parts = partition(&args.exports, PARTS, module_of);
    let (opt, llc) = (llvm_tool("opt")?, llvm_tool("llc")?);
    let part_file = |i: usize, ext: &str| out.with_extension(format!("part{i}.{ext}"));
    let jobs: Vec<(usize, &Vec<String>)> = parts.iter().enumerate().collect();
    let results = crate::par_map(&jobs, |&(i, exports)| {
        let (bc, ptx) = (part_file(i, "bc"), part_file(i, "ptx"));
        let mut c = Command::new(&opt);
        c.arg(format!(
            "-internalize-public-api-list={}",
            exports.join(",")
        ))
        .arg("-passes=internalize,globaldce,default<O3>")
        .arg(&linked)
        .arg("-o")
        .arg(&bc);
        run(c, "opt")?;
        let mut c = Command::new(&llc);
        if let Some(cpu) = &args.target_cpu {
            c.arg(format!("-mcpu={cpu}"));
        }
        if !args.target_features.is_empty() {
            c.arg(format!("-mattr={}", args.target_features.join(",")));
        }
        c.arg("-O3").arg(&bc).arg("-o").arg(&ptx);
        run(c, "llc")?;
        let _ = std::fs::remove_file(bc);
        Ok::<(), LinkError>(())
    });
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    let mut text = String::new();
    for i in 0..parts.len() {
        let f = part_file(i, "ptx");
        text.push_str(PART_MARKER);
        text.push('\n');
        text.push_str(
            &std::fs::read_to_string(&f)
                .map_err(|e| LinkError::Io(format!("reading {}: {e}", f.display())))?,
        );
        let _ = std::fs::remove_file(f);
    }
    std::fs::write(out, text).map_err(|e| LinkError::Io(format!("{}: {e}", out.display())))?;
    let _ = std::fs::remove_file(linked);
    Ok(())
}

/// How many parts the entries are linked in, run on as many cores as
/// there are: enough for 8 cores, and fixed so that the output does not
/// depend on the machine.
const PARTS: usize = 8;

/// Entry point when the build script runs as rustc's linker; `module_of`
/// names the module each entry is loaded in (see [`partition`]).
pub fn link_main(module_of: &dyn Fn(&str) -> Option<String>) -> ! {
    let res = parse_link_args(std::env::args().skip(1)).and_then(|a| link(&a, module_of));
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
    fn parts_keep_modules_whole_and_the_order() {
        let exports = s(&["a1", "b", "a2", "c", "d", "e"]);
        let module_of = |e: &str| e.starts_with('a').then(|| "a".to_string());
        let parts = partition(&exports, 2, &module_of);
        assert_eq!(parts, vec![s(&["a1", "a2", "c", "e"]), s(&["b", "d"])]);
        assert_eq!(
            partition(&exports, 1, &module_of),
            vec![s(&["a1", "a2", "b", "c", "d", "e"])]
        );
        // Never more parts than modules, nor an empty one.
        assert_eq!(partition(&exports, 64, &module_of).len(), 5);
        assert_eq!(partition(&[], 4, &module_of), Vec::<Vec<String>>::new());
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
