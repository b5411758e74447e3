//! The GPU soak: thousands of back-to-back collectives of random kinds,
//! types, ops, counts, placements and stream sets on one communicator, with
//! no host synchronisation except at checkpoints.
//!
//! Inputs come from read-only pools filled once, with values whose
//! reduction has a closed form (`f(j) + g(r)` for sum, max, min and avg;
//! a single non-unit factor per element for prod), so that checking a
//! collective costs O(outputs) on the host, not O(k x inputs).

use crate::data::with_type;
use crate::data::Rng;
use cudarc::driver::{CudaSlice, CudaStream};
use ringreduce::{Buffers, Collective, Communicator, DataType, Op, Result, RsElement};
use std::any::Any;
use std::sync::Arc;

/// Small-integer patterns, exact in every type.
pub trait Pattern: RsElement {
    const SIGNED: bool;
    fn int(v: i32) -> Self;
}
macro_rules! pattern_int { ($($t:ty: $s:expr),*) => {$(
    impl Pattern for $t { const SIGNED: bool = $s; fn int(v: i32) -> Self { v as $t } }
)*}; }
pattern_int!(i8: true, u8: false, i32: true, u32: false, i64: true, u64: false);
impl Pattern for f32 {
    const SIGNED: bool = true;
    fn int(v: i32) -> Self {
        v as f32
    }
}
impl Pattern for f64 {
    const SIGNED: bool = true;
    fn int(v: i32) -> Self {
        v as f64
    }
}
impl Pattern for half::f16 {
    const SIGNED: bool = true;
    fn int(v: i32) -> Self {
        half::f16::from_f32(v as f32)
    }
}
impl Pattern for half::bf16 {
    const SIGNED: bool = true;
    fn int(v: i32) -> Self {
        half::bf16::from_f32(v as f32)
    }
}

