//! One process of a test job of the CPU execution (or, with
//! `RINGREDUCE_TEST_GPU`, of GPU ranks): joins its communicator from the
//! launcher's variables (`CpuCommunicator::from_env`) and does what
//! `RINGREDUCE_TEST_JOB` says, printing one line per step for the test
//! that started it:
//!
//! - `join`: nothing more (to time joining).
//! - `grad`: the gradient layer's fused all-reduce, plain and in bf16,
//!   against the same calls on every rank in this process; prints `ok
//!   <tensors> <differing elements>`.
//! - `matrix`: every collective over a sample of types, ops, counts and
//!   placements, each checked bit for bit (guards included) against the
//!   reference; prints `ok <cases> <wrong>`.
//! - `loop`: all-reduces of `RINGREDUCE_TEST_ELEMS` f32 (default 2^20)
//!   one after another until one fails, printing `looping` first.
//! - `stall:<r>`: rank `r` joins and then waits forever (to be killed);
//!   the others run an all-reduce and print how it ended.
//! - `between:<r>`: every rank runs one all-reduce; then rank `r` waits
//!   forever and the others wait for the file `RINGREDUCE_TEST_GO`, run
//!   another and print how it ended.
//! - `abort:<r>`: rank `r` aborts after `RINGREDUCE_TEST_ABORT_MS`; the
//!   others run an all-reduce and print how it ended.
//!
//! - `hier`: a hierarchical job (`HierComm`, hosts from
//!   `RINGREDUCE_HOST_NAME`): all-reduces, reduce-scatters and all-gathers
//!   over a sample of types, ops and counts (outputs poisoned first), each checked bit for bit against the hierarchical reference;
//!   prints `ok <cases> <wrong>`. `hier-grad`: the gradient layer on the
//!   hierarchical job (dense fused, half precision and sparse compressed
//!   between nodes), and `Collectives`' region shapes, checked the same way. `hier-stall:<r>`: rank `r` waits forever
//!   after joining; the others run a large all-reduce and print how it
//!   ended. `hier-fused-loop`: fused all-reduces of a list in seven
//!   buckets, one call after another until one fails (a rank is killed
//!   with buckets in flight); prints `next <the next call's error> <ms>`,
//!   then the error. `hier-fused-abort:<r>`: the same, and rank `r`
//!   aborts from another thread after `RINGREDUCE_TEST_ABORT_MS`.
//!
//! Every rank prints `joined <ms since the epoch>` once its communicator
//! exists, and `error
//! <error as {:?}> <ms>` for an error, with the milliseconds its last step
//! took. `RINGREDUCE_TEST_TIMEOUT_MS` sets the timeout,
//! `RINGREDUCE_TEST_BUFFER` the staging bytes, `RINGREDUCE_TEST_ALGO` the
//! algorithm, `RINGREDUCE_TEST_RING` the ring order (comma separated),
//! `RINGREDUCE_TEST_CHANNELS` the channels and
//! `RINGREDUCE_TEST_DEVICE` the GPU (else the local rank's).

