//! The parts of the suite: what each runs on a GPU host, what it runs on the
//! CPU execution (`--cpu`), and how its log becomes a status and a figure.

use super::ctx::{gpu_tool, Ctx};
use super::exec::{run_logged, Ended};
use super::figures::{sanitizer_errors, skips, sum_before, tally};
use super::{Outcome, Status};
use crate::report::Report;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One test binary run: the binary's name in the bundle, its arguments and
/// environment.
struct TestRun {
    bin: &'static str,
    args: &'static [&'static str],
    env: Vec<(&'static str, String)>,
}

fn run(bin: &'static str, args: &'static [&'static str]) -> TestRun {
    TestRun {
        bin,
        args,
        env: vec![],
    }
}

enum Job {
    /// The correctness suite: the collective matrix, small staging buffers,
    /// large counts, back-to-back collectives.
    Tests,
    /// Missing rank, abort, lost signal, poisoned inputs, bad input.
    Faults,
    /// The gradient layer (`ringreduce::grad`).
    Grad,
    /// The gradient layer's bench rows: common flags, then GPU or CPU sizes.
    GradBench {
        common: &'static str,
        gpu: &'static str,
        cpu: &'static str,
    },
    /// compute-sanitizer's memcheck, racecheck and synccheck.
    Sanitize,
    /// Thousands of mixed collectives on `k` ranks with no host sync.
    Soak(usize),
    /// The bench under Nsight Compute at each size: the kernel's own time.
    KernelTimes {
        common: &'static str,
        /// A regular expression for the kernel names to time.
        kernel: &'static str,
        /// Launches of those kernels to leave out first: the ceilings'.
        skip: usize,
        sizes: &'static [&'static str],
    },
    /// The small-call probes (`ringreduce-probe`) at `k` ranks.
    Probes(usize),
    /// A fresh process's first calls with an empty JIT cache.
    ColdStart,
    /// A bench sweep: common flags, then the GPU or the CPU sizes.
    Sweep {
        common: &'static str,
        gpu: &'static str,
        cpu: &'static str,
    },
}

/// A named part of the suite.
pub struct Part {
    pub name: &'static str,
    pub about: &'static str,
    /// Rough wall time on an H200, and on the CPU execution, in seconds:
    /// with `--budget`, a part that would not fit is left out, not killed.
    pub est_s: (u64, u64),
    /// Hard limit even without a budget, so that no hang outlives a part.
    pub cap_s: u64,
    job: Job,
}

/// The entries an f32 sum all-reduce runs, whichever algorithm Auto
/// picks, as a regular expression over the catalogue's names.
fn f32_sum_all_reduce_kernels() -> &'static str {
    use ringreduce::kernels::catalogue::collective_entry;
    use ringreduce::{Algorithm, Collective, DataType, Op};
    static R: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let mut names: Vec<&str> = Algorithm::ALL
            .iter()
            .map(|&a| collective_entry(a, Collective::AllReduce, DataType::F32, Op::Sum).name)
            .collect();
        names.dedup();
        format!("({})", names.join("|"))
    })
}

