//! Checks of the gradient layer, written once over `GradBackend` so the CPU
//! execution (CI) and the GPU run the same ones. Each panics with what went
//! wrong and returns how many elements it checked.

use crate::data::Rng;
use half::{bf16, f16};
use ringreduce::grad::{BucketSession, BucketedGrads, GradBackend, Session};
use ringreduce::reference::collective_by;
use ringreduce::{Collective, Collectives, GradConfig, GradSync, Op, Precision, Sparsity};

/// A tensor: one buffer per rank.
pub type Tensor<C> = Vec<<C as Collectives>::Buf<f32>>;

/// Integer values in `-m..=m` (exact sums), or with `frac` random fractions
/// too (sums that round).
pub fn values(rng: &mut Rng, n: usize, m: i64, frac: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let i = rng.below(2 * m as u64 + 1) as i64 - m;
            let f = if frac {
                (rng.below(1 << 20) as f32) / (1 << 20) as f32
            } else {
                0.0
            };
            i as f32 + f
        })
        .collect()
}

/// Uploads one tensor: `data[u]` on rank `u`.
pub fn upload<C: GradBackend>(comm: &C, data: &[Vec<f32>]) -> Tensor<C> {
    data.iter()
        .enumerate()
        .map(|(u, d)| comm.upload(u, d).unwrap())
        .collect()
}

/// Every rank's contents of a tensor.
pub fn download<C: GradBackend>(comm: &C, t: &Tensor<C>) -> Vec<Vec<f32>> {
    t.iter()
        .enumerate()
        .map(|(u, b)| comm.download(u, b).unwrap())
        .collect()
}