use ringreduce::grad::bucket::Bucket;
use ringreduce::grad::GradBackend;
use ringreduce::{
    Algo, Backend, Collective, Collectives, Comm, CommConfig, CpuBackend, DataType, GpuBackend, Op,
    Result,
};
use ringreduce::{GradConfig, GradSync, HierComm, Precision};
use ringreduce_tests::cases::{run_case, Case, Offsets};
use ringreduce_tests::data::{inputs, Gen};
use std::io::Write;
use std::time::{Duration, Instant};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn ms(name: &str) -> Option<u64> {
    var(name).and_then(|v| v.parse().ok())
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

fn config() -> CommConfig {
    let mut c = CommConfig::default().timeout(Duration::from_millis(
        ms("RINGREDUCE_TEST_TIMEOUT_MS").unwrap_or(10_000),
    ));
    if let Some(b) = ms("RINGREDUCE_TEST_BUFFER") {
        c = c.buffer_bytes(b);
    }
    if let Some(a) = var("RINGREDUCE_TEST_ALGO") {
        c = c.algorithm(Algo::parse(&a).expect("an algorithm"));
    }
    if let Some(r) = var("RINGREDUCE_TEST_RING") {
        let order = r.split(',').map(|x| x.parse::<u32>().expect("a rank"));
        c = c.ring_order(order.collect());
    }
    if let Some(n) = ms("RINGREDUCE_TEST_CHANNELS") {
        c = c.channels(n as u32);
    }
    if let Some(d) = ms("RINGREDUCE_TEST_DEVICE") {
        c = c.devices(vec![d as usize]);
    }
    c
}

/// The cases of `matrix` for a job of `k`: every collective, type and op,
/// counts across the direct and ring sizes, in place and not, at element
/// offsets that put some ranks' buffers on 16-byte packs and others' off
/// them (each process then picks its own path).
fn cases(k: usize) -> Vec<Case> {
    let counts = [0usize, 1, 3, 8, 257, 4097, 40_000];
    let mut out = Vec::new();
    let mut i = 0usize;
    for c in Collective::ALL {
        for &n in &counts {
            for (d, &dtype) in DataType::ALL.iter().enumerate() {
                i += 1;
                if !(d + i).is_multiple_of(3) && n > 300 {
                    continue;
                }
                out.push(Case {
                    collective: c,
                    dtype,
                    op: Op::ALL[i % Op::ALL.len()],
                    n,
                    in_place: i.is_multiple_of(2),
                    offsets: if i.is_multiple_of(3) {
                        Offsets::Scattered(i % 4)
                    } else {
                        Offsets::Congruent(i % 4)
                    },
                    seed: (k as u64) << 40 | i as u64,
                });
            }
        }
    }
    out
}

/// An all-reduce of `n` f32 sums, waited for.
fn all_reduce<B: Backend>(comm: &Comm<B>, n: usize) -> Result<()> {
    let me = comm.local_ranks().start;
    let mut buf = comm.upload(me, &vec![1.0f32; n])?;
    let mut regions = [ringreduce::Region::InPlace {
        buf: &mut buf,
        at: 0..n,
    }];
    comm.all_reduce(&mut regions, Op::Sum)?;
    comm.synchronize()
}

/// Rank `r`'s gradient `t` of `len` elements: fractions of mixed
/// magnitudes, so that a sum's last bits depend on its fold order.
fn gradient(r: usize, t: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 31 + r * 7 + t * 13) % 97) as f32 * 0.37 - 17.9 + r as f32 * 1e-3)
        .collect()
}

