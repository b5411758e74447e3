//! Splitting one PTX text into modules: each module holds the header, the
//! entries it is given, and every function and global they reach.
//!
//! The driver JIT-compiles a PTX module whole when it is loaded, so a module
//! per entry is what lets a process compile only the code it runs. The
//! split is textual, after `llc`, so every entry's code is exactly the code
//! the one-module build would have had.

use std::collections::{HashMap, HashSet};

/// One top-level item of a PTX text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    /// The symbol it declares or defines (none for the header).
    name: Option<String>,
    /// Whether it is an entry (`.entry`).
    entry: bool,
    text: String,
}

/// A PTX text cut into its top-level items.
#[derive(Debug)]
pub struct Ptx {
    header: String,
    items: Vec<Item>,
    /// Items by symbol (a function has a prototype and a definition).
    by_name: HashMap<String, Vec<usize>>,
}

/// Why a PTX text could not be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitError {
    /// An item did not end where PTX's items end.
    Unterminated(String),
    /// A module named an entry the text does not define.
    NoEntry(String),
    /// The text has no `.address_size` line (no header).
    NoHeader,
    /// The text defines an entry no module names.
    Stray(String),
}

impl std::fmt::Display for SplitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitError::Unterminated(s) => write!(f, "PTX item without an end: {s}"),
            SplitError::NoEntry(s) => write!(f, "no PTX entry {s}"),
            SplitError::NoHeader => write!(f, "PTX without a header"),
            SplitError::Stray(s) => write!(f, "PTX entry {s} is in no module of the catalogue"),
        }
    }
}

impl std::error::Error for SplitError {}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

/// The identifiers of `text` (PTX's: letters, digits, `_` and `$`),
/// leaving out string and comment text.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii() && is_ident_byte(c as u8))))
        .filter(|w| w.as_bytes().first().is_some_and(|&b| !b.is_ascii_digit()))
}

/// The symbol a top-level line declares, if it starts an item.
fn declares(line: &str) -> Option<(String, bool)> {
    let l = line.trim_start();
    let starts = [
        ".visible", ".weak", ".func", ".entry", ".global", ".shared", ".const",
    ];
    if !starts.iter().any(|s| l.starts_with(s)) {
        return None;
    }
    let entry = l.split_whitespace().any(|w| w == ".entry");
    // The name is the last identifier before a `(`, `[`, `=` or `;` that
    // is not a type or directive; for functions with a return parameter
    // list, after that list's `)`.
    let head = match l.find(") ") {
        Some(i) if l.contains(".func") && l[..i].contains("func_retval") => &l[i + 2..],
        _ => l,
    };
    let end = head.find(['(', '[', '=', ';']).unwrap_or(head.len());
    let name = head[..end]
        .split_whitespace()
        .rfind(|w| !w.starts_with('.'))?
        .to_string();
    Some((name, entry))
}

