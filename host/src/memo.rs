//! The last few calls' plans, each kept with everything it was made from.
//! Training and decoding loops repeat a handful of collectives on the same
//! buffers (one per layer kind, say), and validating and planning each
//! again was about 40% of a small local call's own host time
//! (`bench/NOTES.md`, 2026-12-05: the small-call path checked).
//!
//! A call that moves its buffers (views into a flat bucket, nccl-tests'
//! shifting) matches no key, but a kept plan of the same shape needs only
//! new pointers: the memo copies it into the oldest entry's allocations
//! and re-points it, after a pass over the ranks when every buffer moved
//! by one offset, or after validation otherwise (2026-12-06, moved buffers re-point a kept plan).

use crate::error::Result;
use crate::planner::{addresses, plan, BufferSpan, CallOpts, Plan};
use ringreduce_kernels::plan::PACK_BYTES;
use ringreduce_kernels::{Collective, DataType};

/// Plans kept: enough for the few distinct calls a step alternates
/// between, few enough that a miss scans them in a few nanoseconds each.
pub const MEMO_PLANS: usize = 8;

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

impl Clone for Key {
    fn clone(&self) -> Self {
        Key {
            c: self.c,
            dtype: self.dtype,
            opts: self.opts,
            conns: self.conns.clone(),
            spans: self.spans.clone(),
        }
    }

    /// Into the vectors' own allocations, as [`Plan`]'s.
    fn clone_from(&mut self, source: &Self) {
        (self.c, self.dtype, self.opts) = (source.c, source.dtype, source.opts);
        self.conns.clone_from(&source.conns);
        self.spans.clone_from(&source.spans);
    }
}

impl Key {
    /// The same inputs but for the buffers' addresses: a plan made for
    /// them may be [`repoint`]ed.
    fn same_shape(
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
            && self.spans.len() == spans.len()
            && self
                .spans
                .iter()
                .zip(spans)
                .all(|(a, b)| (a.send_len, a.recv_len) == (b.send_len, b.recv_len))
    }

    /// Every input the same: the kept plan is the call's.
    fn matches(
        &self,
        c: Collective,
        conns: &[u64],
        spans: &[BufferSpan],
        dtype: DataType,
        opts: &CallOpts,
    ) -> bool {
        self.spans == spans && self.same_shape(c, conns, spans, dtype, opts)
    }
}

/// The [`MEMO_PLANS`] most recently used plans, the latest last. Only
/// plans that succeeded are kept, and a call whose inputs differ in
/// anything from every kept one is validated afresh (or, when its buffers
/// are a kept call's moved whole, checked for all such a move can change),
/// so bad input is found exactly as without the memo.
#[derive(Debug, Default)]
pub struct PlanMemo {
    kept: Vec<(Key, Plan)>,
}

impl PlanMemo {
    /// [`plan`] of these inputs, kept for later calls.
    pub fn plan(
        &mut self,
        c: Collective,
        conns: &[u64],
        spans: &[BufferSpan],
        dtype: DataType,
        opts: CallOpts,
    ) -> Result<&Plan> {
        // The latest first: a loop repeating one call finds it at once.
        let found = self
            .kept
            .iter()
            .rposition(|(key, _)| key.matches(c, conns, spans, dtype, &opts));
        let entry = match found {
            // Already the latest: nothing to move.
            Some(i) if i + 1 == self.kept.len() => return Ok(&self.kept[i].1),
            Some(i) => self.kept.remove(i),
            None => match self.repointed(c, conns, spans, dtype, &opts)? {
                Some(entry) => entry,
                None => self.planned(c, conns, spans, dtype, opts)?,
            },
        };
        let latest = self.kept.len();
        self.kept.push(entry);
        Ok(&self.kept[latest].1)
    }

    /// A kept plan of the same shape, copied (into the oldest entry's
    /// allocations once the memo is full) and pointed at `spans`; `None`
    /// when none is kept or the addresses change more than the pointers.
    /// One whose buffers `spans` moves whole is looked for first, since it
    /// needs no validation.
    fn repointed(
        &mut self,
        c: Collective,
        conns: &[u64],
        spans: &[BufferSpan],
        dtype: DataType,
        opts: &CallOpts,
    ) -> Result<Option<(Key, Plan)>> {
        let alike = |key: &Key| key.same_shape(c, conns, spans, dtype, opts);
        let whole = self
            .kept
            .iter()
            .rposition(|(key, p)| alike(key) && moved_whole(p, &key.spans, spans, dtype));
        let like = match whole {
            Some(i) => i,
            None => match self.kept.iter().rposition(|(key, _)| alike(key)) {
                Some(i) if repointable(c, &self.kept[i].1, spans, dtype, opts)? => i,
                _ => return Ok(None),
            },
        };
        let mut entry = if self.kept.len() < MEMO_PLANS {
            self.kept[like].clone()
        } else {
            // The oldest goes; when it is the one alike, it is reused as is.
            let mut oldest = self.kept.remove(0);
            if like > 0 {
                let (key, p) = &self.kept[like - 1];
                oldest.0.clone_from(key);
                oldest.1.clone_from(p);
            }
            oldest
        };
        entry.0.spans.copy_from_slice(spans);
        repoint(&mut entry.1, spans);
        Ok(Some(entry))
    }

