//! The linker's output as the modules the host loads: each cut out of its
//! part ([`crate::PART_MARKER`]), with the module-scope declarations the
//! kernels' inline assembly names and each entry's launch bounds, without
//! the comments `llc` writes (they are a fifth of the bytes, and the
//! driver only skips them).

use crate::ptx::{Ptx, SplitError};
use crate::PART_MARKER;

/// One entry of a module, with its launch bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySpec {
    pub name: String,
    /// `.maxntid`: the threads of every launch.
    pub threads: u32,
    /// `.minnctapersm`: blocks per SM ptxas must leave registers for.
    pub min_blocks_per_sm: u32,
}

/// One module to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleSpec {
    pub name: String,
    pub entries: Vec<EntrySpec>,
}

/// Cuts the linker's `text` (parts after [`PART_MARKER`] lines, or one
/// plain PTX text) into `specs`' modules, each with `prelude` after its
/// header. Every entry of the text must belong to some module, and every
/// module's entries must be in one part.
pub fn make_modules(
    text: &str,
    specs: &[ModuleSpec],
    prelude: &str,
) -> Result<Vec<(String, String)>, SplitError> {
    let parts: Vec<Ptx> = text
        .split(PART_MARKER)
        .filter(|p| p.contains(".address_size"))
        .map(Ptx::parse)
        .collect::<Result<_, _>>()?;
    let wanted: Vec<&str> = specs
        .iter()
        .flat_map(|s| s.entries.iter().map(|e| e.name.as_str()))
        .collect();
    for p in &parts {
        if let Some(stray) = p.entries().into_iter().find(|e| !wanted.contains(e)) {
            return Err(SplitError::Stray(stray.to_string()));
        }
    }
    specs
        .iter()
        .map(|s| {
            let names: Vec<&str> = s.entries.iter().map(|e| e.name.as_str()).collect();
            let first = names.first().copied().unwrap_or_default();
            let part = parts
                .iter()
                .find(|p| p.entries().contains(&first))
                .ok_or_else(|| SplitError::NoEntry(first.to_string()))?;
            let module = part.module(&names)?;
            Ok((s.name.clone(), finish(&module, &s.entries, prelude)))
        })
        .collect()
}

/// Adds `prelude` after the header and each entry's launch bounds after
/// its parameter list, and drops comment lines and trailing comments.
fn finish(ptx: &str, entries: &[EntrySpec], prelude: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + prelude.len() + 64 * entries.len());
    let mut bounds: Option<&EntrySpec> = None;
    for line in ptx.lines() {
        let line = match line.find("//") {
            Some(i) => line[..i].trim_end(),
            None => line,
        };
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(".visible .entry") || line.starts_with(".entry") {
            bounds = entries
                .iter()
                .find(|e| line.contains(&format!(" {}(", e.name)));
        }
        out.push_str(line);
        out.push('\n');
        if line.starts_with(".address_size") {
            out.push_str(prelude);
            out.push('\n');
        }
        if line.starts_with(')') {
            if let Some(e) = bounds.take() {
                out.push_str(&format!(
                    ".maxntid {}, 1, 1\n.minnctapersm {}\n",
                    e.threads, e.min_blocks_per_sm
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PART: &str = ".version 7.1\n.target sm_80\n.address_size 64\n\n\
        \t// .globl\ta\n.visible .entry a(\n\t.param .b64 a_param_0\n)\n{\n\tret; // done\n}\n\
        .visible .entry b(\n\t.param .b64 b_param_0\n)\n{\n\tret;\n}\n";

    fn spec(name: &str, entries: &[(&str, u32, u32)]) -> ModuleSpec {
        ModuleSpec {
            name: name.into(),
            entries: entries
                .iter()
                .map(|&(n, t, b)| EntrySpec {
                    name: n.into(),
                    threads: t,
                    min_blocks_per_sm: b,
                })
                .collect(),
        }
    }

    #[test]
    fn modules_get_their_entries_bounds_and_the_prelude() {
        let other = ".version 7.1\n.target sm_80\n.address_size 64\n\
            .visible .entry c(\n)\n{\n\tret;\n}\n.visible .entry d(\n)\n{\n\tret;\n}\n";
        let text = format!("{PART_MARKER}\n{PART}{PART_MARKER}\n{other}");
        let specs = [
            spec("m1", &[("a", 257, 1)]),
            spec("m2", &[("b", 256, 2)]),
            spec("m3", &[("c", 64, 4), ("d", 32, 1)]),
        ];
        let mods = make_modules(&text, &specs, ".shared .u32 w;").unwrap();
        assert_eq!(mods.len(), 3);
        let (name, m1) = &mods[0];
        assert_eq!(name, "m1");
        assert_eq!(
            m1,
            ".version 7.1\n.target sm_80\n.address_size 64\n.shared .u32 w;\n\
             .visible .entry a(\n\t.param .b64 a_param_0\n)\n.maxntid 257, 1, 1\n.minnctapersm 1\n{\n\tret;\n}\n"
        );
        assert!(mods[1].1.contains(
            ".entry b(\n\t.param .b64 b_param_0\n)\n.maxntid 256, 1, 1\n.minnctapersm 2\n"
        ));
        assert!(
            mods[2].1.contains(".maxntid 64, 1, 1\n.minnctapersm 4\n")
                && mods[2].1.contains(".maxntid 32, 1, 1\n")
        );
    }

    #[test]
    fn every_entry_needs_a_module_and_every_module_its_entries() {
        let stray = make_modules(PART, &[spec("m1", &[("a", 1, 1)])], "");
        assert_eq!(stray, Err(SplitError::Stray("b".into())));
        let missing = make_modules(
            PART,
            &[
                spec("m1", &[("a", 1, 1)]),
                spec("m2", &[("b", 1, 1), ("z", 1, 1)]),
            ],
            "",
        );
        assert_eq!(missing, Err(SplitError::NoEntry("z".into())));
        // A plain PTX text without markers is one part.
        assert!(make_modules(PART, &[spec("m", &[("a", 1, 1), ("b", 1, 1)])], "").is_ok());
    }
}
