//! Which algorithm a collective runs: the user's choice, the automatic
//! rule, and what a direct algorithm needs of the direct staging. Pure
//! functions, shared by both communicators' planner.

use crate::error::{Error, Result};
use ringreduce_kernels::plan::PACK_BYTES;
use ringreduce_kernels::types::{Algorithm, Collective};

/// Overrides [`crate::CommConfig::algorithm`] when the config leaves it
/// unset: `auto`, `ring`, `one-shot`, `two-shot` or `local`.
pub const ALGO_ENV: &str = "RINGREDUCE_ALGO";

/// Bytes of each of the two halves of a rank's direct staging when the
/// config does not say: room for everything [`choose`]'s `Auto` sends
/// direct (a 4 MiB all-gather input, a 4 MiB two-shot all-reduce and its
/// reduced blocks).
pub const DEFAULT_DIRECT_HALF_BYTES: u64 = 8 << 20;

// `Auto`'s thresholds, in bytes of one rank's input, from the H200 latency
// sweeps at k = 2, 4 and 8 virtual ranks (`bench/NOTES.md`, 2026-12-04,
// 2026-12-04, direct collectives and one launch): each is the last size where the direct form was the
// fastest, or within 10% of it.

/// Direct reduce-scatter up to here.
pub const AUTO_RS_DIRECT_MAX: u64 = 2 << 20;
/// Direct all-gather up to here.
pub const AUTO_AG_DIRECT_MAX: u64 = 4 << 20;
/// All-reduce on more than two ranks: one-shot up to here...
pub const AUTO_AR_ONE_SHOT_MAX: u64 = 64 << 10;
/// ...then two-shot up to here.
pub const AUTO_AR_TWO_SHOT_MAX: u64 = 4 << 20;
/// All-reduce on two ranks: one-shot up to here (the second shot only adds
/// a phase there).
pub const AUTO_AR_PAIR_ONE_SHOT_MAX: u64 = 2 << 20;

/// What `Auto` picks for collective `c` with `in_bytes` of input per rank
/// on `k` ranks, if the direct staging holds it.
pub fn auto_pick(c: Collective, k: u64, in_bytes: u64) -> Algorithm {
    match c {
        Collective::ReduceScatter if in_bytes <= AUTO_RS_DIRECT_MAX => Algorithm::OneShot,
        Collective::AllGather if in_bytes <= AUTO_AG_DIRECT_MAX => Algorithm::OneShot,
        Collective::AllReduce if k <= 2 && in_bytes <= AUTO_AR_PAIR_ONE_SHOT_MAX => {
            Algorithm::OneShot
        }
        Collective::AllReduce if k > 2 && in_bytes <= AUTO_AR_ONE_SHOT_MAX => Algorithm::OneShot,
        Collective::AllReduce if k > 2 && in_bytes <= AUTO_AR_TWO_SHOT_MAX => Algorithm::TwoShot,
        _ => Algorithm::Ring,
    }
}

/// The algorithm a communicator is asked to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algo {
    /// By placement, collective and size: local when one launch runs every
    /// rank; otherwise direct for small messages and the ring beyond.
    #[default]
    Auto,
    /// Always the ring.
    Ring,
    /// Always direct, one shot.
    OneShot,
    /// Always direct; two shots for all-reduce. Reduce-scatter and
    /// all-gather have one direct form, which this runs.
    TwoShot,
    /// Always local ([`Algorithm::Local`]): only for communicators whose
    /// ranks one launch runs (every rank on one device, at most
    /// [`BATCH_RANKS`](ringreduce_kernels::abi::BATCH_RANKS) of them).
    Local,
}

impl Algo {
    /// Every choice, for tests and the bench.
    pub const ALL: [Algo; 5] = [
        Algo::Auto,
        Algo::Ring,
        Algo::OneShot,
        Algo::TwoShot,
        Algo::Local,
    ];

    /// The name [`ALGO_ENV`] and the bench's `--algo` take.
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::Ring => "ring",
            Algo::OneShot => "one-shot",
            Algo::TwoShot => "two-shot",
            Algo::Local => "local",
        }
    }

    /// Parses a [`Algo::name`].
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        Algo::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::UnknownAlgorithm(s.to_string()))
    }
}

/// Bytes of one rank's input, or `None` on overflow.
fn input_bytes(c: Collective, k: u64, n: u64, size: u64) -> Option<u64> {
    let len = match c {
        Collective::ReduceScatter => k.checked_mul(n)?,
        Collective::AllGather | Collective::AllReduce => n,
    };
    len.checked_mul(size)
}

