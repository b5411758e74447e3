//! Checks run on one rank of a hierarchical job through the interfaces
//! generic code uses: the gradient layer (fused dense all-reduces, half
//! precision and sparse selection compressed only between nodes, against
//! `reference::hierarchical_all_reduce_wire` or the plain hierarchical
//! reference, residuals included), and `Collectives`' region shapes
//! (a sub-range, the in-place layouts, split buffers), guards included.

use crate::data::inputs;
use ringreduce::grad::bucket::{plan, Bucket, Item};
use ringreduce::grad::{GradBackend, Wire};
use ringreduce::nodes::Nodes;
use ringreduce::reference::{
    hierarchical_all_reduce, hierarchical_all_reduce_wire, hierarchical_reduce_scatter,
};
use ringreduce::{
    Collective, Collectives, GradConfig, GradSync, Op, Precision, Region, Result, Sparsity,
};

/// Bits of `got` that differ from `want`, and any length difference.
fn differing(got: &[f32], want: &[f32]) -> usize {
    got.iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count()
        + got.len().abs_diff(want.len())
}

/// What one rank checks: `(cases, wrong elements, lines about each wrong
/// case)`.
#[derive(Default)]
pub struct Checked {
    pub cases: usize,
    pub wrong: usize,
    pub notes: Vec<String>,
}

impl Checked {
    fn add(&mut self, what: &str, wrong: usize) {
        self.cases += 1;
        self.wrong += wrong;
        if wrong > 0 {
            self.notes.push(format!("wrong {wrong} ({what})"));
        }
    }
}

/// Every rank's tensors of `lens` (one list per rank, by job rank).
fn tensors(seed: u64, world: usize, lens: &[usize]) -> Vec<Vec<Vec<f32>>> {
    let per: Vec<Vec<Vec<f32>>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| inputs::<f32>(seed + i as u64, world, n))
        .collect();
    (0..world)
        .map(|r| per.iter().map(|t| t[r].clone()).collect())
        .collect()
}

