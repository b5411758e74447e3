//! The domain's plain types: which collective, which algorithm, which
//! element type, which operator and which memory scope. Every other module
//! of the crate, and the host, names them; this one imports nothing, so it
//! sits at the root of the crate's tree.

/// How far a flag store or acquire must reach. Ranks that share one GPU
/// need only its L2 ([`Scope::Gpu`]); a peer on another GPU or the host needs
/// [`Scope::Sys`]. The narrower scope is cheaper because the control lane's
/// fence before each signal is on the path that releases the producers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Gpu,
    Sys,
}

/// The collectives the ring engine runs. The value travels in
/// `Work::collective`.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    /// Each rank gets the reduction of its own block of everyone's input.
    ReduceScatter = 0,
    /// Each rank gets every rank's input, in user-rank order.
    AllGather = 1,
    /// Each rank gets the reduction of everyone's input.
    AllReduce = 2,
}

/// Asserts at compile time that `$t::ALL[v]` has value `v`, which the
/// enums' `from_u64` and its tests rely on.
macro_rules! all_in_value_order {
    ($t:ty) => {
        const _: () = {
            let mut i = 0;
            while i < <$t>::ALL.len() {
                assert!(<$t>::ALL[i] as usize == i);
                i += 1;
            }
        };
    };
}
pub(crate) use all_in_value_order;

all_in_value_order!(Collective);
all_in_value_order!(Algorithm);

impl Collective {
    /// Every value, in discriminant order (so `ALL[v]` has value `v`).
    pub const ALL: [Collective; 3] = [
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::AllReduce,
    ];

    /// A match rather than `ALL.get(v)`: on the GPU a table is a global
    /// load at the head of every kernel, 13% of a small call's warp
    /// samples (`bench/NOTES.md`, 2026-12-05: where a small local call's kernel time went).
    pub fn from_u64(v: u64) -> Option<Self> {
        match v {
            0 => Some(Collective::ReduceScatter),
            1 => Some(Collective::AllGather),
            2 => Some(Collective::AllReduce),
            _ => None,
        }
    }

    /// The collective's bit in a set of collectives (a mask, such as an
    /// entry's compile-time set, see `crate::catalogue`).
    pub const fn bit(self) -> u64 {
        1 << self as u64
    }

    /// [`Collective::from_u64`], if the collective is in `set` (a mask of
    /// [`Collective::bit`]s). An entry passes its constant set, so the
    /// compiler drops the code of every collective outside it.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    pub fn from_u64_in(v: u64, set: u64) -> Option<Self> {
        match v {
            0 if set & Collective::ReduceScatter.bit() != 0 => Some(Collective::ReduceScatter),
            1 if set & Collective::AllGather.bit() != 0 => Some(Collective::AllGather),
            2 if set & Collective::AllReduce.bit() != 0 => Some(Collective::AllReduce),
            _ => None,
        }
    }

    /// The (send, recv) lengths of one rank for a count of `n` on `k`
    /// ranks: NCCL's shapes.
    pub const fn lengths(self, k: u64, n: u64) -> (u64, u64) {
        match self {
            Collective::ReduceScatter => (k * n, n),
            Collective::AllGather => (n, k * n),
            Collective::AllReduce => (n, n),
        }
    }

    /// Where rank `rank`'s input and output start, in elements, in its
    /// in-place buffer (which is as long as the longer of the two): NCCL's
    /// in-place layouts.
    pub const fn in_place_offsets(self, rank: u64, n: u64) -> (u64, u64) {
        match self {
            Collective::ReduceScatter => (0, rank * n),
            Collective::AllGather => (rank * n, 0),
            Collective::AllReduce => (0, 0),
        }
    }

    /// The name the bench and the errors use.
    pub const fn name(self) -> &'static str {
        match self {
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllGather => "all-gather",
            Collective::AllReduce => "all-reduce",
        }
    }
}

/// How a collective moves its data. The value travels in
/// `Work::algorithm`.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// The ring: `k - 1` (or `2k - 2`) neighbour steps through staging,
    /// for bandwidth.
    Ring = 0,
    /// Direct, one shot: every rank stages its input where every peer can
    /// read it, raises one flag, then reads what it needs from all peers
    /// and folds it in user-rank order: one round of flags, for latency.
    OneShot = 1,
    /// Direct, two shots (all-reduce only): a direct reduce-scatter whose
    /// blocks each rank then reads from its peers: two rounds of flags,
    /// and each rank reads `2n` instead of `k n`.
    TwoShot = 2,
    /// Local: every rank on one device, in one launch. Each block reads
    /// its share of every rank's input and writes every rank's output
    /// itself: no staging and no flags, since the launch already follows
    /// every rank's stream and precedes it again. Folds in user-rank order,
    /// as the direct algorithms do.
    Local = 3,
}

impl Algorithm {
    /// Every value, in discriminant order (so `ALL[v]` has value `v`).
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Ring,
        Algorithm::OneShot,
        Algorithm::TwoShot,
        Algorithm::Local,
    ];

    /// A match, as [`Collective::from_u64`] is.
    pub fn from_u64(v: u64) -> Option<Self> {
        match v {
            0 => Some(Algorithm::Ring),
            1 => Some(Algorithm::OneShot),
            2 => Some(Algorithm::TwoShot),
            3 => Some(Algorithm::Local),
            _ => None,
        }
    }

    /// The name the bench, the environment variable and the errors use.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::OneShot => "one-shot",
            Algorithm::TwoShot => "two-shot",
            Algorithm::Local => "local",
        }
    }
}

/// The element types of a collective.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    Bf16,
    F32,
    F64,
}

impl DataType {
    pub const ALL: [DataType; 10] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::Bf16,
        DataType::F32,
        DataType::F64,
    ];

    /// Short name, as in kernel entry names and the nccl-tests tables.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::I32 => "int32",
            DataType::U32 => "uint32",
            DataType::I64 => "int64",
            DataType::U64 => "uint64",
            DataType::F16 => "half",
            DataType::Bf16 => "bfloat16",
            DataType::F32 => "float",
            DataType::F64 => "double",
        }
    }

    pub const fn size(self) -> u64 {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::Bf16 | DataType::F32 | DataType::F64
        )
    }
}

/// The reduction operators of a collective.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Sum, Op::Prod, Op::Max, Op::Min, Op::Avg];

    pub const fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Max => "max",
            Op::Min => "min",
            Op::Avg => "avg",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_round_trip() {
        for c in Collective::ALL {
            assert_eq!(Collective::from_u64(c as u64), Some(c));
        }
        assert_eq!(Collective::from_u64(3), None);
        for c in Collective::ALL {
            let all = Collective::ALL.iter().fold(0, |m, c| m | c.bit());
            assert_eq!(Collective::from_u64_in(c as u64, all), Some(c));
            let others = all & !c.bit();
            assert_eq!(Collective::from_u64_in(c as u64, others), None);
        }
        assert_eq!(Collective::from_u64(u64::MAX), None);
    }

    #[test]
    fn algorithms_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_u64(a as u64), Some(a));
        }
        assert_eq!(Algorithm::from_u64(Algorithm::ALL.len() as u64), None);
        assert_eq!(Algorithm::from_u64(1 << 32), None);
    }
}
