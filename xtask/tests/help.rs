//! `cargo xtask --help` is real help: every command, exit status 0; an
//! unknown command is refused with the same list and status 2.

use std::process::Command;

const COMMANDS: [&str; 8] = [
    "example",
    "bench",
    "bundle",
    "gpu-suite",
    "compare",
    "sass",
    "package-check",
    "help",
];

#[test]
fn help_lists_every_command() {
    for flag in ["--help", "-h", "help"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .arg(flag)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let text = String::from_utf8_lossy(&out.stdout);
        for c in COMMANDS {
            assert!(
                text.contains(&format!("\n  {c}")),
                "{c} missing from {flag}:\n{text}"
            );
        }
    }
}

#[test]
fn unknown_commands_and_no_command_are_refused_with_the_list() {
    for args in [vec!["frobnicate"], vec![]] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("gpu-suite"));
    }
}
