//! What a bench run measured, as written to JSON (`-J`).

use serde::{Deserialize, Serialize};

/// Bumped when a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 2;

/// One placement's figures in a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Perf {
    /// Average time per collective, µs.
    pub time_us: f64,
    /// GB/s (10^9 bytes).
    pub algbw: f64,
    pub busbw: f64,
    /// Wrong elements; `None` when not checked.
    pub wrong: Option<u64>,
    /// busbw over the ceiling the row is judged against (single-block copy
    /// bandwidth for ringreduce, device copy bandwidth for NCCL).
    pub busbw_vs_ceiling: Option<f64>,
    /// The least memory traffic the collective needs per second, over
    /// what the device-wide copy moves per second (see
    /// `metrics::vs_device_copy`); 1.0 is the memory's limit.
    #[serde(default)]
    pub vs_device_copy: Option<f64>,
    /// Host time to enqueue one collective, µs (launched rows only): when
    /// it is close to `time_us`, the row is bound by the host, not the GPU.
    #[serde(default)]
    pub host_us: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// nccl-tests' name of the collective.
    #[serde(default)]
    pub collective: String,
    /// nccl-tests' size in bytes (see `metrics::count_for`).
    pub size: u64,
    /// The collective's count.
    pub count: u64,
    pub dtype: String,
    pub op: String,
    pub root: i32,
    /// Channels per rank the call ran.
    #[serde(default)]
    pub channels: u64,
    /// The algorithm the call ran: `ring`, `one-shot`, `two-shot` (or
    /// `nccl` for NCCL's rows).
    #[serde(default)]
    pub algorithm: String,
    /// What ran it (`--backend`): `ringreduce`, `nccl` or `hier`.
    #[serde(default = "ringreduce")]
    pub backend: String,
    pub out_of_place: Perf,
    pub in_place: Perf,
}

/// The backend of rows from before `--backend`.
fn ringreduce() -> String {
    "ringreduce".into()
}

/// Ceilings, measured in the same process before the sweep. Copy bandwidths
/// count the bytes copied once (read and write traffic is twice that).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// The device's copy bandwidth, GB/s: the faster of the two forms below,
    /// so that the collectives are judged against the best copy measured.
    pub device_copy_gbps: f64,
    /// The copy kernel over one resident wave of blocks, GB/s (0 in reports
    /// from before it was measured apart).
    #[serde(default)]
    pub device_copy_kernel_gbps: f64,
    /// The blocks that wave had: occupancy times multiprocessors.
    #[serde(default)]
    pub device_copy_blocks: u32,
    /// The driver's device-to-device copy (`cuMemcpyDtoDAsync`), GB/s.
    #[serde(default)]
    pub device_copy_driver_gbps: f64,
    /// One block of `BLOCK_THREADS` with the reduce-scatter's copy loop: the
    /// ceiling of one-block mode, GB/s.
    pub block_copy_gbps: f64,
    /// One block of `BLOCK_THREADS` with the reduce-scatter's reduce loop (two
    /// inputs, one output, `f32` sum), counting output bytes: the ceiling of
    /// a middle ring step, GB/s.
    pub block_reduce_gbps: f64,
    /// Round trip of one flag signal between two blocks, µs.
    pub pingpong_rtt_us: f64,
    /// Per launch, µs, of back-to-back launches of a one-block kernel with
    /// nothing to do, timed as the sweeps are (events around the
    /// iterations): the floor of any collective that is one launch (0 in
    /// reports from before it was measured).
    #[serde(default)]
    pub launch_us: f64,
    /// The host's part of it: the host clock around the same launches, µs
    /// per launch.
    #[serde(default)]
    pub launch_host_us: f64,
    /// The same for the local `f32` sum entry with no ranks, on eight
    /// blocks: a small local call's launch, without the library around it.
    #[serde(default)]
    pub local_launch_us: f64,
    #[serde(default)]
    pub local_launch_host_us: f64,
    /// Bytes used for the copy measurements.
    pub copy_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    pub tool: String,
    pub version: String,
    pub command_line: Vec<String>,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// `gpu` or `cpu` (the CPU execution: not GPU figures).
    pub execution: String,
    pub device: String,
    pub driver_version: String,
    /// What the kernels were loaded from: `SASS sm_90` (embedded at build
    /// time) or `PTX (driver JIT)`; `-` for the CPU execution.
    #[serde(default)]
    pub kernels: String,
    pub collective: String,
    pub ranks: usize,
    pub iters: usize,
    pub warmup: usize,
    /// `--repeats`: timed windows per size, the median reported.
    #[serde(default = "one")]
    pub repeats: u64,
    pub blocking: bool,
    /// `--graph`: each size's iterations were one CUDA graph replay.
    #[serde(default)]
    pub graph: bool,
    /// Staging bytes per channel.
    pub buffsize: u64,
    /// `-C`: the channels asked for (`None`: automatic).
    #[serde(default)]
    pub channels: Option<u32>,
    /// `--algo`: the algorithm asked for (`auto` chooses per size).
    #[serde(default)]
    pub algorithm: String,
    pub ring_order: Vec<u32>,
    /// The GPU of each user rank (one per GPU, or all on GPU 0 as virtual
    /// ranks); empty for the CPU execution.
    #[serde(default)]
    pub devices: Vec<usize>,
    /// The prefetch distance in unrolled rounds (0: off).
    #[serde(default)]
    pub prefetch_rounds: u64,
    /// Processes the ranks ran in: 1, or one per rank (`--procs`, or a
    /// launcher's job).
    #[serde(default = "one_proc")]
    pub processes: usize,
    pub ceilings: Option<Ceilings>,
    pub rows: Vec<Row>,
    /// The same sweep through NCCL, when it ran.
    pub nccl_rows: Vec<Row>,
    pub nccl_note: Option<String>,
    pub out_of_bounds: u64,
    pub avg_busbw: f64,
    /// With `--rematch`: `Auto` and the fastest forced algorithm at each
    /// size, timed again in alternating windows (see `crate::rematch`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub auto_rematch: Vec<AutoVsBest>,
}

/// Seconds since the epoch as an ISO-8601 UTC timestamp.
pub fn iso_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn now_iso() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    iso_utc(s)
}

/// Reports from before `--repeats` timed one window.
fn one() -> u64 {
    1
}

fn one_proc() -> usize {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso_utc(1_796_212_800), "2026-12-02T12:00:00Z");
    }
}

/// How much slower `Auto` is than the fastest forced algorithm, for rows
/// of one collective and size (times are the mean of both placements).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoVsBest {
    pub collective: String,
    pub size: u64,
    /// The forced algorithm that was fastest, and its time (µs).
    pub best: String,
    pub best_us: f64,
    /// What `Auto` ran, and its time (µs).
    pub auto: String,
    pub auto_us: f64,
    /// The sweeps (indices into `per_algo`) the two rows came from, so
    /// that they can be timed again on the same communicators.
    #[serde(skip)]
    pub sweeps: (usize, usize),
}

impl AutoVsBest {
    pub fn ratio(&self) -> f64 {
        self.auto_us / self.best_us
    }
}