/// Panics at the first element whose bits differ, naming it (a whole
/// tensor in the message would be megabytes of log). With `nan_class`,
/// any two NaNs agree: a NaN's sign and payload are not specified, and the
/// GPU gives its canonical NaN where the host's reference gives another.
fn assert_bits(got: &[f32], want: &[f32], nan_class: bool, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let same =
        |a: f32, b: f32| a.to_bits() == b.to_bits() || (nan_class && a.is_nan() && b.is_nan());
    if let Some(i) = (0..got.len()).find(|&i| !same(got[i], want[i])) {
        panic!(
            "{what}: element {i} is {} ({:#010x}), expected {} ({:#010x})",
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

/// A random list of `count` tensor lengths up to `max`, with empty and odd
/// ones.
pub fn lengths(rng: &mut Rng, count: usize, max: usize) -> Vec<usize> {
    (0..count)
        .map(|i| match i % 7 {
            0 => 0,
            1 => 1 + 2 * rng.below(8) as usize,
            _ => rng.below(max as u64 + 1) as usize,
        })
        .collect()
}

/// Every rank's values for each tensor of `lens` (see [`values`], within
/// -100..=100).
pub fn list_data(rng: &mut Rng, k: usize, lens: &[usize], frac: bool) -> Vec<Vec<Vec<f32>>> {
    lens.iter()
        .map(|&n| (0..k).map(|_| values(rng, n, 100, frac)).collect())
        .collect()
}

/// The layer over `comm` with buckets of `cap_bytes`.
pub fn sync_with_cap<C: GradBackend>(comm: &C, cap_bytes: usize) -> GradSync<'_, C> {
    let cfg = GradConfig {
        bucket_bytes: cap_bytes,
        ..GradConfig::default()
    };
    GradSync::new(comm, cfg).unwrap()
}

/// The fused all-reduce of a random list, with a cap smaller than some
/// tensors, against one all-reduce per tensor: bitwise equal. `frac` adds
/// fractions, for backends whose fold order does not depend on place.
pub fn fused_matches_per_tensor<C: GradBackend>(
    comm: &C,
    seed: u64,
    count: usize,
    max_len: usize,
    cap_bytes: usize,
    frac: bool,
) -> usize {
    let k = comm.k();
    let mut rng = Rng(seed);
    let lens = lengths(&mut rng, count, max_len);
    let data = list_data(&mut rng, k, &lens, frac);
    let mut g = sync_with_cap(comm, cap_bytes);
    let mut fused: Vec<Tensor<C>> = data.iter().map(|d| upload(comm, d)).collect();
    g.fused_all_reduce(&mut fused).unwrap();
    let mut single: Vec<Tensor<C>> = data.iter().map(|d| upload(comm, d)).collect();
    for t in single.iter_mut() {
        g.all_reduce(t).unwrap();
    }
    let mut checked = 0;
    for (i, (f, s)) in fused.iter().zip(&single).enumerate() {
        let (f, s) = (download(comm, f), download(comm, s));
        for u in 0..k {
            let what = format!("tensor {i} (len {}) rank {u}", lens[i]);
            assert_bits(&f[u], &s[u], false, &what);
            checked += f[u].len();
        }
        if !frac && lens[i] > 0 {
            // And they are the sums.
            let want: Vec<f32> = (0..lens[i])
                .map(|j| (0..k).map(|u| data[i][u][j] as f64).sum::<f64>() as f32)
                .collect();
            assert_eq!(f[0], want, "tensor {i}: not the sum");
        }
    }
    checked
}

/// The streaming form: tensors pushed in reverse (backward) order, with a
/// tensor larger than the cap among them, then `wait` on the communicator's
/// own queues: equal to the whole-list form.
pub fn session_matches_fused<C: GradBackend>(
    comm: &C,
    seed: u64,
    count: usize,
    cap_bytes: usize,
) -> usize {
    let k = comm.k();
    let mut rng = Rng(seed);
    let mut lens = lengths(&mut rng, count, cap_bytes / 4 * 3 / 2);
    lens.push(cap_bytes / 4 + 3);
    let data = list_data(&mut rng, k, &lens, false);
    let mut g = sync_with_cap(comm, cap_bytes);
    let mut want: Vec<Tensor<C>> = data.iter().map(|d| upload(comm, d)).collect();
    g.fused_all_reduce(&mut want).unwrap();
    let mut got: Vec<Tensor<C>> = data.iter().map(|d| upload(comm, d)).collect();
    {
        let mut s: Session<'_, '_, '_, C> = g.session(comm.own_queues()).unwrap();
        for t in got.iter_mut().rev() {
            s.push(t).unwrap();
        }
        s.wait(&comm.own_queues()).unwrap();
    }
    let mut checked = 0;
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        let (a, b) = (download(comm, a), download(comm, b));
        assert_eq!(a, b, "tensor {i} (len {})", lens[i]);
        checked += a.iter().map(Vec::len).sum::<usize>();
    }
    checked
}

/// Writes `data[t][u]` into tensor `t`'s place on rank `u`.
pub fn fill<C: GradBackend>(comm: &C, grads: &mut BucketedGrads<C>, data: &[Vec<Vec<f32>>]) {
    for (t, d) in data.iter().enumerate() {
        let Some(p) = grads.place(t).cloned() else {
            assert!(
                d.iter().all(Vec::is_empty),
                "tensor {t} has data but no place"
            );
            continue;
        };
        for (u, du) in d.iter().enumerate() {
            comm.write(u, &mut grads.bucket_mut(p.bucket)[u], p.at.start, du)
                .unwrap();
        }
    }
}

/// Panics unless the layout holds: every non-empty tensor in a bucket, in
/// bounds, 4-element aligned, not overlapping another, and a bucket's
/// members in list order; an empty tensor has no place. Returns each
/// bucket's elements outside any tensor (alignment gaps), per rank.
fn check_layout<C: GradBackend>(
    grads: &BucketedGrads<C>,
    lens: &[usize],
) -> Vec<Vec<std::ops::Range<usize>>> {
    assert_eq!(grads.tensors(), lens.len());
    let mut gaps = Vec::new();
    for b in 0..grads.buckets() {
        let len = C::len_of(&grads.bucket(b)[0]);
        let m = grads.members(b);
        assert!(
            !m.is_empty() && m.windows(2).all(|w| w[0] < w[1]),
            "bucket {b} members"
        );
        let mut end = 0;
        let mut g = Vec::new();
        for &t in m {
            let p = grads.place(t).expect("a member has a place");
            assert_eq!((p.bucket, p.at.len()), (b, lens[t]), "tensor {t}");
            assert!(
                p.at.start >= end && p.at.start.is_multiple_of(4),
                "tensor {t} overlaps or is misaligned"
            );
            g.push(end..p.at.start);
            end = p.at.end;
        }
        assert_eq!(end, len, "bucket {b} ends at its last tensor");
        gaps.push(g);
    }
    for (t, &n) in lens.iter().enumerate() {
        assert_eq!(grads.place(t).is_none(), n == 0, "tensor {t} of {n}");
    }
    gaps
}

/// Gradients stored in their buckets (`bucketed`), all-reduced in place,
/// against the fused all-reduce of the same list: bitwise equal, the
/// layout sound, and the alignment gaps still zero. With `stream`, through
/// a [`BucketSession`] with the tensors marked ready in backward order.
pub fn bucketed_matches_fused<C: GradBackend>(
    comm: &C,
    seed: u64,
    count: usize,
    max_len: usize,
    cap_bytes: usize,
    stream: bool,
) -> usize {
    let k = comm.k();
    let mut rng = Rng(seed);
    let lens = lengths(&mut rng, count, max_len);
    let data = list_data(&mut rng, k, &lens, false);
    let mut g = sync_with_cap(comm, cap_bytes);
    let mut want: Vec<Tensor<C>> = data.iter().map(|d| upload(comm, d)).collect();
    g.fused_all_reduce(&mut want).unwrap();
    let mut grads = g.bucketed(&lens).unwrap();
    let gaps = check_layout(&grads, &lens);
    // Two steps, as a training loop reuses its buckets.
    for _step in 0..2 {
        fill(comm, &mut grads, &data);
        if stream {
            let mut s: BucketSession<'_, '_, C> =
                g.bucketed_session(&mut grads, comm.own_queues()).unwrap();
            for t in (0..lens.len()).rev() {
                s.ready(t).unwrap();
            }
            s.wait(&comm.own_queues()).unwrap();
        } else {
            g.all_reduce_bucketed(&mut grads).unwrap();
        }
    }
    let mut checked = 0;
    for (t, w) in want.iter().enumerate() {
        let Some(p) = grads.place(t) else { continue };
        let w = download(comm, w);
        for (u, wu) in w.iter().enumerate() {
            let got = comm
                .read(u, &grads.bucket(p.bucket)[u], p.at.clone())
                .unwrap();
            assert_bits(
                &got,
                wu,
                false,
                &format!("tensor {t} (len {}) rank {u}", lens[t]),
            );
            checked += got.len();
        }
    }
    for (b, g) in gaps.iter().enumerate() {
        for u in 0..k {
            let all = comm.download(u, &grads.bucket(b)[u]).unwrap();
            for r in g {
                assert!(
                    all[r.clone()].iter().all(|&x| x == 0.0),
                    "bucket {b} gap {r:?} rank {u}"
                );
            }
        }
    }
    checked
}

/// The half-precision all-reduce against the reference: convert (after the
/// division by `k` with `prescale`), reduce in half precision in the
/// order the backend's algorithm folds, convert back. Bitwise.
pub fn half_matches_reference<C: GradBackend>(
    comm: &C,
    seed: u64,
    n: usize,
    precision: Precision,
    prescale: bool,
) -> usize {
    let k = comm.k();
    let mut rng = Rng(seed);
    // Large values too, so that an f16 sum can overflow.
    let data: Vec<Vec<f32>> = (0..k)
        .map(|_| {
            let mut v = values(&mut rng, n, 3000, true);
            for x in v.iter_mut().step_by(97) {
                *x *= 30.0;
            }
            v
        })
        .collect();
    let mut g = GradSync::new(comm, GradConfig::default()).unwrap();
    let mut t = upload(comm, &data);
    g.all_reduce_half(&mut t, precision, prescale).unwrap();
    let got = download(comm, &t);
    let div = if prescale { k as f32 } else { 1.0 };
    let want: Vec<f32> = match precision {
        Precision::F16 => {
            let h: Vec<Vec<f16>> = data
                .iter()
                .map(|d| d.iter().map(|&x| f16::from_f32(x / div)).collect())
                .collect();
            let a = comm.algorithm_for::<f16>(Collective::AllReduce, n).unwrap();
            let refs: Vec<&[f16]> = h.iter().map(Vec::as_slice).collect();
            collective_by(Collective::AllReduce, a, &refs, comm.ring_order(), Op::Sum)[0]
                .iter()
                .map(|x| x.to_f32())
                .collect()
        }
        Precision::Bf16 => {
            let h: Vec<Vec<bf16>> = data
                .iter()
                .map(|d| d.iter().map(|&x| bf16::from_f32(x / div)).collect())
                .collect();
            let a = comm
                .algorithm_for::<bf16>(Collective::AllReduce, n)
                .unwrap();
            let refs: Vec<&[bf16]> = h.iter().map(Vec::as_slice).collect();
            collective_by(Collective::AllReduce, a, &refs, comm.ring_order(), Op::Sum)[0]
                .iter()
                .map(|x| x.to_f32())
                .collect()
        }
    };
    for (u, r) in got.iter().enumerate() {
        let what = format!("{precision:?} prescale {prescale} rank {u}");
        assert_bits(r, &want, true, &what);
    }
    n * k
}

pub use ringreduce::reference::selected;

/// The sparse all-reduce on integer-valued data, with and without a
/// residual: the result is the dense sum of what each rank selected, and
/// `sent + residual == g + old residual`. Returns elements checked.
pub fn sparse_matches_selection<C: GradBackend>(
    comm: &C,
    seed: u64,
    n: usize,
    s: Sparsity,
    with_residual: bool,
    dense_above: f64,
) -> usize {
    let k = comm.k();
    let mut rng = Rng(seed);
    // Few distinct magnitudes, so that top-K cuts through ties.
    let data: Vec<Vec<f32>> = (0..k).map(|_| values(&mut rng, n, 40, false)).collect();
    let res: Vec<Vec<f32>> = (0..k).map(|_| values(&mut rng, n, 5, false)).collect();
    let cfg = GradConfig {
        dense_above,
        ..GradConfig::default()
    };
    let mut g = GradSync::new(comm, cfg).unwrap();
    let mut t = upload(comm, &data);
    let mut r = upload(comm, &res);
    let sent = if with_residual {
        g.sparse_all_reduce(&mut t, s, Some(&mut r)).unwrap()
    } else {
        g.sparse_all_reduce(&mut t, s, None).unwrap()
    };
    let got = download(comm, &t);
    let got_r = download(comm, &r);
    let mut want = vec![0f32; n];
    for u in 0..k {
        let gp: Vec<f32> = (0..n)
            .map(|i| data[u][i] + if with_residual { res[u][i] } else { 0.0 })
            .collect();
        let sel = selected(&gp, s);
        for i in 0..n {
            if sel[i] {
                want[i] += gp[i];
            }
            if with_residual {
                let sent_i = if sel[i] { gp[i] } else { 0.0 };
                assert_eq!(
                    sent_i + got_r[u][i],
                    data[u][i] + res[u][i],
                    "rank {u} element {i}: sent + residual"
                );
                assert_eq!(
                    got_r[u][i],
                    if sel[i] { 0.0 } else { gp[i] },
                    "rank {u} residual {i}"
                );
            } else {
                assert_eq!(got_r[u][i], res[u][i], "rank {u}: residual touched");
            }
        }
    }
    for (u, v) in got.iter().enumerate() {
        assert_eq!(v, &want, "{s:?} rank {u} ({sent:?})");
    }
    n * k
}

/// The half-precision and sparse results of fixed inputs (`k` ranks of
/// `n`), for comparing two backends bit for bit.
pub fn results<C: GradBackend>(comm: &C, n: usize) -> Vec<Vec<f32>> {
    let k = comm.k();
    let mut rng = Rng(77);
    let data: Vec<Vec<f32>> = (0..k).map(|_| values(&mut rng, n, 1000, true)).collect();
    let mut g = GradSync::new(comm, GradConfig::default()).unwrap();
    let mut out = Vec::new();
    for p in [Precision::F16, Precision::Bf16] {
        let mut t = upload(comm, &data);
        g.all_reduce_half(&mut t, p, true).unwrap();
        out.push(download(comm, &t).concat());
    }
    for s in [Sparsity::TopK(0.01), Sparsity::Threshold(900.0)] {
        let mut t = upload(comm, &data);
        let mut r = upload(comm, &data);
        g.sparse_all_reduce(&mut t, s, Some(&mut r)).unwrap();
        out.push(download(comm, &t).concat());
        out.push(download(comm, &r).concat());
    }
    let mut list: Vec<Tensor<C>> = [n / 3, 0, n - n / 3]
        .iter()
        .map(|&m| {
            upload(
                comm,
                &data.iter().map(|d| d[..m].to_vec()).collect::<Vec<_>>(),
            )
        })
        .collect();
    g.fused_all_reduce(&mut list).unwrap();
    out.push(
        list.iter()
            .flat_map(|t| download(comm, t).concat())
            .collect(),
    );
    out
}