/// The gradient layer's fused all-reduce (plain, then bf16 averaged) of a
/// few tensors in small buckets across the job's processes, against the
/// same calls on one communicator of every rank in this process with the
/// same configuration: this rank's results must be the same bits.
fn grad<B: Backend>(comm: &Comm<B>) -> Result<String>
where
    Comm<B>: GradBackend,
{
    let (k, me) = (comm.k(), comm.local_ranks().start);
    let lens = [1000usize, 10, 300_000, 77, 4096, 0, 65_536];
    let gc = GradConfig {
        bucket_bytes: 256 << 10,
        ..GradConfig::default()
    };
    let device = ms("RINGREDUCE_TEST_DEVICE").unwrap_or(0) as usize;
    let one = Comm::<B>::create(k, comm.config().clone().devices(vec![device; k]))?;
    let mut wrong = 0usize;
    for half in [false, true] {
        let run = |c: &Comm<B>, ranks: std::ops::Range<usize>| -> Result<Vec<Vec<Vec<f32>>>> {
            let mut sync = GradSync::new(c, gc.clone())?;
            let mut tensors = lens
                .iter()
                .enumerate()
                .map(|(t, &len)| {
                    ranks
                        .clone()
                        .map(|r| c.upload(r, &gradient(r, t, len)))
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            if half {
                sync.fused_all_reduce_half(&mut tensors, Precision::Bf16, true)?;
            } else {
                sync.fused_all_reduce(&mut tensors)?;
            }
            c.synchronize()?;
            tensors
                .iter()
                .map(|t| {
                    ranks
                        .clone()
                        .zip(t)
                        .map(|(r, b)| c.download(r, b))
                        .collect::<Result<Vec<_>>>()
                })
                .collect()
        };
        let across = run(comm, me..me + 1)?;
        let alone = run(&one, 0..k)?;
        for (t, (a, b)) in across.iter().zip(&alone).enumerate() {
            let (a, b) = (&a[0], &b[me]);
            let differ = a
                .iter()
                .zip(b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            if differ > 0 || a.len() != lens[t] {
                say(&format!("grad tensor {t} (half {half}): {differ} differ"));
            }
            wrong += differ + a.len().abs_diff(lens[t]);
        }
    }
    Ok(format!("ok {} {wrong}", 2 * lens.len()))
}

/// What `RINGREDUCE_TEST_JOB` asks of this rank.
fn act<B: Backend>(comm: &Comm<B>) -> Result<String>
where
    Comm<B>: GradBackend,
{
    let job = var("RINGREDUCE_TEST_JOB").unwrap_or_else(|| "matrix".into());
    let (mode, who) = match job.split_once(':') {
        Some((m, r)) => (m.to_string(), r.parse::<usize>().ok()),
        None => (job.clone(), None),
    };
    let me = comm.local_ranks().start;
    let forever = || loop {
        std::thread::sleep(Duration::from_secs(60));
    };
    // Large enough to be under way when a peer goes.
    let big = 1 << 20;
    match mode.as_str() {
        "join" => Ok("done".into()),
        "grad" => grad(comm),
        "matrix" => {
            let (mut n, mut wrong) = (0, 0);
            for case in cases(comm.k()) {
                let o = run_case(comm, &case)?;
                if o.wrong > 0 {
                    say(&format!("wrong {} {case:?}", o.wrong));
                }
                n += 1;
                wrong += o.wrong;
            }
            Ok(format!("ok {n} {wrong}"))
        }
        "loop" => {
            // All-reduces of RINGREDUCE_TEST_ELEMS f32 until one fails
            // (a peer is killed in the middle of one).
            let n = ms("RINGREDUCE_TEST_ELEMS").unwrap_or(1 << 20) as usize;
            say("looping");
            loop {
                all_reduce(comm, n)?;
            }
        }
        "stall" => {
            if Some(me) == who {
                forever()
            }
            all_reduce(comm, big).map(|()| "done".into())
        }
        "between" => {
            all_reduce(comm, big)?;
            say("first ok");
            if Some(me) == who {
                forever()
            }
            let go = var("RINGREDUCE_TEST_GO").expect("a go file");
            while !std::path::Path::new(&go).exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            all_reduce(comm, big).map(|()| "done".into())
        }
        "abort" => {
            if Some(me) == who {
                std::thread::sleep(Duration::from_millis(
                    ms("RINGREDUCE_TEST_ABORT_MS").unwrap_or(300),
                ));
                comm.abort();
                // Stay until the others have heard.
                std::thread::sleep(Duration::from_millis(1500));
                return Ok("aborted".into());
            }
            all_reduce(comm, big).map(|()| "done".into())
        }
        other => panic!("unknown job {other}"),
    }
}

fn run<B: Backend>() -> std::process::ExitCode
where
    Comm<B>: GradBackend,
{
    let t = Instant::now();
    let comm = match Comm::<B>::from_env(config()) {
        Ok(c) => c,
        Err(e) => {
            say(&format!("error {e:?} {}", t.elapsed().as_millis()));
            return std::process::ExitCode::from(2);
        }
    };
    let epoch_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    say(&format!("joined {epoch_ms}"));
    act_and_leave(comm, act)
}

/// One all-reduce of `n` elements of `T` on every rank of a hierarchical
/// job; the elements of this rank's output that differ from the reference.
fn hier_case<B: Backend, T: Gen>(comm: &HierComm<B>, n: usize, op: Op, seed: u64) -> Result<usize> {
    let (rank, world) = (comm.rank(), comm.nodes().world());
    let all = inputs::<T>(seed, world, n);
    let intra = comm.intra();
    let me = intra.local_ranks().start;
    let mut buf = intra.upload(me, &all[rank])?;
    comm.all_reduce(&mut buf, op)?;
    let got = intra.download(me, &buf)?;
    let refs: Vec<&[T]> = all.iter().map(|v| v.as_slice()).collect();
    let algorithm_for = |c, count| intra.algorithm_for::<T>(c, count).expect("an algorithm");
    let want = ringreduce::reference::hierarchical_all_reduce(
        &refs,
        comm.nodes(),
        algorithm_for,
        intra.ring_order(),
        op,
    );
    let bytes = |v: &[T]| bytemuck::cast_slice::<T, u8>(v).to_vec();
    let t = std::mem::size_of::<T>();
    let (g, w) = (bytes(&got), bytes(&want));
    Ok(g.chunks(t).zip(w.chunks(t)).filter(|(a, b)| a != b).count() + got.len().abs_diff(n))
}

/// A reduce-scatter (`op`) or, with `None`, an all-gather of `c`
/// elements per rank on every rank of a hierarchical job; the elements of
/// this rank's output that differ from the reference.
fn hier_rs_ag<B: Backend, T: Gen>(
    comm: &HierComm<B>,
    c: usize,
    op: Option<Op>,
    seed: u64,
) -> Result<usize> {
    let (rank, world) = (comm.rank(), comm.nodes().world());
    let intra = comm.intra();
    let me = intra.local_ranks().start;
    let send_len = if op.is_some() { world * c } else { c };
    let all = inputs::<T>(seed, world, send_len);
    let send = intra.upload(me, &all[rank])?;
    let recv_len = if op.is_some() { c } else { world * c };
    let poison = inputs::<T>(!seed, 1, recv_len).remove(0);
    let mut recv = intra.upload(me, &poison)?;
    let refs: Vec<&[T]> = all.iter().map(|v| v.as_slice()).collect();
    let want = match op {
        Some(op) => {
            comm.reduce_scatter(&send, &mut recv, op)?;
            let algo = intra.algorithm_for::<T>(Collective::ReduceScatter, c)?;
            let r = ringreduce::reference::hierarchical_reduce_scatter(
                &refs,
                comm.nodes(),
                algo,
                intra.ring_order(),
                op,
            );
            r[rank].clone()
        }
        None => {
            comm.all_gather(&send, &mut recv)?;
            refs.concat()
        }
    };
    let got = intra.download(me, &recv)?;
    let t = std::mem::size_of::<T>();
    let (g, w): (&[u8], &[u8]) = (bytemuck::cast_slice(&got), bytemuck::cast_slice(&want));
    Ok(g.chunks(t).zip(w.chunks(t)).filter(|(a, b)| a != b).count()
        + got.len().abs_diff(want.len()))
}

/// `hier`, `hier-grad`, `hier-fused-loop`, `hier-fused-abort:<r>` and
/// `hier-stall:<r>`.
fn hier<B: Backend>(comm: &HierComm<B>, mode: &str, who: Option<usize>) -> Result<String>
where
    HierComm<B>: GradBackend + Sync,
{
    if mode == "hier-grad" {
        let (nodes, rank) = (comm.nodes(), comm.rank());
        let g = ringreduce_tests::hier_cases::grad_cases(comm, nodes, rank)?;
        let r = ringreduce_tests::hier_cases::region_cases(comm, nodes, rank)?;
        for line in g.notes.iter().chain(&r.notes) {
            say(line);
        }
        return Ok(format!("ok {} {}", g.cases + r.cases, g.wrong + r.wrong));
    }
    if mode == "hier-fused-loop" {
        return hier_fused_loop(comm);
    }
    if mode == "hier-fused-abort" {
        // Rank `who` aborts from another thread while its own loop, like
        // every other rank's, has buckets in flight.
        return std::thread::scope(|s| {
            if Some(comm.rank()) == who {
                s.spawn(|| {
                    let after = ms("RINGREDUCE_TEST_ABORT_MS").unwrap_or(300);
                    std::thread::sleep(Duration::from_millis(after));
                    comm.abort();
                });
            }
            hier_fused_loop(comm)
        });
    }
    if mode == "hier-stall" {
        if Some(comm.rank()) == who {
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        return hier_case::<B, f32>(comm, 1 << 20, Op::Sum, 1).map(|w| format!("done {w}"));
    }
    let counts = [0usize, 1, 3, 8, 1000, 40_001];
    let (mut cases, mut wrong) = (0, 0);
    for (i, &n) in counts.iter().enumerate() {
        let seed = 7 << 32 | i as u64;
        let w = [
            hier_case::<B, f32>(comm, n, Op::Sum, seed)?,
            hier_case::<B, f32>(comm, n, Op::Avg, seed + 1)?,
            hier_case::<B, f64>(comm, n, Op::Min, seed + 2)?,
            hier_case::<B, i32>(comm, n, Op::Prod, seed + 3)?,
            hier_case::<B, u8>(comm, n, Op::Max, seed + 4)?,
            hier_case::<B, half::bf16>(comm, n, Op::Sum, seed + 5)?,
        ];
        for (j, x) in w.iter().enumerate() {
            if *x > 0 {
                say(&format!("wrong {x} (count {n}, case {j})"));
            }
        }
        cases += w.len();
        wrong += w.iter().sum::<usize>();
    }
    for (i, &c) in [0usize, 1, 3, 1000].iter().enumerate() {
        let seed = 9 << 32 | i as u64;
        let w = [
            hier_rs_ag::<B, f32>(comm, c, Some(Op::Sum), seed)?,
            hier_rs_ag::<B, f32>(comm, c, Some(Op::Avg), seed + 1)?,
            hier_rs_ag::<B, i32>(comm, c, Some(Op::Max), seed + 2)?,
            hier_rs_ag::<B, half::bf16>(comm, c, Some(Op::Sum), seed + 3)?,
            hier_rs_ag::<B, f64>(comm, c, None, seed + 4)?,
            hier_rs_ag::<B, u8>(comm, c, None, seed + 5)?,
        ];
        for (j, x) in w.iter().enumerate() {
            if *x > 0 {
                say(&format!(
                    "wrong {x} (block {c}, reduce-scatter/all-gather case {j})"
                ));
            }
        }
        cases += w.len();
        wrong += w.iter().sum::<usize>();
    }
    Ok(format!("ok {cases} {wrong}"))
}

/// `hier-fused-loop`: fused all-reduces of one list in seven buckets, one
/// call after another until one fails, so that a rank killed at any
/// moment is most likely killed with two buckets in flight (a job across
/// nodes begins a bucket's step between nodes before it ends the one
/// before). Prints `looping` before the first call.
fn hier_fused_loop<B: Backend>(comm: &HierComm<B>) -> Result<String>
where
    HierComm<B>: GradBackend,
{
    let rank = comm.rank();
    // 64 Ki elements a bucket; every tensor fits one, so all are packed.
    let lens = [
        40_000usize,
        24_000,
        1000,
        65_536,
        30_000,
        30_000,
        7,
        50_000,
        60_000,
        9_000,
        64_000,
    ];
    let cfg = GradConfig {
        bucket_bytes: 256 << 10,
        ..GradConfig::default()
    };
    let buckets = ringreduce::grad::bucket::plan(&lens, cfg.bucket_bytes / 4);
    let packed = |b: &Bucket| matches!(b, Bucket::Packed { .. });
    assert!(
        buckets.len() == 7 && buckets.iter().all(packed),
        "{buckets:?}"
    );
    let mut sync = GradSync::new(comm, cfg)?;
    let data: Vec<Vec<f32>> = lens
        .iter()
        .enumerate()
        .map(|(t, &n)| gradient(rank, t, n))
        .collect();
    say("looping");
    // Bounded, so that a kill that never comes ends the job rather than
    // the test's patience.
    for _ in 0..100_000 {
        let mut tensors = data
            .iter()
            .map(|d| Ok(vec![comm.upload(rank, d)?]))
            .collect::<Result<Vec<_>>>()?;
        if let Err(e) = sync.fused_all_reduce(&mut tensors) {
            // The communicator is broken: the next call fails at once.
            let t = Instant::now();
            let next = sync.fused_all_reduce(&mut tensors);
            say(&format!(
                "next {:?} {}",
                next.err(),
                t.elapsed().as_millis()
            ));
            return Err(e);
        }
    }
    Ok("done".into())
}

/// A rank of a hierarchical job joined from the launcher's variables
/// (`HierComm::from_env`), on the device `RINGREDUCE_TEST_DEVICE` names
/// (else the local rank's) for GPU ranks.
fn run_hier<B: Backend>(mode: &str, who: Option<usize>) -> std::process::ExitCode
where
    HierComm<B>: GradBackend + Sync,
{
    let t = Instant::now();
    let comm = match HierComm::<B>::from_env(config()) {
        Ok(c) => c,
        Err(e) => {
            say(&format!("error {e:?} {}", t.elapsed().as_millis()));
            return std::process::ExitCode::from(2);
        }
    };
    say("joined");
    act_and_leave(comm, |c| hier(c, mode, who))
}

/// Runs `act` on the joined `comm` and prints how it ended (its line, or
/// `error <error> <ms>`), then drops `comm` and prints `left`: the exit
/// code is 0 or 2.
fn act_and_leave<C>(comm: C, act: impl FnOnce(&C) -> Result<String>) -> std::process::ExitCode {
    let t = Instant::now();
    let code = match act(&comm) {
        Ok(line) => {
            say(&line);
            0
        }
        Err(e) => {
            say(&format!("error {e:?} {}", t.elapsed().as_millis()));
            2
        }
    };
    drop(comm);
    say("left");
    std::process::ExitCode::from(code)
}

fn main() -> std::process::ExitCode {
    let job = var("RINGREDUCE_TEST_JOB").unwrap_or_default();
    if job.starts_with("hier") {
        let (mode, who) = match job.split_once(':') {
            Some((m, r)) => (m.to_string(), r.parse::<usize>().ok()),
            None => (job.clone(), None),
        };
        return if var("RINGREDUCE_TEST_GPU").is_some() {
            run_hier::<GpuBackend>(&mode, who)
        } else {
            run_hier::<CpuBackend>(&mode, who)
        };
    }
    if var("RINGREDUCE_TEST_GPU").is_some() {
        run::<GpuBackend>()
    } else {
        run::<CpuBackend>()
    }
}
