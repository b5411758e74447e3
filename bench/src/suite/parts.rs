//! The parts of the suite: what each runs on a GPU host and what it runs on
//! the CPU execution (`--cpu`). Running one is `runner.rs`; reading its log
//! into a status and a figure is `judge.rs`.

/// One test binary run: the binary's name in the bundle, its arguments and
/// environment.
pub(super) struct TestRun {
    pub(super) bin: &'static str,
    pub(super) args: &'static [&'static str],
    pub(super) env: Vec<(&'static str, String)>,
}

fn run(bin: &'static str, args: &'static [&'static str]) -> TestRun {
    TestRun {
        bin,
        args,
        env: vec![],
    }
}

pub(super) enum Job {
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
    /// Communicators across processes: the process tests.
    Jobs,
    /// `k` processes of a job started together: how long until every rank
    /// joined (`start.rs`).
    Start(usize),
    /// `job` with MPS running, where the host has it (its processes share
    /// one GPU).
    Mps(Box<Job>),
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
    pub(super) job: Job,
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
    let procs = |name, about, common, gpu, cpu, est| Part {
        name,
        about,
        est_s: (est, 10),
        cap_s: 300,
        job: Job::Mps(Box::new(Job::Sweep { common, gpu, cpu })),
    };
    // The gradient layer on the hierarchical backend: 4 processes as 2
    // simulated hosts x 2 (MPS where present). Loopback sockets shared by 4
    // processes vary from call to call (the dense baseline spanned 37 to
    // 68 ms in one run at 5 iterations), so each takes 10 to 20.
    let hier_grad = |name, about: &'static str, common, gpu| Part {
        name,
        about,
        est_s: (150, 30),
        cap_s: 600,
        job: Job::Mps(Box::new(Job::GradBench {
            common,
            gpu,
            cpu: "-b 64K -e 64K -n 1 -w 1",
        })),
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
            name: "jobs",
            about: "one process per rank (MPS started where the host has it): every collective against the reference with 2, 3 and 4 processes, the gradient layer's fused all-reduce against one process, two 4-process jobs at once, a rank killed mid-collective and an abort, each ending every rank's call with the error naming it; on GPUs also hierarchical jobs on simulated hosts (every shape bit for bit, the gradient layer, NCCL missing, a rank killed, stopped or aborting while buckets are in flight)",
            est_s: (90, 40),
            cap_s: 600,
            job: Job::Mps(Box::new(Job::Jobs)),
        },
        procs(
            "procs-k4-256M",
            "one process per rank, k = 4 (MPS where present): the ring at 256 MiB, all three collectives, 2 MiB staging, channels automatic; against ring-k4-256M, the same in one process",
            "--procs 4 --collective all --algo ring --buffsize 2M",
            "-b 256M -e 256M -n 10 -w 3",
            "-b 8 -e 64K -f 8 -n 2 -w 1",
            60,
        ),
        sweep(
            "ring-k4-256M",
            "the same as procs-k4-256M with the four ranks in one process",
            "-g 4 --collective all --algo ring --buffsize 2M",
            "-b 256M -e 256M -n 10 -w 3",
            "-b 8 -e 64K -f 8 -n 2 -w 1",
            40,
        ),
        procs(
            "procs-latency-k8",
            "one process per rank, k = 8 (MPS where present): all-reduce 8 B to 4 KiB, Auto",
            "--procs 8 -d float -o sum --collective all-reduce",
            "-b 8 -e 4K -f 2 -n 200 -w 20 --repeats 3",
            "-b 8 -e 512 -f 8 -n 2 -w 1",
            40,
        ),
        Part {
            name: "procs-start-k8",
            about: "8 processes of the test job binary (join only; MPS where present, all on GPU 0) spawned together: milliseconds from the spawn to the last rank's joined line, three rounds",
            est_s: (15, 10),
            cap_s: 120,
            job: Job::Mps(Box::new(Job::Start(8))),
        },
        procs(
            "procs-latency-k2",
            "the same as procs-latency-k8 with 2 processes: how latency grows with the processes sharing one GPU",
            "--procs 2 -d float -o sum --collective all-reduce",
            "-b 8 -e 4K -f 2 -n 200 -w 20 --repeats 3",
            "-b 8 -e 512 -f 8 -n 2 -w 1",
            30,
        ),
        procs(
            "procs-latency-k4",
            "the same as procs-latency-k8 with 4 processes",
            "--procs 4 -d float -o sum --collective all-reduce",
            "-b 8 -e 4K -f 2 -n 200 -w 20 --repeats 3",
            "-b 8 -e 512 -f 8 -n 2 -w 1",
            30,
        ),
        procs(
            "hier-2x2",
            "beyond one node, simulated: 4 processes as 2 hosts x 2 (MPS where present), all-reduce 1 MiB to 256 MiB, the hierarchical backend beside flat NCCL over the same processes (each its own host to NCCL; NCCL from RINGREDUCE_NCCL_LIBRARY); the CPU execution runs the hierarchical rows only",
            "--procs 4 --nodes 2 -d float -o sum --collective all-reduce",
            "--backend hier,nccl -b 1M -e 256M -f 4 -n 5 -w 2",
            "--backend hier -b 8 -e 64K -f 8 -n 2 -w 1",
            120,
        ),
        procs(
            "hier-node-k2-256M",
            "the hierarchy's steps inside a node, alone: 2 processes (MPS where present), reduce-scatter, all-gather and all-reduce of 256 MiB; beside hier-2x2's 256 MiB row",
            "--procs 2 -d float -o sum --collective all",
            "-b 256M -e 256M -n 5 -w 2",
            "-b 8 -e 64K -f 8 -n 2 -w 1",
            30,
        ),
        procs(
            "hier-across-2x1-256M",
            "the hierarchy's step between hosts, alone: NCCL's all-gather of 256 MiB (128 MiB from each) between 2 processes as 2 simulated hosts over its socket transport; the CPU execution runs the hierarchical backend's instead",
            "--procs 2 --nodes 2 -d float --collective all-gather",
            "--backend nccl -b 256M -e 256M -n 5 -w 2",
            "--backend hier -b 8 -e 64K -f 8 -n 2 -w 1",
            30,
        ),
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
        hier_grad(
            "hier-half-2x2",
            "2 simulated hosts x 2, the gradient layer on the hierarchical backend: f16 and bf16 (only the step between nodes in 16 bits) against the dense f32 hierarchical all-reduce of 256 MiB",
            "--procs 4 --nodes 2 --backend hier --collective half",
            "-b 256M -e 256M -n 20 -w 3",
        ),
        hier_grad(
            "hier-sparse-2x2",
            "2 simulated hosts x 2, the gradient layer on the hierarchical backend: top-K at 0.1% to 20% (only the step between nodes sparse) against the dense f32 hierarchical all-reduce of 256 MiB, and the break-even density",
            "--procs 4 --nodes 2 --backend hier --collective sparse",
            "-b 256M -e 256M -n 10 -w 2",
        ),
        hier_grad(
            "hier-fused-2x2",
            "2 simulated hosts x 2, the gradient layer on the hierarchical backend: ResNet-50's 161 gradients fused, streamed and in their buckets against one hierarchical all-reduce per tensor",
            "--procs 4 --nodes 2 --backend hier --collective fused",
            "-n 20 -w 3",
        ),
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

pub(super) fn tests_runs(cpu: bool) -> Vec<TestRun> {
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

pub(super) fn faults_runs(cpu: bool) -> Vec<TestRun> {
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

pub(super) fn jobs_runs(cpu: bool) -> Vec<TestRun> {
    if cpu {
        vec![run("jobs", &["--nocapture", "--test-threads=1"])]
    } else {
        vec![run("gpu_jobs", &["--nocapture", "--test-threads=1"])]
    }
}

pub(super) fn grad_runs(cpu: bool) -> Vec<TestRun> {
    if cpu {
        vec![run("grad", &["--nocapture"])]
    } else {
        vec![run("gpu_grad", &["--nocapture", "--test-threads=1"])]
    }
}

pub(super) fn soak_runs(cpu: bool, k: usize) -> Vec<TestRun> {
    let mut r = if cpu {
        run("cpu_back_to_back", &["cpu_soak", "--exact", "--nocapture"])
    } else {
        run("gpu_faults", &["gpu_soak", "--exact", "--nocapture"])
    };
    r.env.push(("RINGREDUCE_SOAK_KS", k.to_string()));
    vec![r]
}

#[cfg(test)]
mod tests {
    use super::*;

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
