//! Bandwidth formulas, with nccl-tests' definitions.

/// The collectives the runner knows. Only reduce-scatter exists today; the
/// others will get their factors here.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    ReduceScatter,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::ReduceScatter => "reduce_scatter",
        }
    }

    /// busbw / algbw: for reduce-scatter each rank sends (k-1)/k of its
    /// input over the slowest link.
    pub fn bus_factor(self, k: usize) -> f64 {
        match self {
            Collective::ReduceScatter => {
                if k == 0 {
                    0.0
                } else {
                    (k as f64 - 1.0) / k as f64
                }
            }
        }
    }

    /// nccl-tests' `size` column for reduce-scatter is the per-rank input and
    /// `count` is `recvcount`: `size / (type size * k)`, rounded down.
    pub fn count_for(self, size_bytes: u64, type_size: u64, k: usize) -> u64 {
        match self {
            Collective::ReduceScatter => size_bytes / type_size / k.max(1) as u64,
        }
    }

    /// The bytes actually moved per rank for a count, which is what the
    /// bandwidths divide by (nccl-tests prints and uses this too).
    pub fn bytes_for(self, count: u64, type_size: u64, k: usize) -> u64 {
        match self {
            Collective::ReduceScatter => count * type_size * k as u64,
        }
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

pub fn busbw(coll: Collective, k: usize, bytes: u64, time_us: f64) -> f64 {
    algbw(bytes, time_us) * coll.bus_factor(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn against_hand_computed_values() {
        // 256 MiB in 10 ms: 26.8435456 GB/s.
        let b = 256u64 << 20;
        assert!((algbw(b, 10_000.0) - 26.843_545_6).abs() < 1e-9);
        // k = 4: times 3/4.
        assert!((busbw(Collective::ReduceScatter, 4, b, 10_000.0) - 20.132_659_2).abs() < 1e-9);
        // k = 8: times 7/8; 1 GB in 1 s is 1 GB/s algbw.
        assert!((busbw(Collective::ReduceScatter, 8, 1_000_000_000, 1e6) - 0.875).abs() < 1e-12);
        assert_eq!(busbw(Collective::ReduceScatter, 1, b, 5.0), 0.0);
        assert_eq!(algbw(b, 0.0), 0.0);
        // 8 bytes of float over 4 ranks: count 0; 32 bytes: count 2.
        assert_eq!(Collective::ReduceScatter.count_for(8, 4, 4), 0);
        assert_eq!(Collective::ReduceScatter.count_for(32, 4, 4), 2);
        assert_eq!(Collective::ReduceScatter.bytes_for(2, 4, 4), 32);
    }
}