fn f_of<T: Pattern>(j: usize) -> i32 {
    let h = (j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 59; // 0..31
    if T::SIGNED {
        (h % 17) as i32 - 8
    } else {
        (h % 9) as i32
    }
}
fn g_of<T: Pattern>(r: usize) -> i32 {
    if T::SIGNED {
        (r % 9) as i32 - 4
    } else {
        (r % 5) as i32
    }
}
fn c_of<T: Pattern>(j: usize) -> i32 {
    let h = ((j as u64).wrapping_mul(0xd1b5_4a32_d192_ed03) >> 61) as i32; // 0..7
    let m = h % 3 + 1;
    if T::SIGNED && h >= 4 {
        -m
    } else {
        m
    }
}

/// Rank `r`'s pool value at element `j`.
pub fn pool_value<T: Pattern>(prod: bool, k: usize, r: usize, j: usize) -> T {
    if prod {
        T::int(if r == j % k { c_of::<T>(j) } else { 1 })
    } else {
        T::int(f_of::<T>(j) + g_of::<T>(r))
    }
}

/// The reduction of pool elements `j` over all ranks, in closed form.
pub fn expected<T: Pattern>(op: Op, k: usize, j: usize) -> T {
    let f = f_of::<T>(j);
    let g = (0..k).map(g_of::<T>);
    match op {
        Op::Prod => T::int(c_of::<T>(j)),
        Op::Max => T::int(f + g.max().unwrap_or(0)),
        Op::Min => T::int(f + g.min().unwrap_or(0)),
        Op::Sum | Op::Avg => {
            // k f + sum g, folded in T (wrapping for integers, exact for floats).
            let mut acc = T::int(f + g_of::<T>(0));
            for r in 1..k {
                acc = acc.red_sum(T::int(f + g_of::<T>(r)));
            }
            if op == Op::Avg {
                op.finish(acc, k as u32)
            } else {
                acc
            }
        }
    }
}

/// An environment setting of the soaks, or `default` when unset or unreadable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// The ring sizes a soak runs: `RINGREDUCE_SOAK_KS` (comma separated), or
/// `default`; `gpu-suite` runs one size per part.
pub fn soak_ks(default: &[usize]) -> Vec<usize> {
    std::env::var("RINGREDUCE_SOAK_KS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// A ring order for a soak of `k` ranks that is not the identity where one
/// exists: stride 3 when that is a permutation, else reversed.
pub fn soak_ring(k: usize) -> Vec<u32> {
    let order: Vec<u32> = (0..k as u32).map(|i| (i * 3 + 1) % k as u32).collect();
    if ringreduce::RingOrder::new(&order).is_ok() {
        order
    } else {
        (0..k as u32).rev().collect()
    }
}

/// The threads the host work of a soak is spread over.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Per type: the additive pool and the product pool, one buffer per rank.
struct Pools<T> {
    add: Vec<CudaSlice<T>>,
    prod: Vec<CudaSlice<T>>,
}

/// Elements in each rank's pool: room for `k * max_count` plus offsets.
fn pool_len(k: usize, max_count: usize) -> usize {
    k * max_count + 16
}

fn make_pools<T: Pattern>(streams: &[Arc<CudaStream>], k: usize, len: usize) -> Result<Pools<T>> {
    // Filled on every core: at k=8 the pools hold billions of elements.
    let fill = |prod: bool, r: usize| -> Vec<T> {
        let mut v = vec![T::int(0); len];
        let per = len.div_ceil(cores()).max(1);
        std::thread::scope(|sc| {
            for (c, part) in v.chunks_mut(per).enumerate() {
                sc.spawn(move || {
                    for (i, x) in part.iter_mut().enumerate() {
                        *x = pool_value::<T>(prod, k, r, c * per + i);
                    }
                });
            }
        });
        v
    };
    let mut add = Vec::new();
    let mut prod = Vec::new();
    for (r, s) in streams.iter().enumerate() {
        add.push(s.clone_htod(&fill(false, r))?);
        prod.push(s.clone_htod(&fill(true, r))?);
    }
    Ok(Pools { add, prod })
}

struct Done<T> {
    /// The collective's number in the soak.
    index: usize,
    collective: Collective,
    op: Op,
    n: usize,
    offset: usize,
    in_place: bool,
    out: Vec<CudaSlice<T>>,
    streams: Vec<Arc<CudaStream>>,
}

trait Check {
    /// Copies the outputs back (on the streams that wrote them).
    fn fetch(&self, k: usize) -> Result<Box<dyn Verify + Send + Sync>>;
}

/// A collective's outputs on the host, checked against the closed form.
trait Verify {
    /// Wrong elements, and a description of the collective and its first
    /// wrong element when there is one.
    fn wrong(&self) -> (usize, Option<String>);
}

struct Fetched<T> {
    collective: Collective,
    op: Op,
    k: usize,
    n: usize,
    offset: usize,
    in_place: bool,
    index: usize,
    got: Vec<Vec<T>>,
}

impl<T: Pattern> Check for Done<T> {
    fn fetch(&self, k: usize) -> Result<Box<dyn Verify + Send + Sync>> {
        // Only each rank's result comes back: for an in-place
        // reduce-scatter that is block `u` of the whole buffer.
        let got = (0..k)
            .map(|u| {
                let (base, len) = match self.collective {
                    Collective::ReduceScatter if self.in_place => (u * self.n, self.n),
                    Collective::AllGather => (0, k * self.n),
                    _ => (0, self.n),
                };
                let block = self.out[u].slice(base..base + len);
                Ok(self.streams[u].clone_dtoh(&block)?)
            })
            .collect::<Result<_>>()?;
        Ok(Box::new(Fetched {
            collective: self.collective,
            op: self.op,
            k,
            n: self.n,
            offset: self.offset,
            in_place: self.in_place,
            index: self.index,
            got,
        }))
    }
}

impl<T: Pattern> Verify for Fetched<T> {
    fn wrong(&self) -> (usize, Option<String>) {
        let mut w = 0;
        let mut first = None;
        let mut last = (0, 0);
        let n = self.n.max(1);
        for (u, got) in self.got.iter().enumerate() {
            for (i, g) in got.iter().enumerate() {
                let want = match self.collective {
                    Collective::ReduceScatter => {
                        expected::<T>(self.op, self.k, self.offset + u * self.n + i)
                    }
                    // Block b of the output is rank b's additive pool.
                    Collective::AllGather => {
                        pool_value::<T>(false, self.k, i / n, self.offset + i % n)
                    }
                    Collective::AllReduce => expected::<T>(self.op, self.k, self.offset + i),
                };
                if bytemuck::bytes_of(g) != bytemuck::bytes_of(&want) {
                    w += 1;
                    first.get_or_insert_with(|| (u, i, format!("{g:?}"), format!("{want:?}")));
                    last = (u, i);
                }
            }
        }
        let what = first.map(|(u, i, g, want)| {
            format!(
                "collective #{} {} {} {:?} n={} offset={} in_place={}: {w} wrong, first at rank {u} \
                 element {i} (got {g}, want {want}), last at rank {} element {}",
                self.index,
                self.collective.name(),
                T::DTYPE.name(),
                self.op,
                self.n,
                self.offset,
                self.in_place,
                last.0,
                last.1,
            )
        });
        (w, what)
    }
}

/// Checks collectives in batches: copies one batch back, then verifies it
/// on every core. The checking, not the GPU, is what bounds a soak's time.
fn check_all(pending: &mut Vec<Box<dyn Check>>, k: usize) -> Result<usize> {
    let cores = cores();
    let mut wrong = 0;
    for batch in pending.chunks(4 * cores) {
        let fetched = batch
            .iter()
            .map(|p| p.fetch(k))
            .collect::<Result<Vec<_>>>()?;
        let seen: Vec<(usize, Option<String>)> = std::thread::scope(|sc| {
            let hs: Vec<_> = fetched
                .chunks(fetched.len().div_ceil(cores))
                .map(|part| sc.spawn(move || part.iter().map(|f| f.wrong()).collect::<Vec<_>>()))
                .collect();
            hs.into_iter()
                .flat_map(|h| h.join().expect("checker"))
                .collect()
        });
        for (w, what) in seen {
            wrong += w;
            if let Some(what) = what {
                println!("soak: {what}");
            }
        }
    }
    pending.clear();
    Ok(wrong)
}

/// What a soak saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct SoakReport {
    pub ops: usize,
    pub elements: usize,
    pub wrong: usize,
    pub checkpoints: usize,
    pub empty: usize,
    pub in_place: usize,
    /// Seconds spent filling the pools, and copying back and checking: the
    /// rest of a soak's wall time is enqueueing and waiting for the GPU.
    pub setup_s: f64,
    pub check_s: f64,
}

/// Runs `ops` collectives on `comm`, `stream_sets` sets of streams chosen at
/// random per collective, verifying every `checkpoint` collectives.
pub fn soak(
    comm: &Communicator,
    stream_sets: &[Vec<Arc<CudaStream>>],
    ops: usize,
    checkpoint: usize,
    max_count: usize,
    seed: u64,
) -> Result<SoakReport> {
    let k = comm.k();
    let t0 = std::time::Instant::now();
    let len = pool_len(k, max_count);
    let pools: Vec<Box<dyn Any>> = DataType::ALL
        .iter()
        .map(|&d| -> Result<Box<dyn Any>> {
            with_type!(d, T => Ok(Box::new(make_pools::<T>(&stream_sets[0], k, len)?) as Box<dyn Any>))
        })
        .collect::<Result<_>>()?;
    for s in &stream_sets[0] {
        s.synchronize()?;
    }
    let mut rng = Rng(seed);
    let mut rep = SoakReport {
        setup_s: t0.elapsed().as_secs_f64(),
        ..SoakReport::default()
    };
    let mut pending: Vec<Box<dyn Check>> = Vec::new();
    let log_max = (max_count as f64).log2();
    for i in 0..ops {
        let collective = Collective::ALL[rng.below(3) as usize];
        let di = rng.below(10) as usize;
        let dtype = DataType::ALL[di];
        let op = Op::ALL[rng.below(5) as usize];
        // Log-uniform counts from 0 to max_count, with exact zeros too.
        let n = if rng.below(20) == 0 {
            0
        } else {
            let e = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * log_max;
            (2f64.powf(e) as usize).min(max_count)
        };
        let in_place = rng.below(2) == 0;
        let offset = rng.below(16) as usize;
        let set = &stream_sets[rng.below(stream_sets.len() as u64) as usize];
        let (send_len, recv_len) = crate::checked::lengths(collective, k, n);
        let p: Box<dyn Check> = with_type!(dtype, T => {
            let pool = pools[di].downcast_ref::<Pools<T>>().expect("pool type");
            let prod = op == Op::Prod && collective != Collective::AllGather;
            let src = if prod { &pool.prod } else { &pool.add };
            let mut out: Vec<CudaSlice<T>> = Vec::with_capacity(k);
            for u in 0..k {
                let s = &set[u];
                let mut b = s.alloc_zeros::<T>(recv_len.max(send_len).max(1))?;
                if in_place && n > 0 {
                    // The input where the in-place layout wants it.
                    let at = if collective == Collective::AllGather { u * n } else { 0 };
                    s.memcpy_dtod(
                        &src[u].slice(offset..offset + send_len),
                        &mut b.slice_mut(at..at + send_len),
                    )?;
                }
                out.push(b);
            }
            {
                let mut bufs: Vec<Buffers<'_, T>> = out
                    .iter_mut()
                    .enumerate()
                    .map(|(u, o)| {
                        if in_place {
                            Buffers::in_place(o.slice_mut(0..send_len.max(recv_len)))
                        } else {
                            Buffers::out_of_place(src[u].slice(offset..offset + send_len), o.slice_mut(0..recv_len))
                        }
                    })
                    .collect();
                comm.collective(collective, &mut bufs, op, set)?;
            }
            Box::new(Done::<T> { index: i, collective, op, n, offset, in_place, out, streams: set.clone() })
        });
        pending.push(p);
        rep.ops += 1;
        rep.elements += k * send_len;
        rep.empty += (n == 0) as usize;
        rep.in_place += in_place as usize;
        if (i + 1) % checkpoint == 0 || i + 1 == ops {
            for set in stream_sets {
                for s in set {
                    s.synchronize()?;
                }
            }
            comm.synchronize()?;
            let tc = std::time::Instant::now();
            rep.wrong += check_all(&mut pending, k)?;
            rep.check_s += tc.elapsed().as_secs_f64();
            rep.checkpoints += 1;
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringreduce::{reference, RingOrder};

    /// The closed forms agree with folding the pools in ring order.
    #[test]
    fn closed_forms_match_the_reference() {
        fn check<T: Pattern>() {
            for k in [2usize, 3, 4, 8] {
                let ring = RingOrder::new(&(0..k as u32).rev().collect::<Vec<_>>()).unwrap();
                for op in Op::ALL {
                    let n = 300;
                    let prod = op == Op::Prod;
                    let inputs: Vec<Vec<T>> = (0..k)
                        .map(|r| (0..k * n).map(|j| pool_value::<T>(prod, k, r, j)).collect())
                        .collect();
                    let refs: Vec<&[T]> = inputs.iter().map(|v| v.as_slice()).collect();
                    let want = reference::reduce_scatter(&refs, &ring, op);
                    for (u, block) in want.iter().enumerate() {
                        for (i, w) in block.iter().enumerate() {
                            let e = expected::<T>(op, k, u * n + i);
                            assert_eq!(
                                bytemuck::bytes_of(&e),
                                bytemuck::bytes_of(w),
                                "{} {:?} k={k}",
                                T::DTYPE.name(),
                                op
                            );
                        }
                    }
                }
            }
        }
        check::<i8>();
        check::<u8>();
        check::<i32>();
        check::<u32>();
        check::<i64>();
        check::<u64>();
        check::<half::f16>();
        check::<half::bf16>();
        check::<f32>();
        check::<f64>();
    }
}
