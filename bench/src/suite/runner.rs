//! Running a part of the suite: its bench sweeps, test binaries, probes or
//! sanitizer passes, each within the part's time limit, judged into an
//! [`Outcome`].

use super::ctx::{gpu_tool, Ctx};
use super::exec::{run_logged, Ended};
use super::figures::sanitizer_errors;
use super::judge::{file_name, judge_sweep, judge_tests};
use super::mps::Mps;
use super::parts::{faults_runs, grad_runs, jobs_runs, soak_runs, tests_runs, Job, Part, TestRun};
use super::{Outcome, Status};
use crate::report::Report;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

impl Part {
    pub fn est(&self, cpu: bool) -> u64 {
        if cpu {
            self.est_s.1
        } else {
            self.est_s.0
        }
    }

    /// Runs the part within `limit` and judges it.
    pub fn run(&self, ctx: &Ctx, limit: Duration) -> Outcome {
        // Its runs append to one log: start it empty, or a second suite in
        // the same folder would count the first one's tests again.
        let _ = std::fs::remove_file(ctx.log(self.name));
        let (status, figure, logs) = self.run_job(ctx, limit, &self.job);
        Outcome {
            part: self.name.to_string(),
            status,
            figure,
            wall_s: 0.0,
            logs,
        }
    }

    fn run_job(&self, ctx: &Ctx, limit: Duration, job: &Job) -> (Status, String, Vec<String>) {
        match job {
            Job::Mps(inner) => {
                let mps = Mps::start(ctx);
                if !ctx.cpu && mps.is_none() {
                    let _ = std::fs::write(
                        ctx.log(self.name),
                        "# no MPS (nvidia-cuda-mps-control missing or not started): the \
                         processes share the GPU by time slices\n",
                    );
                }
                let env = mps.as_ref().map_or(&[][..], |m| m.env());
                self.run_job(&ctx.with_env(env), limit, inner)
            }
            Job::Jobs => self.tests(ctx, limit, jobs_runs(ctx.cpu)),
            Job::Start(k) => super::start::start(ctx, limit, self.name, *k),
            Job::Tests => self.tests(ctx, limit, tests_runs(ctx.cpu)),
            Job::Faults => self.tests(ctx, limit, faults_runs(ctx.cpu)),
            Job::Grad => self.tests(ctx, limit, grad_runs(ctx.cpu)),
            Job::GradBench { common, gpu, cpu } => {
                self.grad_bench(ctx, limit, common, if ctx.cpu { cpu } else { gpu })
            }
            Job::Soak(k) => self.tests(ctx, limit, soak_runs(ctx.cpu, *k)),
            Job::Sanitize => sanitize(ctx, limit),
            Job::KernelTimes {
                common,
                kernel,
                skip,
                sizes,
            } => {
                let kernels = super::profile::Kernels {
                    regex: kernel,
                    skip: *skip,
                };
                super::profile::kernel_times(ctx, limit, self.name, common, &kernels, sizes)
            }
            Job::Probes(k) => super::probes::probes(ctx, limit, self.name, *k),
            Job::ColdStart => super::probes::cold_start(ctx, limit, self.name),
            Job::Sweep { common, gpu, cpu } => {
                self.sweep(ctx, limit, common, if ctx.cpu { cpu } else { gpu })
            }
        }
    }

    fn tests(
        &self,
        ctx: &Ctx,
        limit: Duration,
        runs: Vec<TestRun>,
    ) -> (Status, String, Vec<String>) {
        let log = ctx.log(self.name);
        let mut left = limit;
        let mut ended = Vec::new();
        for r in runs {
            let mut c = Command::new(ctx.test_bin(r.bin));
            c.args(r.args).envs(ctx.env.iter().map(|(k, v)| (k, v)));
            // A cold run's cache is a folder of the suite's, empty at start.
            let mut caches = Vec::new();
            for (k, v) in &r.env {
                if *k == "CUDA_CACHE_PATH" {
                    let dir = ctx.out.join(v);
                    let _ = std::fs::remove_dir_all(&dir);
                    let _ = std::fs::create_dir_all(&dir);
                    c.env(k, &dir);
                    caches.push(dir);
                } else {
                    c.env(k, v);
                }
            }
            let (e, took) = run_logged(c, &log, left);
            for dir in caches {
                let _ = std::fs::remove_dir_all(dir);
            }
            left = left.saturating_sub(took);
            let stop = !matches!(e, Ended::Exited(_));
            ended.push(e);
            if stop {
                break;
            }
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let (s, f) = judge_tests(&ended, &text);
        (s, f, vec![file_name(&log)])
    }

    fn sweep(
        &self,
        ctx: &Ctx,
        limit: Duration,
        common: &str,
        sizes: &str,
    ) -> (Status, String, Vec<String>) {
        let (mut c, json) = self.bench_command(ctx, common, sizes);
        let png = ctx.out.join(format!("{}.png", self.name));
        c.arg("--plot").arg(&png);
        let (e, report, mut files) = self.run_bench::<Report>(ctx, limit, c, &json);
        files.push(file_name(&png));
        let (s, f) = judge_sweep(&e, report.as_ref(), ctx.cpu);
        (s, f, files)
    }
}

impl Part {
    /// The bench with this part's arguments, writing its JSON report to
    /// the path returned beside it (on the CPU execution with `--cpu`).
    fn bench_command(&self, ctx: &Ctx, common: &str, sizes: &str) -> (Command, PathBuf) {
        let json = ctx.out.join(format!("{}.json", self.name));
        let mut c = Command::new(ctx.bin_dir.join("ringreduce-bench"));
        c.envs(ctx.env.iter().map(|(k, v)| (k, v)))
            .args(common.split_whitespace())
            .args(sizes.split_whitespace())
            .arg("-J")
            .arg(&json);
        if ctx.cpu {
            c.arg("--cpu");
        }
        (c, json)
    }