/// The gradient layer's calls on `comm`, this process's rank `rank` of a
/// job over `nodes`.
pub fn grad_cases<C: GradBackend>(comm: &C, nodes: &Nodes, rank: usize) -> Result<Checked> {
    let world = nodes.world();
    let algorithm_for =
        |c: Collective, n: usize| comm.algorithm_for::<f32>(c, n).expect("an algorithm");
    let ring = comm.ring_order();
    let mut out = Checked::default();
    // Multiples of 4: a dense bucket aligns each tensor to 4 elements, and
    // padding would shift the shards the references cut.
    let lens = [1000usize, 4, 40_000, 0, 16];
    let dense_above = GradConfig::default().dense_above;
    // One bucket holds them all, so each call's reference is that of the
    // concatenation.
    let cfg = GradConfig {
        bucket_bytes: 1 << 20,
        ..GradConfig::default()
    };
    let mut g = GradSync::new(comm, cfg)?;
    let upload = |list: &[Vec<f32>]| -> Result<Vec<Vec<C::Buf<f32>>>> {
        list.iter()
            .map(|t| Ok(vec![comm.upload(rank, t)?]))
            .collect()
    };
    let download = |list: &[Vec<C::Buf<f32>>]| -> Result<Vec<f32>> {
        let mut all = Vec::new();
        for t in list {
            all.extend(comm.download(rank, &t[0])?);
        }
        Ok(all)
    };
    let concat =
        |all: &[Vec<Vec<f32>>]| -> Vec<Vec<f32>> { all.iter().map(|l| l.concat()).collect() };

    // Dense, fused.
    for (i, average) in [false, true].into_iter().enumerate() {
        let all = tensors((11 << 32) | (i as u64 * 100), world, &lens);
        let mut t = upload(&all[rank])?;
        let mut gg = GradSync::new(
            comm,
            GradConfig {
                average,
                ..g.config().clone()
            },
        )?;
        gg.fused_all_reduce(&mut t)?;
        let flat = concat(&all);
        let refs: Vec<&[f32]> = flat.iter().map(Vec::as_slice).collect();
        let op = if average { Op::Avg } else { Op::Sum };
        let want = hierarchical_all_reduce(&refs, nodes, algorithm_for, ring, op);
        out.add(
            &format!("fused, average {average}"),
            differing(&download(&t)?, &want),
        );
    }

    // Half precision: one tensor, and fused.
    for (i, (precision, prescale)) in [(Precision::F16, true), (Precision::Bf16, false)]
        .into_iter()
        .enumerate()
    {
        let wire = Wire::Half {
            precision,
            prescale,
        };
        let mut all = inputs::<f32>(12 << 32 | i as u64, world, 40_001);
        if precision == Precision::Bf16 {
            // Magnitudes 2^10 apart from rank to rank (bf16 has f32's
            // range): the nodes' halves then round when summed in f32, so
            // the node order shows in the bits.
            for (r, v) in all.iter_mut().enumerate() {
                let scale = (10.0 * r as f32).exp2();
                v.iter_mut().for_each(|x| *x *= scale);
            }
        }
        let mut t = vec![comm.upload(rank, &all[rank])?];
        g.all_reduce_half(&mut t, precision, prescale)?;
        let refs: Vec<&[f32]> = all.iter().map(Vec::as_slice).collect();
        let want = hierarchical_all_reduce_wire(&refs, nodes, algorithm_for, ring, wire, None);
        out.add(
            &format!("{precision:?}, prescale {prescale}"),
            differing(&comm.download(rank, &t[0])?, &want),
        );

        let all = tensors((13 << 32) | (i as u64 * 100), world, &lens);
        let mut t = upload(&all[rank])?;
        g.fused_all_reduce_half(&mut t, precision, prescale)?;
        let flat = concat(&all);
        let refs: Vec<&[f32]> = flat.iter().map(Vec::as_slice).collect();
        let want = hierarchical_all_reduce_wire(&refs, nodes, algorithm_for, ring, wire, None);
        out.add(
            &format!("fused {precision:?}, prescale {prescale}"),
            differing(&download(&t)?, &want),
        );
    }

    // Sparse: top-K with a residual, a threshold without, a share that
    // goes dense; then fused.
    let sparse = [
        (Sparsity::TopK(0.01), true),
        (Sparsity::Threshold(20.0), false),
        (Sparsity::TopK(0.5), true),
    ];
    for (i, (sparsity, with_residual)) in sparse.into_iter().enumerate() {
        let wire = Wire::Sparse {
            sparsity,
            dense_above,
        };
        let seed = (14 << 32) | (i as u64 * 100);
        let all = inputs::<f32>(seed, world, 40_001);
        let mut res = inputs::<f32>(seed + 1, world, 40_001);
        let mut t = vec![comm.upload(rank, &all[rank])?];
        let mut r = vec![comm.upload(rank, &res[rank])?];
        let sent = if with_residual {
            g.sparse_all_reduce(&mut t, sparsity, Some(&mut r))?
        } else {
            g.sparse_all_reduce(&mut t, sparsity, None)?
        };
        let refs: Vec<&[f32]> = all.iter().map(Vec::as_slice).collect();
        let want = hierarchical_all_reduce_wire(
            &refs,
            nodes,
            algorithm_for,
            ring,
            wire,
            with_residual.then_some(&mut res[..]),
        );
        let what = format!("{sparsity:?}, residual {with_residual}");
        out.add(&what, differing(&comm.download(rank, &t[0])?, &want));
        if with_residual {
            out.add(
                &format!("{what}: the residual"),
                differing(&comm.download(rank, &r[0])?, &res[rank]),
            );
        }
        // Top-K sends the same count from every node; on one node, or
        // above the dense share, nothing goes as pairs.
        let c = 40_001 / nodes.per_node();
        let dense = nodes.is_one_node() || matches!(sparsity, Sparsity::TopK(f) if f > dense_above);
        let pairs_ok = match sparsity {
            _ if dense => sent.dense && sent.pairs == 0,
            Sparsity::TopK(f) => {
                !sent.dense
                    && sent.pairs
                        == Sparsity::k_of(f, c as u64) + (40_001 - c * nodes.per_node()) as u64
            }
            // What passes a threshold depends on the data: dense sends no
            // pairs; sparse sends at least the tail.
            Sparsity::Threshold(_) => {
                sent.dense == (sent.pairs == 0)
                    && (sent.dense || sent.pairs >= (40_001 - c * nodes.per_node()) as u64)
            }
        };
        out.add(&format!("{what}: sent {sent:?}"), usize::from(!pairs_ok));
    }
    {
        let sparsity = Sparsity::TopK(0.01);
        let wire = Wire::Sparse {
            sparsity,
            dense_above,
        };
        let all = tensors(15 << 32, world, &lens);
        let res = tensors(16 << 32, world, &lens);
        let mut t = upload(&all[rank])?;
        let mut r = upload(&res[rank])?;
        g.fused_sparse_all_reduce(&mut t, sparsity, Some(&mut r))?;
        let flat = concat(&all);
        let refs: Vec<&[f32]> = flat.iter().map(Vec::as_slice).collect();
        let mut flat_res = concat(&res);
        let want = hierarchical_all_reduce_wire(
            &refs,
            nodes,
            algorithm_for,
            ring,
            wire,
            Some(&mut flat_res[..]),
        );
        out.add("fused top-K", differing(&download(&t)?, &want));
        out.add(
            "fused top-K: the residual",
            differing(&download(&r)?, &flat_res[rank]),
        );
    }

    // Dense over several buckets, which a job that spans nodes keeps two
    // in flight (one bucket's step between nodes runs while the next is
    // reduced inside its node): fused, with a tensor too long for a bucket
    // among them, and gradients stored in their buckets. Each bucket's
    // reference is the all-reduce of its own contents.
    let cap = 1024;
    let small = GradConfig {
        bucket_bytes: cap * 4,
        ..g.config().clone()
    };
    let op = if small.average { Op::Avg } else { Op::Sum };
    let lens = [1000usize, 4, 512, 0, 16, 600, 3000, 200, 64, 1020];
    let buckets = plan(&lens, cap);
    out.add(
        "several buckets, two of them packed in a row",
        usize::from(buckets.len() < 5),
    );
    let all = tensors(13 << 32, world, &lens);
    let mut t = upload(&all[rank])?;
    GradSync::new(comm, small.clone())?.fused_all_reduce(&mut t)?;
    let starts: Vec<usize> = lens
        .iter()
        .scan(0, |at, &n| {
            *at += n;
            Some(*at - n)
        })
        .collect();
    let mut want = vec![0.0f32; lens.iter().sum()];
    for b in &buckets {
        let items = match b {
            Bucket::Packed { items, .. } => items.clone(),
            &Bucket::Alone { tensor } => vec![Item {
                tensor,
                offset: 0,
                len: lens[tensor],
            }],
        };
        let len = items.last().map_or(0, |i| i.offset + i.len);
        let contents: Vec<Vec<f32>> = (0..world)
            .map(|r| {
                let mut bucket = vec![0.0f32; len];
                for i in &items {
                    bucket[i.offset..i.offset + i.len].copy_from_slice(&all[r][i.tensor]);
                }
                bucket
            })
            .collect();
        let refs: Vec<&[f32]> = contents.iter().map(Vec::as_slice).collect();
        let reduced = hierarchical_all_reduce(&refs, nodes, algorithm_for, ring, op);
        for i in &items {
            want[starts[i.tensor]..starts[i.tensor] + i.len]
                .copy_from_slice(&reduced[i.offset..i.offset + i.len]);
        }
    }
    out.add("fused, several buckets", differing(&download(&t)?, &want));

    // The same list through a streaming session, pushed in list order, so
    // that its buckets are the fused call's.
    let mut t = upload(&all[rank])?;
    let mut gs = GradSync::new(comm, small.clone())?;
    let own = comm.own_queues();
    let mut session = gs.session(own.clone())?;
    for tensor in t.iter_mut() {
        session.push(tensor)?;
    }
    session.wait(&own)?;
    out.add(
        "a session, several buckets",
        differing(&download(&t)?, &want),
    );

    let mut gv = GradSync::new(comm, small)?;
    let mut grads = gv.bucketed(&lens)?;
    let blens: Vec<usize> = (0..grads.buckets())
        .map(|b| C::len_of(&grads.bucket(b)[0]))
        .collect();
    let data = tensors(17 << 32, world, &blens);
    for (b, d) in data[rank].iter().enumerate() {
        comm.write(rank, &mut grads.bucket_mut(b)[0], 0, d)?;
    }
    gv.all_reduce_bucketed(&mut grads)?;
    let mut wrong = usize::from(blens.len() < 3);
    for b in 0..blens.len() {
        let refs: Vec<&[f32]> = data.iter().map(|d| d[b].as_slice()).collect();
        let reduced = hierarchical_all_reduce(&refs, nodes, algorithm_for, ring, op);
        wrong += differing(&comm.download(rank, &grads.bucket(b)[0])?, &reduced);
    }
    out.add("gradients in their buckets, several buckets", wrong);
    Ok(out)
}