    /// A new plan, made whole.
    fn planned(
        &mut self,
        c: Collective,
        conns: &[u64],
        spans: &[BufferSpan],
        dtype: DataType,
        opts: CallOpts,
    ) -> Result<(Key, Plan)> {
        let p = plan(c, conns, spans, dtype, opts)?;
        if self.kept.len() == MEMO_PLANS {
            self.kept.remove(0);
        }
        let key = Key {
            c,
            dtype,
            opts,
            conns: conns.to_vec(),
            spans: spans.to_vec(),
        };
        Ok((key, p))
    }
}

/// Whether `kept`, a launch [`plan`](crate::planner::plan) made for buffers of the same lengths
/// with every other input the same, becomes `plan`'s result for `bufs` by
/// [`repoint`] alone: `bufs` pass [`validate`](crate::planner::validate) (its error otherwise, as
/// `plan`'s) and share `kept`'s alignment residue, the one thing besides
/// the pointers that the addresses decide. A loop that moves its buffers
/// (nccl-tests does) then pays a check, not a plan, per call.
fn repointable(
    c: Collective,
    kept: &Plan,
    bufs: &[BufferSpan],
    dtype: DataType,
    opts: &CallOpts,
) -> Result<bool> {
    let Plan::Launch { aligned, works, .. } = kept else {
        return Ok(false);
    };
    let (_, residue) = addresses(c, bufs, opts.part_of(works.len()), dtype)?;
    Ok(residue == aligned.then(|| works[0].residue))
}

/// Whether `bufs` are `old` (for which `kept`, a launch, was planned)
/// moved together by one offset, a multiple of [`PACK_BYTES`], with no
/// address wrapping and none null: everything [`validate`](crate::planner::validate) and the
/// residue check is unchanged by such a move, so [`repoint`] alone gives
/// `plan`'s result, in a pass over the ranks instead of `validate`'s k^2
/// overlap test. That is how a loop over per-rank buffers laid out alike
/// moves (bucket views at one offset; nccl-tests' shifting).
fn moved_whole(kept: &Plan, old: &[BufferSpan], bufs: &[BufferSpan], dtype: DataType) -> bool {
    let (Plan::Launch { .. }, Some(o), Some(b)) = (kept, old.first(), bufs.first()) else {
        return false;
    };
    let d = b.send.wrapping_sub(o.send) as i64;
    let sz = dtype.size();
    let moved = |from: u64, to: u64, len: u64| {
        from.checked_add_signed(d) == Some(to)
            && to != 0
            && to.checked_add(len.saturating_mul(sz)).is_some()
    };
    // A multiple of the pack is one of every element size too.
    d.rem_euclid(PACK_BYTES as i64) == 0
        && old.len() == bufs.len()
        && old.iter().zip(bufs).all(|(o, b)| {
            (o.send_len, o.recv_len) == (b.send_len, b.recv_len)
                && moved(o.send, b.send, b.send_len)
                && moved(o.recv, b.recv, b.recv_len)
        })
}