    /// Runs a bench command into this part's log and reads the JSON report
    /// it wrote to `json`: how it ended, the report, and the files (log,
    /// JSON).
    fn run_bench<R: serde::de::DeserializeOwned>(
        &self,
        ctx: &Ctx,
        limit: Duration,
        c: Command,
        json: &std::path::Path,
    ) -> (Ended, Option<R>, Vec<String>) {
        let log = ctx.log(self.name);
        let (e, _) = run_logged(c, &log, limit);
        let report = std::fs::read_to_string(json)
            .ok()
            .and_then(|t| serde_json::from_str::<R>(&t).ok());
        (e, report, vec![file_name(&log), file_name(json)])
    }

    /// A gradient-layer bench run, judged from its JSON.
    fn grad_bench(
        &self,
        ctx: &Ctx,
        limit: Duration,
        common: &str,
        sizes: &str,
    ) -> (Status, String, Vec<String>) {
        let (c, json) = self.bench_command(ctx, common, sizes);
        let (e, report, files) = self.run_bench::<crate::grad::GradReport>(ctx, limit, c, &json);
        let (s, f) = match (&e, report) {
            (Ended::NotStarted(why), _) => (Status::Fail, format!("not started: {why}")),
            (Ended::TimedOut, _) => (Status::TimedOut, "killed at its time limit".into()),
            (Ended::Exited(s), _) if !s.success() => {
                (Status::Fail, format!("the bench exited with {s}"))
            }
            (_, None) => (Status::Fail, "no JSON report".into()),
            (_, Some(r)) if !ctx.cpu && r.execution != "gpu" => (
                Status::Skipped,
                "skipped: no GPU (the bench ran on the CPU execution)".into(),
            ),
            (_, Some(r)) if r.rows.is_empty() => (Status::Fail, "no rows".into()),
            (_, Some(r)) => (Status::Pass, crate::grad::summary(&r)),
        };
        (s, f, files)
    }
}

fn sanitize(ctx: &Ctx, limit: Duration) -> (Status, String, Vec<String>) {
    let tool = match gpu_tool(
        ctx,
        "compute-sanitizer",
        "compute-sanitizer checks GPU kernels",
    ) {
        Ok(t) => t,
        Err(skipped) => return skipped,
    };
    let mut left = limit;
    let mut figures = Vec::new();
    let mut logs = Vec::new();
    let mut status = Status::Pass;
    for t in ["memcheck", "racecheck", "synccheck"] {
        let log = ctx.log(&format!("sanitize-{t}"));
        let mut c = Command::new(&tool);
        c.args(["--tool", t, "--print-limit", "20"])
            .arg(ctx.test_bin("gpu_faults"))
            .args(["gpu_sanitize_small", "--exact", "--nocapture"]);
        let (e, took) = run_logged(c, &log, left);
        left = left.saturating_sub(took);
        logs.push(file_name(&log));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let (s, f) = judge_tests(std::slice::from_ref(&e), &text);
        let errors = sanitizer_errors(&text);
        let s = match (s, errors) {
            (Status::Pass, Some(0)) => Status::Pass,
            (Status::Pass, _) => Status::Fail,
            (s, _) => s,
        };
        figures.push(match errors {
            Some(n) => format!("{t} {n}"),
            None => format!("{t} ? ({f})"),
        });
        status = status.worse(s);
        if matches!(s, Status::TimedOut | Status::Skipped) {
            if s == Status::Skipped {
                figures = vec![f];
            }
            break;
        }
    }
    let figure = if status == Status::Skipped {
        figures.join("; ")
    } else {
        format!("{} errors", figures.join(", "))
    };
    (status, figure, logs)
}