/// Where a direct call's parts lie in a staging half: the staged input,
/// then (two-shot) the reduced blocks at `result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectLayout {
    /// Byte offset of the reduced blocks in a half.
    pub result: u64,
    /// Bytes of a half the call uses.
    pub need: u64,
}

/// The direct layout of collective `c` with `n` elements per block of
/// `size` bytes on `k` ranks, blocks of `block_elems` (one pack of slack
/// each for the residue), or `None` on overflow.
pub fn direct_layout(
    c: Collective,
    alg: Algorithm,
    k: u64,
    n: u64,
    block_elems: u64,
    size: u64,
) -> Option<DirectLayout> {
    let input = input_bytes(c, k, n, size)?.checked_add(PACK_BYTES)?;
    let result = input.checked_next_multiple_of(256)?;
    let reduced = if alg == Algorithm::TwoShot && c == Collective::AllReduce {
        block_elems.checked_mul(size)?.checked_add(PACK_BYTES)?
    } else {
        0
    };
    Some(DirectLayout {
        result,
        need: result.checked_add(reduced)?,
    })
}

/// What a communicator can run besides the ring, for [`choose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Paths {
    /// Bytes each half of the direct staging holds (0: no direct staging).
    pub direct_half: u64,
    /// One launch runs every rank, so the local algorithm can run.
    pub local: bool,
}

