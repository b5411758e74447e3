//! The last call's plan, kept with everything it was made from. Training
//! and decoding loops repeat one collective on the same buffers, and
//! validating and planning it again is about a third of a small local
//! call's host time (`bench/NOTES.md`, twenty-second session).

use crate::error::Result;
use crate::planner::{plan, BufferSpan, CallOpts, Plan};
use ringreduce_kernels::{Collective, DataType};

/// [`plan`]'s inputs, compared whole: `plan` is a pure function of them,
/// so an equal key gives an equal plan.
#[derive(Debug)]
struct Key {
    c: Collective,
    dtype: DataType,
    opts: CallOpts,
    conns: Vec<u64>,
    spans: Vec<BufferSpan>,
}

impl Key {
    fn matches(
        &self,
        c: Collective,
        conns: &[u64],
        spans: &[BufferSpan],
        dtype: DataType,
        opts: &CallOpts,
    ) -> bool {
        self.c == c
            && self.dtype == dtype
            && self.opts == *opts
            && self.conns == conns
            && self.spans == spans
    }
}

/// One remembered plan. A call whose inputs differ in anything replans, and
/// a call that fails to plan (bad input) leaves nothing remembered, so
/// errors are found exactly as without the memo.
#[derive(Debug, Default)]
pub struct PlanMemo {
    last: Option<(Key, Plan)>,
}

impl PlanMemo {
    /// [`plan`] of these inputs, remembered for the next call.
    pub fn plan(
        &mut self,
        c: Collective,
        conns: &[u64],
        spans: &[BufferSpan],
        dtype: DataType,
        opts: CallOpts,
    ) -> Result<&Plan> {
        let last = match self.last.take() {
            Some((key, p)) if key.matches(c, conns, spans, dtype, &opts) => (key, p),
            _ => {
                let p = plan(c, conns, spans, dtype, opts)?;
                let key = Key {
                    c,
                    dtype,
                    opts,
                    conns: conns.to_vec(),
                    spans: spans.to_vec(),
                };
                (key, p)
            }
        };
        Ok(&self.last.insert(last).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `k` distinct connection addresses (`plan` only copies them into the
    /// works).
    fn conns(k: usize) -> Vec<u64> {
        (0..k as u64).map(|u| 0x1000_0000 + u * 0x1_0000).collect()
    }

    fn opts() -> CallOpts {
        CallOpts {
            buffer_bytes: 1 << 21,
            threads: 256,
            channels: None,
            max_channels: 4,
            prefetch_rounds: 0,
            fault: None,
            algorithm: crate::Algo::Auto,
            direct_half_bytes: 1 << 20,
            direct_channels: 1,
            local_blocks: 8,
        }
    }

    /// Out-of-place spans for `c` of `n` per rank, rank `u`'s buffers at
    /// `base + u * stride`.
    fn spans(c: Collective, k: usize, n: u64, base: u64) -> Vec<BufferSpan> {
        let (send_len, recv_len) = c.lengths(k as u64, n);
        (0..k as u64)
            .map(|u| BufferSpan {
                send: base + u * 0x100_0000,
                send_len,
                recv: base + u * 0x100_0000 + 0x80_0000,
                recv_len,
            })
            .collect()
    }

    /// 2,000 calls, repeats and changes mixed (a fixed pseudo-random
    /// sequence), each planned by the memo exactly as by `plan`, errors
    /// included.
    #[test]
    fn memo_plans_as_plan_does() {
        let mut memo = PlanMemo::default();
        let (k, mut x) = (4, 0x2545_f491_4f6c_dd1du64);
        let cs = conns(k);
        let mut pick = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut call = (Collective::AllReduce, 2, 0x7000_0000, DataType::F32, false);
        let mut repeats = 0;
        for _ in 0..2000 {
            // Half the calls repeat the last one; the rest change one input.
            match pick(10) {
                0 => {
                    call.0 = [
                        Collective::ReduceScatter,
                        Collective::AllGather,
                        Collective::AllReduce,
                    ][pick(3) as usize]
                }
                1 => call.1 = [0, 2, 1 + pick(70_000)][pick(3) as usize],
                // The middle base is misaligned for every type: a bad input.
                2 => call.2 = [0x7000_0000, 0x7000_0001, 0x9000_0000][pick(3) as usize],
                3 => call.3 = [DataType::F32, DataType::F64, DataType::U8][pick(3) as usize],
                4 => call.4 = !call.4,
                _ => repeats += 1,
            }
            let (c, n, base, dtype, fault) = call;
            let mut o = opts();
            if fault {
                o.fault = Some((1, 0, 1));
            }
            let sp = spans(c, k, n, base);
            let want = plan(c, &cs, &sp, dtype, o);
            let got = memo.plan(c, &cs, &sp, dtype, o).cloned();
            assert_eq!(format!("{want:?}"), format!("{got:?}"));
        }
        assert!(repeats > 500, "the sequence must repeat calls: {repeats}");
    }

    #[test]
    fn a_failed_call_forgets_the_last_plan() {
        let mut memo = PlanMemo::default();
        let cs = conns(2);
        let good = spans(Collective::AllReduce, 2, 64, 0x7000_0000);
        assert!(memo
            .plan(Collective::AllReduce, &cs, &good, DataType::F32, opts())
            .is_ok());
        assert!(memo.last.is_some());
        let bad = spans(Collective::AllReduce, 2, 64, 0x7000_0002);
        assert!(memo
            .plan(Collective::AllReduce, &cs, &bad, DataType::F32, opts())
            .is_err());
        assert!(memo.last.is_none());
        // Any input differing replans: a changed option gives its own plan.
        let mut o = opts();
        o.algorithm = crate::Algo::Ring;
        let ring = memo
            .plan(Collective::AllReduce, &cs, &good, DataType::F32, o)
            .cloned();
        assert_eq!(
            format!("{ring:?}"),
            format!(
                "{:?}",
                plan(Collective::AllReduce, &cs, &good, DataType::F32, o)
            )
        );
    }
}