/// `Collectives`' region shapes on `comm`: an all-reduce of a sub-range,
/// a reduce-scatter and an all-gather in their in-place layouts, and an
/// all-gather between two ranges of one buffer; every element outside
/// the output must keep its value.
pub fn region_cases<C: Collectives>(comm: &C, nodes: &Nodes, rank: usize) -> Result<Checked> {
    let world = nodes.world();
    let algorithm_for =
        |c: Collective, n: usize| comm.algorithm_for::<f32>(c, n).expect("an algorithm");
    let ring = comm.ring_order();
    let mut out = Checked::default();
    let (n, guard) = (1001usize, 5usize);
    // All-reduce of elements guard..guard + n of a longer buffer.
    let all = inputs::<f32>(21 << 32, world, n + 2 * guard);
    let mut b = comm.upload(rank, &all[rank])?;
    let at = guard..guard + n;
    comm.all_reduce(
        &mut [Region::InPlace {
            buf: &mut b,
            at: at.clone(),
        }],
        Op::Sum,
    )?;
    let parts: Vec<&[f32]> = all.iter().map(|v| &v[at.clone()]).collect();
    let mut want = all[rank].clone();
    want[at].copy_from_slice(&hierarchical_all_reduce(
        &parts,
        nodes,
        algorithm_for,
        ring,
        Op::Sum,
    ));
    out.add(
        "all-reduce of a sub-range",
        differing(&comm.download(rank, &b)?, &want),
    );

    // Reduce-scatter in place: block `rank` of the buffer is the output.
    let c = 37;
    let all = inputs::<f32>(22 << 32, world, world * c);
    let mut b = comm.upload(rank, &all[rank])?;
    comm.reduce_scatter(
        &mut [Region::InPlace {
            buf: &mut b,
            at: 0..world * c,
        }],
        Op::Max,
    )?;
    let got = comm.download(rank, &b)?;
    let mut want = all[rank].clone();
    for i in 0..c {
        want[rank * c + i] = (0..world)
            .map(|r| all[r][rank * c + i])
            .fold(f32::NEG_INFINITY, f32::max);
    }
    out.add("reduce-scatter in place (max)", differing(&got, &want));

    // All-gather in place: block `rank` is the input.
    let all = inputs::<f32>(23 << 32, world, world * c);
    let mut b = comm.upload(rank, &all[rank])?;
    comm.all_gather(&mut [Region::InPlace {
        buf: &mut b,
        at: 0..world * c,
    }])?;
    let want: Vec<f32> = (0..world)
        .flat_map(|r| all[r][r * c..(r + 1) * c].to_vec())
        .collect();
    out.add(
        "all-gather in place",
        differing(&comm.download(rank, &b)?, &want),
    );

    // All-gather from the head of a buffer into the rest of it.
    let all = inputs::<f32>(24 << 32, world, c + world * c + guard);
    let mut b = comm.upload(rank, &all[rank])?;
    comm.all_gather(&mut [Region::Split {
        buf: &mut b,
        send_at: 0..c,
        recv_at: c..c + world * c,
    }])?;
    let mut want = all[rank].clone();
    for r in 0..world {
        want[c + r * c..c + (r + 1) * c].copy_from_slice(&all[r][..c]);
    }
    out.add(
        "all-gather between ranges of one buffer",
        differing(&comm.download(rank, &b)?, &want),
    );

    // All-reduce out of place, from a whole buffer into a sub-range of
    // another: the input and the output's guards stay as they were.
    let all = inputs::<f32>(25 << 32, world, n);
    let parts: Vec<&[f32]> = all.iter().map(Vec::as_slice).collect();
    let reduced = hierarchical_all_reduce(&parts, nodes, algorithm_for, ring, Op::Sum);
    let send = comm.upload(rank, &all[rank])?;
    let mut recv = comm.upload(rank, &vec![-7.0f32; n + 2 * guard])?;
    comm.all_reduce(
        &mut [Region::OutOfPlace {
            send: &send,
            send_at: 0..n,
            recv: &mut recv,
            recv_at: guard..guard + n,
        }],
        Op::Sum,
    )?;
    let mut want = vec![-7.0f32; n + 2 * guard];
    want[guard..guard + n].copy_from_slice(&reduced);
    out.add(
        "all-reduce out of place",
        differing(&comm.download(rank, &recv)?, &want)
            + differing(&comm.download(rank, &send)?, &all[rank]),
    );

    // All-reduce between apart ranges of one buffer; then ranges that
    // overlap otherwise than in place, refused on every rank.
    let mut b = comm.upload(rank, &[all[rank].clone(), vec![-7.0; n]].concat())?;
    comm.all_reduce(
        &mut [Region::Split {
            buf: &mut b,
            send_at: 0..n,
            recv_at: n..2 * n,
        }],
        Op::Sum,
    )?;
    let want = [all[rank].clone(), reduced].concat();
    out.add(
        "all-reduce between ranges of one buffer",
        differing(&comm.download(rank, &b)?, &want),
    );
    let e = comm.all_reduce(
        &mut [Region::Split {
            buf: &mut b,
            send_at: 0..n,
            recv_at: 1..n + 1,
        }],
        Op::Sum,
    );
    let typed = matches!(e, Err(ringreduce::Error::InPlaceMisplaced { .. }));
    out.add(
        &format!("an all-reduce between overlapping ranges: {e:?}"),
        usize::from(!typed),
    );

    // Reduce-scatter and all-gather out of place between sub-ranges of
    // longer buffers: the guards around them stay as they were.
    let all = inputs::<f32>(26 << 32, world, world * c + 2 * guard);
    let send = comm.upload(rank, &all[rank])?;
    let mut recv = comm.upload(rank, &vec![-7.0f32; c + 2 * guard])?;
    comm.reduce_scatter(
        &mut [Region::OutOfPlace {
            send: &send,
            send_at: guard..guard + world * c,
            recv: &mut recv,
            recv_at: guard..guard + c,
        }],
        Op::Sum,
    )?;
    let parts: Vec<&[f32]> = all.iter().map(|v| &v[guard..guard + world * c]).collect();
    let mut want = vec![-7.0f32; c + 2 * guard];
    let algorithm = algorithm_for(Collective::ReduceScatter, c);
    want[guard..guard + c].copy_from_slice(
        &hierarchical_reduce_scatter(&parts, nodes, algorithm, ring, Op::Sum)[rank],
    );
    out.add(
        "reduce-scatter out of place between sub-ranges",
        differing(&comm.download(rank, &recv)?, &want),
    );
    let send = comm.upload(rank, &all[rank][..c + guard])?;
    let mut recv = comm.upload(rank, &vec![-7.0f32; world * c + 2 * guard])?;
    comm.all_gather(&mut [Region::OutOfPlace {
        send: &send,
        send_at: guard..guard + c,
        recv: &mut recv,
        recv_at: guard..guard + world * c,
    }])?;
    let mut want = vec![-7.0f32; world * c + 2 * guard];
    for r in 0..world {
        want[guard + r * c..guard + (r + 1) * c].copy_from_slice(&all[r][guard..guard + c]);
    }
    out.add(
        "all-gather out of place between sub-ranges",
        differing(&comm.download(rank, &recv)?, &want),
    );

    // A region of another length is a typed error.
    let mut short = comm.upload(rank, &vec![0f32; c])?;
    let e = comm.reduce_scatter(
        &mut [Region::InPlace {
            buf: &mut short,
            at: 0..c.min(world + 1),
        }],
        Op::Sum,
    );
    let typed = matches!(e, Err(ringreduce::Error::InPlaceLength { .. })) || world == 1;
    out.add(
        &format!("an in-place length of no whole blocks: {e:?}"),
        usize::from(!typed),
    );
    Ok(out)
}