/// Every part, most important first (a budget cuts from the end).
pub fn all() -> Vec<Part> {
    let sweep = |name, about, common, gpu, cpu, est| Part {
        name,
        about,
        est_s: (est, 5),
        cap_s: 600,
        job: Job::Sweep { common, gpu, cpu },
    };
    // The collective entry or the local one, whichever Auto runs.
    let kernel_times = |name, about, common, sizes| Part {
        name,
        about,
        est_s: (60, 1),
        cap_s: 300,
        job: Job::KernelTimes {
            common,
            kernel: f32_sum_all_reduce_kernels(),
            // The launch floor runs the local f32 sum entry first.
            skip: crate::ceilings::LOCAL_FLOOR_LAUNCHES,
            sizes,
        },
    };
    vec![
        Part {
            name: "tests",
            about: "the collective matrix (k = 1..8, every type and op, offsets, ring orders), small staging buffers, large counts, 1000 back-to-back collectives, forced direct algorithms, CUDA graph replay",
            est_s: (430, 20),
            cap_s: 900,
            job: Job::Tests,
        },
        Part {
            name: "faults",
            about: "missing rank (timeout), abort from another thread, lost signal (fault injection), NaN/Inf/-0 inputs against the CPU execution, every bad input",
            est_s: (25, 5),
            cap_s: 300,
            job: Job::Faults,
        },
        Part {
            name: "grad",
            about: "the gradient layer: fused against per-tensor, the streaming session and its stream order, half precision against its reference, sparse against a sort-based selection, results identical to the CPU execution",
            est_s: (60, 10),
            cap_s: 600,
            job: Job::Grad,
        },
        Part {
            name: "sanitize",
            about: "compute-sanitizer memcheck, racecheck and synccheck on a small workload (90 collectives at k = 2 and 3: the ring forced, then Auto with and without the local algorithm); skipped on the CPU execution",
            est_s: (60, 1),
            cap_s: 600,
            job: Job::Sanitize,
        },
        kernel_times(
            "kernel-times-k8",
            "the all-reduce kernel's own time under Nsight Compute (ncu), k = 8, f32 sum, Auto (the local kernel on one GPU), at 8 B, 1 KiB and 32 KiB: the GPU's part of the latency, apart from launches; skipped on the CPU execution",
            "-g 8 -d float -o sum --collective all-reduce -n 20 -w 2",
            &["8", "1K", "32K"],
        ),
        kernel_times(
            "kernel-times-k8-rs",
            "the same for the reduce-scatter at 1 KiB, 4 KiB and 32 KiB: eight segments of a few elements each, which one block once moved one after another; skipped on the CPU execution",
            "-g 8 -d float -o sum --collective reduce-scatter -n 20 -w 2",
            &["1K", "4K", "32K"],
        ),
        Part {
            name: "cold-start",
            about: "a fresh process's first f32 sum all-reduce at k = 8, then its first all-reduce of every other type, with an empty JIT cache and CUDA_FORCE_PTX_JIT=1 (JSON: each call, each module loaded and its bytes); skipped on the CPU execution",
            est_s: (15, 1),
            cap_s: 300,
            job: Job::ColdStart,
        },
        Part {
            name: "probes-k8",
            about: "the small-call probes, k = 8: the local kernel's own time per launch by shape from CUDA graph replays, beside hand-written entries; the library's host time per local all-reduce against the same kernel launched raw and an empty launch; skipped on the CPU execution",
            est_s: (20, 1),
            cap_s: 120,
            job: Job::Probes(8),
        },
        Part {
            name: "probes-k4",
            about: "the same at k = 4",
            est_s: (20, 1),
            cap_s: 120,
            job: Job::Probes(4),
        },
        sweep(
            "bench-k4-256M-C1",
            "the one-channel floor: all three collectives on the ring, k = 4, f32 sum, 256 MiB, 2 MiB staging, C = 1",
            "-g 4 -d float -o sum --buffsize 2M -C 1 --collective all --algo ring",
            "-b 256M -e 256M -n 10 -w 3",
            "-b 64K -e 64K -n 2 -w 1",
            60,
        ),
        sweep(
            "bench-k8-1G",
            "the channel target: all three collectives, k = 8, f32 sum, 1 GiB, auto (local on one GPU), automatic channels",
            "-g 8 -d float -o sum --collective all",
            "-b 1G -e 1G -n 10 -w 3",
            "-b 64K -e 64K -n 2 -w 1",
            90,
        ),
        sweep(
            "bench-k8-1G-ring",
            "the same on the ring, automatic channels",
            "-g 8 -d float -o sum --collective all --algo ring",
            "-b 1G -e 1G -n 10 -w 3",
            "-b 64K -e 64K -n 2 -w 1",
            90,
        ),
        Part {
            name: "soak-k4",
            about: "10,000 mixed collectives (all three kinds, types, ops, counts to 2^22, in place, 3 stream sets) at k = 4, checked every 500; 300 at small counts on the CPU execution",
            // 93 s on an H100 (2026-12-05, a small call's time split), checking on the host.
            est_s: (95, 5),
            cap_s: 900,
            job: Job::Soak(4),
        },
        sweep(
            "latency-k8",
            "small messages, k = 8: all three collectives, 8 B to 16 MiB, factor 2, with ring, one-shot, two-shot and local forced, then auto, and auto against the fastest, timed again side by side in alternating windows",
            "-g 8 -d float -o sum --collective all --algo all",
            "-b 8 -e 16M -f 2 -n 200 -w 20 --repeats 5 --direct-bytes 32M --rematch 9",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            90,
        ),
        sweep(
            "latency-k4",
            "the same at k = 4",
            "-g 4 -d float -o sum --collective all --algo all",
            "-b 8 -e 16M -f 2 -n 200 -w 20 --repeats 5 --direct-bytes 32M --rematch 9",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            60,
        ),
        sweep(
            "latency-k2",
            "the same at k = 2",
            "-g 2 -d float -o sum --collective all --algo all",
            "-b 8 -e 16M -f 2 -n 200 -w 20 --repeats 5 --direct-bytes 32M --rematch 9",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            50,
        ),
        // At k = 8 the three sizes took more than 580 s on an H100
        // (2026-12-06, Auto side by side to 1 GiB at k = 4; 432 s before
        // --rematch, 2026-12-06, Auto to 1 GiB), past the device tool's 600 s per command, so
        // 1 GiB is a part of its own (`--only auto-large-k8` still names
        // both): the rows' exact checks, not the timed calls, take most of
        // the time, and they grow with the size.
        sweep(
            "auto-large-k8-256M",
            "Auto against every forced algorithm at 64 MiB and 256 MiB, k = 8 (the latency parts stop at 16 MiB), and against the fastest timed again side by side: all three collectives, direct staging halves of 1200 MiB (a 1 GiB two-shot all-reduce needs 1 GiB for the input and 1/k of it for the reduced block)",
            "-g 8 -d float -o sum --collective all --algo all",
            "-b 64M -e 256M -f 4 -n 5 -w 2 --repeats 3 --direct-bytes 1200M --rematch 3",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            150,
        ),
        sweep(
            "auto-large-k8-1G",
            "the same at 1 GiB, k = 8",
            "-g 8 -d float -o sum --collective all --algo all",
            "-b 1G -e 1G -n 5 -w 2 --repeats 3 --direct-bytes 1200M --rematch 3",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            480,
        ),
        sweep(
            "auto-large-k4",
            "the same at k = 4, direct staging halves of 1300 MiB",
            "-g 4 -d float -o sum --collective all --algo all",
            "-b 64M -e 1G -f 4 -n 5 -w 2 --repeats 3 --direct-bytes 1300M --rematch 3",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            // 325 s with --rematch on an H100 (2026-12-06, Auto side by side to 1 GiB at k = 4).
            340,
        ),
        sweep(
            "auto-large-k2",
            "the same at k = 2, direct staging halves of 1560 MiB",
            "-g 2 -d float -o sum --collective all --algo all",
            "-b 64M -e 1G -f 4 -n 5 -w 2 --repeats 3 --direct-bytes 1560M --rematch 3",
            "-b 8 -e 4K -f 8 -n 1 -w 1 --rematch 2",
            // About 185 s on an H100 (2026-12-06, Auto to 1 GiB), before --rematch.
            220,
        ),
        sweep(
            "graph-k8",
            "all-reduce, k = 8, 8 B to 32 KiB, each size's iterations replayed as one CUDA graph (compare latency-k8's auto rows); on the CPU execution, without the graph",
            "-g 8 -d float -o sum -f 8 --collective all-reduce",
            "-b 8 -e 32K -n 200 -w 20 --repeats 5 --graph",
            "-b 8 -e 8 -n 1 -w 1",
            15,
        ),
        // The six size sweeps took 24-49 s each on an H100 (2026-12-06,
        // mbarrier hand-off); the estimates allow about twice that.
        sweep(
            "bench-sweep-k4-auto",
            "size sweep of all three collectives, k = 4, f32 sum, 8 B to 1 GiB, factor 4, auto (local on one GPU), automatic channels",
            "-g 4 -d float -o sum -f 4 --collective all",
            "-b 8 -e 1G -n 5 -w 2",
            "-b 8 -e 512K -n 2 -w 1",
            70,
        ),
        sweep(
            "bench-sweep-k4-C1",
            "the same sweep on the ring with one channel",
            "-g 4 -d float -o sum -f 4 --collective all -C 1 --algo ring",
            "-b 8 -e 1G -n 5 -w 2",
            "-b 8 -e 512K -n 2 -w 1",
            70,
        ),
        sweep(
            "bench-sweep-k8-auto",
            "size sweep, k = 8, auto, automatic channels",
            "-g 8 -d float -o sum -f 4 --collective all",
            "-b 8 -e 1G -n 5 -w 2",
            "-b 8 -e 512K -n 2 -w 1",
            100,
        ),
        sweep(
            "bench-sweep-k8-C1",
            "size sweep, k = 8, the ring with one channel",
            "-g 8 -d float -o sum -f 4 --collective all -C 1 --algo ring",
            "-b 8 -e 1G -n 5 -w 2",
            "-b 8 -e 512K -n 2 -w 1",
            100,
        ),
        sweep(
            "bench-sweep-k2-auto",
            "size sweep, k = 2, auto, automatic channels",
            "-g 2 -d float -o sum -f 4 --collective all",
            "-b 8 -e 1G -n 5 -w 2",
            "-b 8 -e 512K -n 2 -w 1",
            50,
        ),
        sweep(
            "bench-sweep-k2-C1",
            "size sweep, k = 2, the ring with one channel",
            "-g 2 -d float -o sum -f 4 --collective all -C 1 --algo ring",
            "-b 8 -e 1G -n 5 -w 2",
            "-b 8 -e 512K -n 2 -w 1",
            50,
        ),
        sweep(
            "bench-table-k2-auto",
            "the ring engine's table rows: all three collectives on the ring at 64 MiB and 1 GiB, k = 2, automatic channels",
            "-g 2 -d float -o sum -f 16 --collective all --algo ring",
            "-b 64M -e 1G -n 5 -w 2",
            "-b 4K -e 64K -n 1 -w 1",
            40,
        ),
        sweep(
            "bench-table-k2-C1",
            "the table rows, k = 2, the ring with one channel",
            "-g 2 -d float -o sum -f 16 --collective all -C 1 --algo ring",
            "-b 64M -e 1G -n 5 -w 2",
            "-b 4K -e 64K -n 1 -w 1",
            60,
        ),
        sweep(
            "bench-table-k4-auto",
            "the table rows, k = 4, the ring with automatic channels",
            "-g 4 -d float -o sum -f 16 --collective all --algo ring",
            "-b 64M -e 1G -n 5 -w 2",
            "-b 4K -e 64K -n 1 -w 1",
            60,
        ),
        sweep(
            "bench-table-k4-C1",
            "the table rows, k = 4, the ring with one channel",
            "-g 4 -d float -o sum -f 16 --collective all -C 1 --algo ring",
            "-b 64M -e 1G -n 5 -w 2",
            "-b 4K -e 64K -n 1 -w 1",
            90,
        ),
        sweep(
            "bench-table-k8-auto",
            "the table rows, k = 8, the ring with automatic channels",
            "-g 8 -d float -o sum -f 16 --collective all --algo ring",
            "-b 64M -e 1G -n 5 -w 2",
            "-b 4K -e 64K -n 1 -w 1",
            100,
        ),
        sweep(
            "bench-table-k8-C1",
            "the table rows, k = 8, the ring with one channel",
            "-g 8 -d float -o sum -f 16 --collective all -C 1 --algo ring",
            "-b 64M -e 1G -n 5 -w 2",
            "-b 4K -e 64K -n 1 -w 1",
            150,
        ),
        Part {
            name: "grad-fused-k8",
            about: "the gradient layer: ResNet-50's 161 gradients fused, streamed, and stored in the buckets, against one all-reduce per tensor, k = 8",
            est_s: (40, 10),
            cap_s: 600,
            job: Job::GradBench {
                common: "-g 8 --collective fused",
                gpu: "-n 10 -w 3",
                cpu: "-n 1 -w 1",
            },
        },
        Part {
            name: "grad-half-k8",
            about: "the gradient layer: f16 and bf16 all-reduce of 256 MiB of f32 against the f32 all-reduce, k = 8",
            est_s: (40, 5),
            cap_s: 600,
            job: Job::GradBench {
                common: "-g 8 --collective half",
                gpu: "-b 256M -e 256M -n 10 -w 3",
                cpu: "-b 64K -e 64K -n 1 -w 1",
            },
        },
        Part {
            name: "grad-sparse-k8",
            about: "the gradient layer: top-K at 0.1% to 20% of 256 MiB of f32 against the dense all-reduce, and the break-even density, k = 8",
            est_s: (90, 10),
            cap_s: 600,
            job: Job::GradBench {
                common: "-g 8 --collective sparse",
                gpu: "-b 256M -e 256M -n 5 -w 2",
                cpu: "-b 64K -e 64K -n 1 -w 1",
            },
        },
        Part {
            name: "soak-k8",
            about: "the soak at k = 8",
            // 286 s on an H100 (2026-12-05, the first H100 run, 72 G elements); at the
            // old 170 s estimate a budget started it where it could not end.
            est_s: (300, 5),
            cap_s: 900,
            job: Job::Soak(8),
        },
        sweep(
            "bench-k4-all-64M",
            "every collective, type and op, k = 4, 64 MiB",
            "-g 4 -d all -o all --collective all",
            "-b 64M -e 64M -n 3 -w 1",
            "-b 4K -e 4K -n 1 -w 1",
            150,
        ),
    ]
}

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
        let (status, figure, logs) = match &self.job {
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
        };
        Outcome {
            part: self.name.to_string(),
            status,
            figure,
            wall_s: 0.0,
            logs,
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
            c.args(r.args);
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
        c.args(common.split_whitespace())
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

fn tests_runs(cpu: bool) -> Vec<TestRun> {
    if cpu {
        vec![
            run("cpu_matrix", &["--nocapture"]),
            run("cpu_back_to_back", &["--nocapture", "--skip", "cpu_soak"]),
        ]
    } else {
        // Each from an empty JIT cache, PTX only: every module a test
        // loads is compiled afresh, as on a new machine.
        vec![
            cold(run("gpu_loading", &["--nocapture"]), "gpu_loading"),
            cold(run("gpu", &["--nocapture", "--test-threads=4"]), "gpu"),
        ]
    }
}

/// `r` with a JIT cache of its own, emptied by the suite before the run
/// (`jit-cache-<name>` in its folder), and the driver asked to compile PTX
/// rather than load embedded SASS.
fn cold(mut r: TestRun, name: &str) -> TestRun {
    r.env.push(("CUDA_CACHE_PATH", format!("jit-cache-{name}")));
    r.env.push(("CUDA_FORCE_PTX_JIT", "1".into()));
    r
}

fn faults_runs(cpu: bool) -> Vec<TestRun> {
    if cpu {
        vec![
            run("faults", &["--nocapture", "--test-threads=1"]),
            run("bad_input", &["--nocapture"]),
        ]
    } else {
        vec![run(
            "gpu_faults",
            &[
                "--nocapture",
                "--test-threads=1",
                "--skip",
                "gpu_soak",
                "--skip",
                "gpu_sanitize",
            ],
        )]
    }
}

fn grad_runs(cpu: bool) -> Vec<TestRun> {
    if cpu {
        vec![run("grad", &["--nocapture"])]
    } else {
        vec![run("gpu_grad", &["--nocapture", "--test-threads=1"])]
    }
}

fn soak_runs(cpu: bool, k: usize) -> Vec<TestRun> {
    let mut r = if cpu {
        run("cpu_back_to_back", &["cpu_soak", "--exact", "--nocapture"])
    } else {
        run("gpu_faults", &["gpu_soak", "--exact", "--nocapture"])
    };
    r.env.push(("RINGREDUCE_SOAK_KS", k.to_string()));
    vec![r]
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

/// A test part's status: failed, timed out, skipped (every test said it
/// skipped, as GPU tests do without a GPU), or passed; and its figure.
pub fn judge_tests(ended: &[Ended], log: &str) -> (Status, String) {
    if let Some(Ended::NotStarted(why)) = ended.iter().find(|e| matches!(e, Ended::NotStarted(_))) {
        return (Status::Fail, format!("not started: {why}"));
    }
    if ended.iter().any(|e| matches!(e, Ended::TimedOut)) {
        return (Status::TimedOut, "killed at its time limit".into());
    }
    let t = tally(log);
    let collectives = sum_before(log, " collectives");
    let wrong = sum_before(log, " wrong");
    if t.failed > 0 || !ended.iter().all(Ended::success) || wrong > 0 {
        return (
            Status::Fail,
            format!(
                "{} of {} failed, {wrong} wrong",
                t.failed,
                t.passed + t.failed
            ),
        );
    }
    let skipped = skips(log);
    // The GPU harness reports tests it cannot run as ignored, with a
    // "skipped: why" line.
    if t.passed == 0 && t.ignored > 0 {
        let why = skipped
            .first()
            .and_then(|l| l.split(": skipped: ").nth(1))
            .unwrap_or("every test was ignored");
        return (Status::Skipped, format!("skipped: {why}"));
    }
    if t.binaries == 0 || t.passed == 0 {
        return (Status::Fail, "no test ran".into());
    }
    let mut f = format!("{} passed", t.passed);
    if collectives > 0 {
        f += &format!("; {collectives} collectives checked, 0 wrong");
    }
    if !skipped.is_empty() {
        f += &format!("; {} skipped", skipped.len());
    }
    if let Some(image) = kernel_image(log) {
        f += &format!("; kernels on sm_{image}");
    }
    (Status::Pass, f)
}

/// What the GPU tests' `gpu_kernel_image` printed: the image the kernels
/// loaded from and the first communicator's time (the harness may print
/// it after a test's name on the same line).
fn kernel_image(log: &str) -> Option<&str> {
    log.lines()
        .find_map(|l| l.split_once("kernels on sm_").map(|(_, rest)| rest.trim()))
}

/// A sweep's status and figure: busbw (and its ratio to the single-block
/// copy) at the largest size, or the row count for multi-type sweeps.
pub fn judge_sweep(ended: &Ended, report: Option<&Report>, cpu: bool) -> (Status, String) {
    match ended {
        Ended::NotStarted(why) => return (Status::Fail, format!("not started: {why}")),
        Ended::TimedOut => return (Status::TimedOut, "killed at its time limit".into()),
        Ended::Exited(s) if !s.success() => {
            return (Status::Fail, format!("the bench exited with {s}"))
        }
        Ended::Exited(_) => {}
    }
    let Some(r) = report else {
        return (Status::Fail, "no JSON report".into());
    };
    if !cpu && r.execution != "gpu" {
        return (
            Status::Skipped,
            "skipped: no GPU (the bench ran on the CPU execution)".into(),
        );
    }
    let wrong: u64 = r
        .rows
        .iter()
        .flat_map(|row| [&row.out_of_place, &row.in_place])
        .map(|p| p.wrong.unwrap_or(0))
        .sum::<u64>()
        + r.out_of_bounds;
    if wrong > 0 {
        return (Status::Fail, format!("{wrong} wrong values"));
    }
    let Some(last) = r.rows.iter().map(|row| row.size).max() else {
        return (Status::Fail, "no rows".into());
    };
    let top: Vec<&crate::report::Row> = r.rows.iter().filter(|row| row.size == last).collect();
    let collectives = top
        .iter()
        .map(|row| &row.collective)
        .collect::<std::collections::BTreeSet<_>>();
    let f = if top.len() > collectives.len() {
        format!(
            "{} rows, 0 wrong; avg busbw {:.2} GB/s",
            r.rows.len(),
            r.avg_busbw
        )
    } else {
        // One row per collective at the largest size: its busbw and ratios.
        let each: Vec<String> = top
            .iter()
            .map(|row| {
                let p = &row.out_of_place;
                let ratio = |v: Option<f64>, what: &str| {
                    v.map(|v| format!(", {v:.3} x {what}")).unwrap_or_default()
                };
                format!(
                    "{} {:.2} GB/s (C={}{}{})",
                    row.collective,
                    p.busbw,
                    row.channels,
                    ratio(p.busbw_vs_ceiling, "1-block copy"),
                    ratio(p.vs_device_copy, "device copy")
                )
            })
            .collect();
        format!(
            "at {}: {}; {} rows, 0 wrong",
            crate::sizes::human(last),
            each.join("; "),
            r.rows.len()
        )
    };
    // Auto against the fastest forced algorithm, timed side by side.
    let worst = r.auto_rematch.iter().map(|m| m.ratio()).fold(0.0, f64::max);
    let f = match r.auto_rematch.is_empty() {
        true => f,
        false => format!("{f}; Auto / fastest, timed side by side: worst {worst:.3}"),
    };
    (Status::Pass, f)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn ok() -> Ended {
        Ended::Exited(std::process::ExitStatus::from_raw(0))
    }

    /// Every sweep that forces the direct algorithms sizes its direct
    /// staging for its largest call by the library's own rule, so that no
    /// forced row is refused partway through a part on the GPU
    /// (auto-large-k4 and -k2 once were: 1200 MiB halves fit k = 8 only).
    #[test]
    fn direct_staging_fits_every_forced_call() {
        use crate::cli::{AlgoArg, BenchArgs};
        use clap::Parser;
        use ringreduce::kernels::plan::Geometry;
        use ringreduce::{internals::direct_layout, Algo, Algorithm, Collective};
        let mut checked = 0;
        for p in all() {
            let Job::Sweep { common, gpu, .. } = p.job else {
                continue;
            };
            let argv = format!("ringreduce-bench {common} {gpu}");
            let a = BenchArgs::try_parse_from(argv.split_whitespace()).unwrap();
            let algs: &[Algorithm] = match a.algo {
                Some(AlgoArg::All) => &[Algorithm::OneShot, Algorithm::TwoShot],
                Some(AlgoArg::One(Algo::OneShot)) => &[Algorithm::OneShot],
                Some(AlgoArg::One(Algo::TwoShot)) => &[Algorithm::TwoShot],
                _ => continue,
            };
            assert_eq!(a.dtype, "float", "{}: the check assumes f32", p.name);
            let have = a
                .direct_bytes
                .unwrap_or_else(|| panic!("{}: no --direct-bytes", p.name));
            let k = a.ranks as u64;
            for c in Collective::ALL {
                let n = crate::metrics::count_for(c, a.max_bytes, 4, a.ranks);
                let g = Geometry::new(c, k, n, 4, 1, 1);
                for &alg in algs {
                    let need = direct_layout(c, alg, k, n, g.block_elems, 4).unwrap().need;
                    assert!(
                        need <= have,
                        "{}: a {alg:?} {c:?} of {} B needs {need} B of direct staging, has {have}",
                        p.name,
                        a.max_bytes
                    );
                }
            }
            checked += 1;
        }
        // latency-k{8,4,2}, auto-large-k{4,2} and auto-large-k8-{256M,1G}.
        assert!(
            checked >= 7,
            "only {checked} parts force a direct algorithm"
        );
    }

    #[test]
    fn ignored_gpu_tests_are_skipped_not_passed() {
        let log = "GPU tests: skipped: no CUDA driver\ntest gpu_matrix ... ignored\n\
                   test result: ok. 0 passed; 0 failed; 4 ignored; 0 measured\n";
        let (s, f) = judge_tests(&[ok()], log);
        assert_eq!(s, Status::Skipped);
        assert_eq!(f, "skipped: no CUDA driver");
    }

    #[test]
    fn passes_fails_and_empty_runs() {
        let pass = "gpu matrix: 10 collectives, 5 elements, 0 wrong\ntest result: ok. 1 passed; 0 failed; 0 ignored\n";
        assert_eq!(
            judge_tests(&[ok()], pass),
            (
                Status::Pass,
                "1 passed; 10 collectives checked, 0 wrong".into()
            )
        );
        let with_image = format!(
            "test gpu_kernel_image ... kernels on sm_90: SASS sm_90, first communicator in 1.20s\n{pass}"
        );
        assert_eq!(
            judge_tests(&[ok()], &with_image).1,
            "1 passed; 10 collectives checked, 0 wrong; \
             kernels on sm_90: SASS sm_90, first communicator in 1.20s"
        );
        let failed = "test result: FAILED. 1 passed; 1 failed; 0 ignored\n";
        assert_eq!(judge_tests(&[ok()], failed).0, Status::Fail);
        let wrong =
            "soak: 5 collectives, 2 wrong\ntest result: ok. 1 passed; 0 failed; 0 ignored\n";
        assert_eq!(judge_tests(&[ok()], wrong).0, Status::Fail);
        assert_eq!(judge_tests(&[ok()], "").0, Status::Fail);
        assert_eq!(judge_tests(&[Ended::TimedOut], pass).0, Status::TimedOut);
    }

    /// Every sweep's command line parses, on the GPU and on the CPU
    /// execution (a flag given twice fails only when the part runs).
    #[test]
    fn every_sweep_command_line_parses() {
        use clap::Parser;
        for p in all() {
            let (common, gpu, cpu) = match p.job {
                Job::Sweep { common, gpu, cpu } | Job::GradBench { common, gpu, cpu } => {
                    (common, gpu, cpu)
                }
                _ => continue,
            };
            {
                for sizes in [gpu, cpu] {
                    let argv = std::iter::once("ringreduce-bench")
                        .chain(common.split_whitespace())
                        .chain(sizes.split_whitespace())
                        .chain(["-J", "x.json", "--plot", "x.png", "--cpu"]);
                    if let Err(e) = crate::cli::BenchArgs::try_parse_from(argv) {
                        panic!("{}: {e}", p.name);
                    }
                }
            }
        }
    }
}
