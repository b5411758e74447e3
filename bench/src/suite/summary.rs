//! The suite's summary: a table on stdout and in `summary.md`, the same in
//! `summary.json`, and what the suite ran on.

use super::Outcome;
use serde::Serialize;
use std::path::Path;
use std::process::Command;

#[derive(Debug, Serialize)]
pub struct Summary {
    pub command_line: Vec<String>,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// `gpu`, or `cpu` for the CPU execution.
    pub execution: String,
    pub device: String,
    pub budget_s: Option<u64>,
    pub wall_s: f64,
    pub parts: Vec<Outcome>,
}

impl Summary {
    /// A Markdown table: part, status, key figure, wall time.
    pub fn table(&self) -> String {
        let mut t = format!(
            "gpu-suite on {} ({}), {}, {:.0} s{}\n\n| part | status | key figure | wall |\n|---|---|---|---|\n",
            self.device,
            self.execution,
            self.date,
            self.wall_s,
            self.budget_s
                .map(|b| format!(" of a {b} s budget"))
                .unwrap_or_default()
        );
        for o in &self.parts {
            t += &format!(
                "| {} | {} | {} | {:.1} s |\n",
                o.part,
                o.status.label(),
                o.figure.replace('|', "/"),
                o.wall_s
            );
        }
        t
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::write(dir.join("summary.md"), self.table())?;
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("summary.json"), json + "\n")
    }
}

/// What the suite runs on.
pub struct Device {
    /// As reported, e.g. `NVIDIA H200, 580.95.05`.
    pub name: String,
    /// For folder names, e.g. `nvidia-h200`.
    pub slug: String,
}

/// The first GPU as `nvidia-smi` names it, or `cpu`.
pub fn device(cpu: bool) -> Device {
    let smi = (!cpu)
        .then(|| {
            Command::new("nvidia-smi")
                .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
                .output()
                .ok()
        })
        .flatten()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .filter(|s| !s.is_empty());
    match smi {
        Some(name) => {
            let model = name.split(',').next().unwrap_or("gpu");
            Device {
                slug: slug(model),
                name,
            }
        }
        None if cpu => Device {
            name: "CPU execution".into(),
            slug: "cpu".into(),
        },
        None => Device {
            name: "unknown GPU (no nvidia-smi)".into(),
            slug: "gpu".into(),
        },
    }
}

fn slug(s: &str) -> String {
    let s: String = s
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    crate::report::now_iso()[..10].to_string()
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    #[test]
    fn slugs_and_table() {
        assert_eq!(slug("NVIDIA H200"), "nvidia-h200");
        assert_eq!(slug(" NVIDIA H100 80GB HBM3 "), "nvidia-h100-80gb-hbm3");
        let s = Summary {
            command_line: vec![],
            date: "2026-12-03T00:00:00Z".into(),
            execution: "cpu".into(),
            device: "CPU execution".into(),
            budget_s: Some(60),
            wall_s: 3.0,
            parts: vec![Outcome {
                part: "tests".into(),
                status: Status::Pass,
                figure: "3 passed | x".into(),
                wall_s: 1.25,
                logs: vec![],
            }],
        };
        let t = s.table();
        assert!(t.contains("| tests | pass | 3 passed / x | 1.2 s |"), "{t}");
        assert!(t.contains("of a 60 s budget"));
        assert_eq!(today().len(), 10);
    }
}