/// The algorithm of one call: `choice`, or for `Auto` local where it can
/// run and otherwise the rule above. A forced choice the communicator
/// cannot run is an error, not a silent ring.
pub fn choose(
    c: Collective,
    choice: Algo,
    k: u64,
    n: u64,
    block_elems: u64,
    size: u64,
    paths: Paths,
) -> Result<Algorithm> {
    let half = paths.direct_half;
    let fits = |alg| {
        direct_layout(c, alg, k, n, block_elems, size).is_some_and(|l| half > 0 && l.need <= half)
    };
    let forced = |alg: Algorithm| {
        if fits(alg) {
            Ok(alg)
        } else {
            Err(Error::DirectTooLarge {
                collective: c.name(),
                algorithm: alg.name(),
                need: direct_layout(c, alg, k, n, block_elems, size).map_or(u64::MAX, |l| l.need),
                have: half,
            })
        }
    };
    let two = if c == Collective::AllReduce {
        Algorithm::TwoShot
    } else {
        Algorithm::OneShot
    };
    match choice {
        Algo::Ring => Ok(Algorithm::Ring),
        Algo::OneShot => forced(Algorithm::OneShot),
        Algo::TwoShot => forced(two),
        Algo::Local if paths.local => Ok(Algorithm::Local),
        Algo::Local => Err(Error::LocalUnavailable { k: k as usize }),
        Algo::Auto if paths.local => Ok(Algorithm::Local),
        Algo::Auto => {
            let in_bytes = input_bytes(c, k, n, size).unwrap_or(u64::MAX);
            let pick = auto_pick(c, k, in_bytes);
            Ok(if pick == Algorithm::Ring || fits(pick) {
                pick
            } else {
                Algorithm::Ring
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Algo::ALL {
            assert_eq!(Algo::parse(a.name()).unwrap(), a);
        }
        assert_eq!(Algo::parse(" One-Shot ").unwrap(), Algo::OneShot);
        assert!(matches!(Algo::parse("tree"), Err(Error::UnknownAlgorithm(s)) if s == "tree"));
    }

    #[test]
    fn auto_goes_direct_for_small_messages_only() {
        let half = Paths {
            direct_half: DEFAULT_DIRECT_HALF_BYTES,
            local: false,
        };
        let ar = |n| {
            choose(
                Collective::AllReduce,
                Algo::Auto,
                8,
                n,
                n.div_ceil(8),
                4,
                half,
            )
        };
        assert_eq!(ar(2).unwrap(), Algorithm::OneShot);
        assert_eq!(ar(16 << 10).unwrap(), Algorithm::OneShot);
        assert_eq!(ar(64 << 10).unwrap(), Algorithm::TwoShot);
        assert_eq!(ar(1 << 20).unwrap(), Algorithm::TwoShot);
        assert_eq!(ar(2 << 20).unwrap(), Algorithm::Ring);
        let pair = |n| choose(Collective::AllReduce, Algo::Auto, 2, n, n / 2, 4, half);
        assert_eq!(pair(512 << 10).unwrap(), Algorithm::OneShot);
        assert_eq!(pair(1 << 20).unwrap(), Algorithm::Ring);
        let rs = |n| choose(Collective::ReduceScatter, Algo::Auto, 8, n, n, 4, half);
        assert_eq!(rs(1).unwrap(), Algorithm::OneShot);
        assert_eq!(rs(1 << 16).unwrap(), Algorithm::OneShot);
        assert_eq!(rs(1 << 17).unwrap(), Algorithm::Ring);
        let ag = |n| choose(Collective::AllGather, Algo::Auto, 8, n, n, 4, half);
        assert_eq!(ag(1 << 20).unwrap(), Algorithm::OneShot);
        assert_eq!(ag((1 << 20) + 1).unwrap(), Algorithm::Ring);
        // Every size Auto sends direct fits the default staging.
        for k in [2u64, 3, 8] {
            for c in Collective::ALL {
                let max = [AUTO_RS_DIRECT_MAX, AUTO_AG_DIRECT_MAX, AUTO_AR_TWO_SHOT_MAX]
                    .into_iter()
                    .max()
                    .unwrap();
                let n = max / 4 / if c == Collective::ReduceScatter { k } else { 1 };
                let alg = auto_pick(c, k, max.min(input_bytes(c, k, n, 4).unwrap()));
                if alg != Algorithm::Ring {
                    let l = direct_layout(c, alg, k, n, n.div_ceil(k), 4).unwrap();
                    assert!(l.need <= half.direct_half, "k={k} {c:?}: {l:?}");
                }
            }
        }
        // Without direct staging, Auto is the ring.
        let none = Paths::default();
        assert_eq!(
            choose(Collective::AllReduce, Algo::Auto, 8, 2, 4, 4, none).unwrap(),
            Algorithm::Ring
        );
    }

    #[test]
    fn local_where_one_launch_runs_every_rank() {
        let local = Paths {
            direct_half: DEFAULT_DIRECT_HALF_BYTES,
            local: true,
        };
        for c in Collective::ALL {
            for n in [1u64, 1 << 10, 1 << 28] {
                let pick = |a| choose(c, a, 8, n, n, 4, local);
                assert_eq!(pick(Algo::Auto).unwrap(), Algorithm::Local);
                assert_eq!(pick(Algo::Local).unwrap(), Algorithm::Local);
                assert_eq!(pick(Algo::Ring).unwrap(), Algorithm::Ring);
            }
        }
        let apart = Paths {
            local: false,
            ..local
        };
        let e = choose(Collective::AllGather, Algo::Local, 3, 8, 8, 4, apart);
        assert!(matches!(e, Err(Error::LocalUnavailable { k: 3 })));
        let auto = choose(Collective::AllGather, Algo::Auto, 3, 8, 8, 4, apart).unwrap();
        assert_eq!(auto, Algorithm::OneShot);
    }

    #[test]
    fn forced_direct_that_does_not_fit_is_an_error() {
        let mib = Paths {
            direct_half: 1 << 20,
            local: false,
        };
        let e = choose(
            Collective::AllGather,
            Algo::OneShot,
            4,
            1 << 20,
            1 << 20,
            4,
            mib,
        );
        assert!(matches!(e, Err(Error::DirectTooLarge { need, have, .. }) if need > have));
        assert_eq!(
            choose(Collective::ReduceScatter, Algo::TwoShot, 4, 8, 8, 4, mib).unwrap(),
            Algorithm::OneShot
        );
        assert_eq!(
            choose(Collective::AllReduce, Algo::TwoShot, 4, 8, 4, 4, mib).unwrap(),
            Algorithm::TwoShot
        );
        assert!(direct_layout(
            Collective::ReduceScatter,
            Algorithm::OneShot,
            4,
            u64::MAX,
            1,
            8
        )
        .is_none());
    }

    #[test]
    fn layout_keeps_the_result_after_the_input() {
        let l = direct_layout(Collective::AllReduce, Algorithm::TwoShot, 4, 100, 28, 4).unwrap();
        assert_eq!(l.result, 512);
        assert_eq!(l.need, 512 + 28 * 4 + 16);
        let l = direct_layout(Collective::AllReduce, Algorithm::OneShot, 4, 100, 28, 4).unwrap();
        assert_eq!(l.need, l.result);
    }
}
