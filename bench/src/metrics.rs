//! Sizes, counts and bandwidths, with nccl-tests' definitions, and the
//! least memory traffic each collective needs.

use ringreduce::Collective;

/// `--collective`: one collective, or all three in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CollectiveArg {
    ReduceScatter,
    AllGather,
    AllReduce,
    All,
    /// The gradient layer's fused all-reduce (`bench::grad`).
    Fused,
    /// Its half-precision all-reduce.
    Half,
    /// Its sparse all-reduce.
    Sparse,
}

impl CollectiveArg {
    /// The collectives a run sweeps, in this order.
    pub fn collectives(self) -> Vec<Collective> {
        match self {
            CollectiveArg::ReduceScatter => vec![Collective::ReduceScatter],
            CollectiveArg::AllGather => vec![Collective::AllGather],
            CollectiveArg::AllReduce => vec![Collective::AllReduce],
            CollectiveArg::All => Collective::ALL.to_vec(),
            CollectiveArg::Fused | CollectiveArg::Half | CollectiveArg::Sparse => Vec::new(),
        }
    }

    /// Whether it names a row of the gradient layer.
    pub fn is_grad(self) -> bool {
        matches!(
            self,
            CollectiveArg::Fused | CollectiveArg::Half | CollectiveArg::Sparse
        )
    }

    /// The name in the report: nccl-tests' for one collective, or "all".
    pub fn name(self) -> &'static str {
        match self {
            CollectiveArg::All => "all",
            CollectiveArg::Fused => "fused",
            CollectiveArg::Half => "half",
            CollectiveArg::Sparse => "sparse",
            CollectiveArg::ReduceScatter => name(Collective::ReduceScatter),
            CollectiveArg::AllGather => name(Collective::AllGather),
            CollectiveArg::AllReduce => name(Collective::AllReduce),
        }
    }
}

/// nccl-tests' name of a collective (`reduce_scatter`, ...).
pub fn name(c: Collective) -> &'static str {
    match c {
        Collective::ReduceScatter => "reduce_scatter",
        Collective::AllGather => "all_gather",
        Collective::AllReduce => "all_reduce",
    }
}

/// busbw / algbw, nccl-tests' factors: each rank moves (k-1)/k of the data
/// over the slowest link for reduce-scatter and all-gather, twice that for
/// all-reduce.
pub fn bus_factor(c: Collective, k: usize) -> f64 {
    if k == 0 {
        return 0.0;
    }
    let f = (k as f64 - 1.0) / k as f64;
    match c {
        Collective::AllReduce => 2.0 * f,
        _ => f,
    }
}

/// The count for a `size` column value: the reduce-scatter's recvcount
/// (size is the per-rank input), the all-gather's sendcount (size is the
/// per-rank output), the all-reduce's count (size is the buffer).
pub fn count_for(c: Collective, size_bytes: u64, type_size: u64, k: usize) -> u64 {
    match c {
        Collective::AllReduce => size_bytes / type_size,
        _ => size_bytes / type_size / k.max(1) as u64,
    }
}

/// The `size` column for a count: the bytes the bandwidths divide by
/// (nccl-tests prints and uses this too).
pub fn bytes_for(c: Collective, count: u64, type_size: u64, k: usize) -> u64 {
    match c {
        Collective::AllReduce => count * type_size,
        _ => count * type_size * k as u64,
    }
}

/// The least memory traffic of one rank: every input element read once
/// and every output element written once, in bytes.
pub fn min_traffic(c: Collective, count: u64, type_size: u64, k: usize) -> u64 {
    let n = count * type_size;
    let k = k as u64;
    match c {
        Collective::ReduceScatter => k * n + n,
        Collective::AllGather => n + k * n,
        Collective::AllReduce => 2 * n,
    }
}

/// Algorithm bandwidth in GB/s (10^9 bytes): bytes over seconds.
pub fn algbw(bytes: u64, time_us: f64) -> f64 {
    if time_us <= 0.0 {
        0.0
    } else {
        bytes as f64 / time_us / 1e3
    }
}

pub fn busbw(c: Collective, k: usize, bytes: u64, time_us: f64) -> f64 {
    algbw(bytes, time_us) * bus_factor(c, k)
}

/// The traffic the collective needs on one device (`ranks_here` ranks'
/// worth) per second, over what the device-wide copy moves per second
/// (it reads and writes `copy_gbps` each): 1.0 is the memory's limit.
pub fn vs_device_copy(
    c: Collective,
    count: u64,
    type_size: u64,
    k: usize,
    ranks_here: usize,
    time_us: f64,
    copy_gbps: f64,
) -> Option<f64> {
    if time_us <= 0.0 || copy_gbps <= 0.0 {
        return None;
    }
    let traffic = min_traffic(c, count, type_size, k) * ranks_here as u64;
    Some(algbw(traffic, time_us) / (2.0 * copy_gbps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn against_hand_computed_values() {
        // 256 MiB in 10 ms: 26.8435456 GB/s.
        let b = 256u64 << 20;
        let rs = Collective::ReduceScatter;
        assert!((algbw(b, 10_000.0) - 26.843_545_6).abs() < 1e-9);
        // k = 4: times 3/4.
        assert!((busbw(rs, 4, b, 10_000.0) - 20.132_659_2).abs() < 1e-9);
        // k = 8: times 7/8; 1 GB in 1 s is 1 GB/s algbw.
        assert!((busbw(rs, 8, 1_000_000_000, 1e6) - 0.875).abs() < 1e-12);
        assert!((busbw(Collective::AllGather, 8, 1_000_000_000, 1e6) - 0.875).abs() < 1e-12);
        assert!((busbw(Collective::AllReduce, 8, 1_000_000_000, 1e6) - 1.75).abs() < 1e-12);
        assert_eq!(busbw(rs, 1, b, 5.0), 0.0);
        assert_eq!(algbw(b, 0.0), 0.0);
        // 8 bytes of float over 4 ranks: count 0; 32 bytes: count 2.
        assert_eq!(count_for(rs, 8, 4, 4), 0);
        assert_eq!(count_for(rs, 32, 4, 4), 2);
        assert_eq!(bytes_for(rs, 2, 4, 4), 32);
        assert_eq!(count_for(Collective::AllGather, 32, 4, 4), 2);
        assert_eq!(bytes_for(Collective::AllGather, 2, 4, 4), 32);
        assert_eq!(count_for(Collective::AllReduce, 32, 4, 4), 8);
        assert_eq!(bytes_for(Collective::AllReduce, 8, 4, 4), 32);
    }

    #[test]
    fn device_copy_ratio_counts_reads_and_writes() {
        // All-reduce of 1 GB per rank on 8 virtual ranks in 1 s: 16 GB of
        // traffic; a device copy of 8 GB/s moves 16 GB/s: ratio 1.
        let r = vs_device_copy(Collective::AllReduce, 250_000_000, 4, 8, 8, 1e6, 8.0).unwrap();
        assert!((r - 1.0).abs() < 1e-12);
        // Reduce-scatter of count n reads k n and writes n per rank.
        assert_eq!(min_traffic(Collective::ReduceScatter, 10, 4, 4), 200);
        assert_eq!(min_traffic(Collective::AllGather, 10, 4, 4), 200);
        assert_eq!(
            vs_device_copy(Collective::AllReduce, 1, 4, 2, 2, 0.0, 1.0),
            None
        );
    }
}
