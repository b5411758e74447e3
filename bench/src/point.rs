//! One point of a sweep and its figures: what every sweep (ours, NCCL's,
//! the rematch) shares, below all of them.

use crate::cli::BenchArgs;
use crate::metrics::{algbw, busbw, bytes_for, count_for, vs_device_copy};
use crate::report::{Ceilings, Perf};
use ringreduce::{Collective, DataType, Op};

pub(crate) use ringreduce::with_element_type as with_elem;

/// One sweep point, for either backend.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub collective: Collective,
    pub dtype: DataType,
    pub op: Op,
    pub size: u64,
    pub count: u64,
}

pub fn points(args: &BenchArgs, ranks: usize, sizes: &[u64]) -> Result<Vec<Point>, String> {
    let mut v = Vec::new();
    for collective in args.collective.collectives() {
        for dtype in args.dtypes()? {
            // An all-gather has no op: one row per type.
            let ops = if collective == Collective::AllGather {
                vec![Op::Sum]
            } else {
                args.ops()?
            };
            for op in ops {
                for &size in sizes {
                    let count = count_for(collective, size, dtype.size(), ranks);
                    v.push(Point {
                        collective,
                        dtype,
                        op,
                        size,
                        count,
                    });
                }
            }
        }
    }
    Ok(v)
}

/// What a row's ratios are taken against, and how many ranks share a
/// device (the device-copy ratio counts all their traffic).
#[derive(Clone, Copy)]
pub struct Judge<'a> {
    pub ceilings: Option<&'a Ceilings>,
    /// The ceiling busbw is divided by (single-block copy for ringreduce,
    /// device copy for NCCL).
    pub busbw_ceiling: Option<f64>,
    pub ranks_here: usize,
}

pub fn perf(k: usize, p: &Point, time_us: f64, wrong: Option<u64>, j: Judge) -> Perf {
    let sz = p.dtype.size();
    let bytes = bytes_for(p.collective, p.count, sz, k);
    let bus = busbw(p.collective, k, bytes, time_us);
    Perf {
        time_us,
        algbw: algbw(bytes, time_us),
        busbw: bus,
        wrong,
        busbw_vs_ceiling: j.busbw_ceiling.filter(|c| *c > 0.0).map(|c| bus / c),
        vs_device_copy: j.ceilings.and_then(|c| {
            vs_device_copy(
                p.collective,
                p.count,
                sz,
                k,
                j.ranks_here,
                time_us,
                c.device_copy_gbps,
            )
        }),
        host_us: None,
    }
}