/// Points a launch plan's works at `bufs` (user-rank order); see
/// [`repointable`].
fn repoint(plan: &mut Plan, bufs: &[BufferSpan]) {
    if let Plan::Launch { works, .. } = plan {
        for (w, b) in works.iter_mut().zip(bufs) {
            (w.send, w.recv) = (b.send, b.recv);
        }
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
            algorithm: crate::algorithm::Algo::Auto,
            direct_half_bytes: 1 << 20,
            direct_channels: 1,
            local_blocks: 8,
            part: None,
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

    /// 4,000 calls, repeats and changes mixed (a fixed pseudo-random
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
        let mut layout = 0;
        let mut repeats = 0;
        for _ in 0..4000 {
            // Four calls in ten repeat the last one; the rest change one
            // input. Moved buffers keep or change the alignment residue.
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
                2 => {
                    call.2 = [
                        0x7000_0000,
                        0x7000_0001,
                        0x9000_0000,
                        0x7000_0000 + 16 * pick(1000),
                        0x7000_0004 + 16 * pick(1000),
                    ][pick(5) as usize]
                }
                3 => call.3 = [DataType::F32, DataType::F64, DataType::U8][pick(3) as usize],
                4 => call.4 = !call.4,
                // Rank 1's buffers as the others', 4 bytes on (padded, or
                // misaligned), or its output on rank 0's (an overlap).
                5 => layout = pick(3),
                _ => repeats += 1,
            }
            let (c, n, base, dtype, fault) = call;
            let mut o = opts();
            if fault {
                o.fault = Some((1, 0, 1));
            }
            let mut sp = spans(c, k, n, base);
            match layout {
                1 => (sp[1].send, sp[1].recv) = (sp[1].send + 4, sp[1].recv + 4),
                2 => sp[1].recv = sp[0].recv,
                _ => {}
            }
            let want = plan(c, &cs, &sp, dtype, o);
            let got = memo.plan(c, &cs, &sp, dtype, o).cloned();
            assert_eq!(format!("{want:?}"), format!("{got:?}"));
        }
        assert!(repeats > 1000, "the sequence must repeat calls: {repeats}");
    }

    /// A move of every buffer by one multiple of the pack keeps the plan
    /// but its pointers; any other move, or one that reaches address 0 or
    /// wraps, is not taken for one.
    #[test]
    fn whole_moves_change_only_the_pointers() {
        let (c, k, n) = (Collective::AllReduce, 4, 1000);
        let cs = conns(k);
        let old = spans(c, k, n, 0x7000_0000);
        let kept = plan(c, &cs, &old, DataType::F32, opts()).unwrap();
        let moved = |d: i64| -> Vec<BufferSpan> {
            old.iter()
                .map(|b| BufferSpan {
                    send: b.send.wrapping_add_signed(d),
                    recv: b.recv.wrapping_add_signed(d),
                    ..*b
                })
                .collect()
        };
        for d in [16, -16, 48 << 20, -(0x7000_0000 - 16)] {
            let new = moved(d);
            assert!(moved_whole(&kept, &old, &new, DataType::F32), "{d}");
            let mut p = kept.clone();
            repoint(&mut p, &new);
            assert_eq!(p, plan(c, &cs, &new, DataType::F32, opts()).unwrap());
        }
        // Off the pack (the residue changes), onto address 0, or wrapped.
        for d in [4, 8, -0x7000_0000, i64::MIN + 16] {
            assert!(!moved_whole(&kept, &old, &moved(d), DataType::F32), "{d}");
        }
        let mut one = old.clone();
        one[2].recv += 16;
        assert!(!moved_whole(&kept, &old, &one, DataType::F32));
        assert!(!moved_whole(&Plan::Nothing, &old, &old, DataType::F32));
    }

    #[test]
    fn alternating_calls_are_kept_and_a_failed_call_adds_nothing() {
        let mut memo = PlanMemo::default();
        let cs = conns(2);
        let ar = |base| spans(Collective::AllReduce, 2, 64, base);
        let (a, b) = (ar(0x7000_0000), ar(0x9000_0000));
        for _ in 0..3 {
            for sp in [&a, &b] {
                memo.plan(Collective::AllReduce, &cs, sp, DataType::F32, opts())
                    .unwrap();
            }
        }
        // Two distinct calls, alternated: planned once each.
        assert_eq!(memo.kept.len(), 2);
        let bad = ar(0x7000_0002);
        assert!(memo
            .plan(Collective::AllReduce, &cs, &bad, DataType::F32, opts())
            .is_err());
        assert_eq!(memo.kept.len(), 2);
        // More distinct calls than are kept: the least recently used goes.
        for i in 0..MEMO_PLANS as u64 {
            memo.plan(
                Collective::AllReduce,
                &cs,
                &ar(0xa000_0000 + i * 0x1000_0000),
                DataType::F32,
                opts(),
            )
            .unwrap();
        }
        assert_eq!(memo.kept.len(), MEMO_PLANS);
        assert!(!memo.kept.iter().any(|(k, _)| k.spans == a || k.spans == b));
        // Any input differing replans: a changed option gives its own plan.
        let mut o = opts();
        o.algorithm = crate::algorithm::Algo::Ring;
        let ring = memo
            .plan(Collective::AllReduce, &cs, &a, DataType::F32, o)
            .cloned();
        assert_eq!(
            format!("{ring:?}"),
            format!(
                "{:?}",
                plan(Collective::AllReduce, &cs, &a, DataType::F32, o)
            )
        );
    }
}