impl Ptx {
    /// Cuts `text` into its items. An item ends at a line that closes its
    /// last brace, or at a `;` that ends a line outside braces: function
    /// bodies hold inline assembly, whose lines start in column 0 and may
    /// end in `;` too.
    pub fn parse(text: &str) -> Result<Ptx, SplitError> {
        let mut lines = text.lines().peekable();
        let mut header = String::new();
        let mut seen_address = false;
        while let Some(&l) = lines.peek() {
            if declares(l).is_some() {
                break;
            }
            let l = lines.next().unwrap_or_default();
            if l.starts_with(".version")
                || l.starts_with(".target")
                || l.starts_with(".address_size")
            {
                header.push_str(l);
                header.push('\n');
                seen_address |= l.starts_with(".address_size");
            }
        }
        if !seen_address {
            return Err(SplitError::NoHeader);
        }
        let mut items = Vec::new();
        while let Some(first) = lines.next() {
            let Some((name, entry)) = declares(first) else {
                // Comments and blank lines between items.
                continue;
            };
            let mut text = String::new();
            let mut depth = 0i64;
            let mut line = Some(first);
            loop {
                let Some(l) = line else {
                    return Err(SplitError::Unterminated(name));
                };
                text.push_str(l);
                text.push('\n');
                let code = l.split("//").next().unwrap_or("");
                let before = depth;
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                let closed = before > 0 && depth == 0 && code.trim() == "}";
                if depth == 0 && (closed || code.trim_end().ends_with(';')) {
                    break;
                }
                line = lines.next();
            }
            items.push(Item {
                name: Some(name),
                entry,
                text,
            });
        }
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, it) in items.iter().enumerate() {
            if let Some(n) = &it.name {
                by_name.entry(n.clone()).or_default().push(i);
            }
        }
        Ok(Ptx {
            header,
            items,
            by_name,
        })
    }

    /// Every entry the text defines, in order.
    pub fn entries(&self) -> Vec<&str> {
        self.items
            .iter()
            .filter(|it| it.entry)
            .filter_map(|it| it.name.as_deref())
            .collect()
    }

    /// The module of `entries`: the header, then every item they reach
    /// through the symbols their text names, in the text's order.
    pub fn module(&self, entries: &[&str]) -> Result<String, SplitError> {
        let mut keep: HashSet<usize> = HashSet::new();
        let mut todo: Vec<usize> = Vec::new();
        for e in entries {
            let found = self
                .by_name
                .get(*e)
                .filter(|v| v.iter().any(|&i| self.items[i].entry));
            let Some(v) = found else {
                return Err(SplitError::NoEntry(e.to_string()));
            };
            todo.extend(v);
        }
        while let Some(i) = todo.pop() {
            if !keep.insert(i) {
                continue;
            }
            let own = self.items[i].name.as_deref();
            for w in identifiers(&self.items[i].text) {
                if Some(w) == own {
                    continue;
                }
                if let Some(v) = self.by_name.get(w) {
                    todo.extend(v.iter().filter(|j| !keep.contains(j)));
                }
            }
        }
        let mut out = self.header.clone();
        let mut kept: Vec<usize> = keep.into_iter().collect();
        kept.sort_unstable();
        for i in kept {
            out.push('\n');
            out.push_str(&self.items[i].text);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "//
// Generated by LLVM NVPTX Back-End
//

.version 7.1
.target sm_80
.address_size 64

\t// .globl\ta
.func  (.param .b32 func_retval0) helper$1
(
\t.param .b64 helper$1_param_0
)
;
.func leaf
(
\t.param .b64 leaf_param_0
)
;
.global .align 8 .b8 table[16] = {0, 1};
.global .align 4 .u32 unused;
\t\t\t\t\t// @a
.visible .entry a(
\t.param .b64 a_param_0
)
{
\t.reg .b64 \t%rd<3>;
\tmov.u64 \t%rd1, table;
\t// begin inline asm
\t{
.reg .pred %pin, %pout;
setp.ne.u32 %pin, %r1, 0;
\t}
\t// end inline asm
\tcall.uni (retval0), helper$1, (param0);
}
\t\t\t\t\t// -- End function
.func  (.param .b32 func_retval0) helper$1(
\t.param .b64 helper$1_param_0
)
{
\tcall.uni leaf, (param0);
\tret;
}
.func leaf(
\t.param .b64 leaf_param_0
)
{
\tret;
}
.visible .entry b(
\t.param .b64 b_param_0
)
{
\t// a comment naming table and a
\tret;
}
";

    #[test]
    fn a_module_holds_what_its_entries_reach_and_nothing_else() {
        let p = Ptx::parse(TEXT).unwrap();
        assert_eq!(p.entries(), vec!["a", "b"]);
        let a = p.module(&["a"]).unwrap();
        assert!(a.starts_with(".version 7.1\n.target sm_80\n.address_size 64\n"));
        for want in [
            ".entry a(",
            "helper$1\n(",
            "helper$1(",
            "leaf\n(",
            "leaf(",
            "table[16]",
        ] {
            assert!(a.contains(want), "{want} missing:\n{a}");
        }
        assert!(!a.contains("unused") && !a.contains(".entry b("), "{a}");
        // Prototypes stay before the definitions, as in the text.
        assert!(a.find("leaf\n(").unwrap() < a.find(".entry a(").unwrap());
        // The inline assembly's lines in column 0 stay in the body.
        assert!(a.contains("setp.ne.u32 %pin, %r1, 0;\n\t}\n\t// end inline asm\n\tcall.uni"));
        let b = p.module(&["b"]).unwrap();
        // Its comment names `table` and `a`, which pulls in neither.
        assert!(!b.contains("table[16]") && !b.contains("helper") && !b.contains(".entry a("));
        let both = p.module(&["a", "b"]).unwrap();
        assert!(both.contains(".entry a(") && both.contains(".entry b("));
        assert_eq!(both.matches(".entry a(").count(), 1);
    }

    #[test]
    fn unknown_entries_and_broken_texts_are_errors() {
        let p = Ptx::parse(TEXT).unwrap();
        assert_eq!(p.module(&["leaf"]), Err(SplitError::NoEntry("leaf".into())));
        assert_eq!(p.module(&["c"]), Err(SplitError::NoEntry("c".into())));
        let cut = &TEXT[..TEXT.rfind("\tret;").unwrap()];
        assert_eq!(
            Ptx::parse(cut).err(),
            Some(SplitError::Unterminated("b".into()))
        );
        assert_eq!(Ptx::parse(".func f;\n").err(), Some(SplitError::NoHeader));
    }

    #[test]
    fn declarations_name_their_symbol() {
        assert_eq!(declares(".visible .entry e(").unwrap(), ("e".into(), true));
        assert_eq!(
            declares(".func  (.param .align 16 .b8 func_retval0[16]) _RIN$x").unwrap(),
            ("_RIN$x".into(), false)
        );
        assert_eq!(declares(".func f(").unwrap(), ("f".into(), false));
        assert_eq!(
            declares(".global .align 8 .b8 anon_$_1[120] = {0};").unwrap(),
            ("anon_$_1".into(), false)
        );
        assert_eq!(
            declares(".shared .align 8 .b8 ring_bar[16];").unwrap().0,
            "ring_bar"
        );
        assert!(declares("\tret;").is_none());
    }
}
