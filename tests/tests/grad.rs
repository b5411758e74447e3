//! The gradient layer on the CPU execution: fused against per-tensor,
//! the streaming session, half precision against its reference, sparse
//! against a sort-based selection, and every bad input.

use ringreduce::grad::GradBackend;
use ringreduce::Collectives;
use ringreduce::{
    Algo, CommConfig, CpuCommunicator, Error, GradConfig, GradSync, HostBuffer, Precision, Sparsity,
};
use ringreduce_tests::data::Rng;
use ringreduce_tests::grad::{
    bucketed_matches_fused, download, fill, fused_matches_per_tensor, half_matches_reference,
    list_data, session_matches_fused, sparse_matches_selection, sync_with_cap, upload, values,
};

#[test]
fn fused_equals_one_all_reduce_per_tensor() {
    let comm = CpuCommunicator::new(4).unwrap();
    // Many small tensors, a cap smaller than some of them.
    let a = fused_matches_per_tensor(&comm, 1, 500, 3000, 8 << 10, false);
    // Few large ones, up to 2^20 elements.
    let b = fused_matches_per_tensor(&comm, 2, 6, 1 << 20, 1 << 20, false);
    // One tensor.
    let c = fused_matches_per_tensor(&comm, 3, 2, 5000, 4 << 10, false);
    assert!(a > 0 && b > 0 && c > 0);
}

#[test]
fn fused_is_bitwise_for_rounding_sums_on_the_direct_algorithms() {
    // Direct algorithms fold in user-rank order wherever an element sits.
    let cfg = CommConfig::default()
        .algorithm(Algo::OneShot)
        .direct_bytes(1 << 20);
    let comm = CpuCommunicator::with_config(3, cfg).unwrap();
    assert!(fused_matches_per_tensor(&comm, 4, 120, 4000, 8 << 10, true) > 0);
}

#[test]
fn the_session_matches_the_whole_list() {
    let comm = CpuCommunicator::new(3).unwrap();
    assert!(session_matches_fused(&comm, 5, 40, 16 << 10) > 0);
}

#[test]
fn bucketed_gradients_equal_the_fused_all_reduce() {
    let comm = CpuCommunicator::new(4).unwrap();
    for stream in [false, true] {
        // Many small tensors, a cap smaller than some of them.
        assert!(bucketed_matches_fused(&comm, 11, 500, 3000, 8 << 10, stream) > 0);
        // Few large ones, up to 2^20 elements.
        assert!(bucketed_matches_fused(&comm, 12, 6, 1 << 20, 1 << 20, stream) > 0);
    }
}

/// The half-precision form over buckets: bitwise the packed fused call's,
/// since the buckets are laid out as it packs them (a tensor longer than
/// the cap among them, alone in both).
#[test]
fn bucketed_half_equals_fused_half() {
    let k = 3;
    let comm = CpuCommunicator::new(k).unwrap();
    let mut g = sync_with_cap(&comm, 4 << 10);
    let mut rng = Rng(21);
    let lens = [700usize, 0, 33, 2000, 5];
    let data = list_data(&mut rng, k, &lens, true);
    for p in [Precision::F16, Precision::Bf16] {
        let mut want: Vec<_> = data.iter().map(|d| upload(&comm, d)).collect();
        g.fused_all_reduce_half(&mut want, p, true).unwrap();
        let mut grads = g.bucketed(&lens).unwrap();
        fill(&comm, &mut grads, &data);
        g.all_reduce_bucketed_half(&mut grads, p, true).unwrap();
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        for (t, w) in want.iter().enumerate() {
            let Some(at) = grads.place(t).cloned() else {
                continue;
            };
            for (u, wu) in download(&comm, w).into_iter().enumerate() {
                let got = comm
                    .read(u, &grads.bucket(at.bucket)[u], at.at.clone())
                    .unwrap();
                assert_eq!(bits(got), bits(wu), "{p:?} tensor {t} rank {u}");
            }
        }
    }
}

/// The streaming form over buckets: a bad index or a second mark is a
/// typed error that reduces nothing; `wait` with nothing marked does
/// nothing; an unmarked tensor is reduced as it stands at `wait`.
#[test]
fn bucketed_session_rules() {
    let k = 2;
    let comm = CpuCommunicator::new(k).unwrap();
    let mut g = sync_with_cap(&comm, 64);
    let lens = [10, 0, 6, 30];
    let mut grads = g.bucketed(&lens).unwrap();
    let data: Vec<Vec<Vec<f32>>> = lens
        .iter()
        .map(|&n| (0..k).map(|u| vec![u as f32 + 1.0; n]).collect())
        .collect();
    fill(&comm, &mut grads, &data);
    let read = |grads: &ringreduce::grad::BucketedGrads<CpuCommunicator>, t: usize| {
        let p = grads.place(t).unwrap().clone();
        comm.read(0, &grads.bucket(p.bucket)[0], p.at).unwrap()
    };
    // Nothing marked: nothing reduced.
    g.bucketed_session(&mut grads, comm.own_queues())
        .unwrap()
        .wait(&comm.own_queues())
        .unwrap();
    assert_eq!(read(&grads, 0), vec![1.0; 10]);
    let mut s = g.bucketed_session(&mut grads, comm.own_queues()).unwrap();
    assert!(matches!(
        s.ready(4),
        Err(Error::NoSuchTensor {
            tensor: 4,
            tensors: 4
        })
    ));
    s.ready(1).unwrap(); // empty: no bucket
    assert!(matches!(s.ready(1), Err(Error::AlreadyReady(1))));
    s.ready(3).unwrap();
    assert!(matches!(s.ready(3), Err(Error::AlreadyReady(3))));
    assert!(matches!(
        s.wait(&[]),
        Err(Error::WrongStreamCount { got: 0, k: 2 })
    ));
    // Tensors 0 and 2 were never marked; the dropped session reduced them.
    for (t, n) in [(0, 10), (2, 6), (3, 30)] {
        assert_eq!(read(&grads, t), vec![3.0; n], "tensor {t}");
    }
    assert!(grads.place(1).is_none());
    assert!(matches!(
        g.bucketed_session(&mut grads, vec![]),
        Err(Error::WrongStreamCount { got: 0, k: 2 })
    ));
}

#[test]
fn half_precision_matches_its_reference() {
    for k in [3, 4] {
        let comm = CpuCommunicator::new(k).unwrap();
        for p in [Precision::F16, Precision::Bf16] {
            for prescale in [false, true] {
                half_matches_reference(&comm, 6, 10_007, p, prescale);
            }
        }
    }
}

#[test]
fn sparse_sends_what_each_rank_selected() {
    let comm = CpuCommunicator::new(4).unwrap();
    let cases = [
        Sparsity::TopK(0.01),
        Sparsity::TopK(0.1),
        Sparsity::TopK(1.0),
        Sparsity::Threshold(30.0),
        Sparsity::Threshold(0.0),
    ];
    for (i, s) in cases.into_iter().enumerate() {
        for residual in [false, true] {
            // Sparse exchange forced, then the dense fallback forced.
            for dense_above in [1.0, 0.0] {
                sparse_matches_selection(&comm, 10 + i as u64, 20_011, s, residual, dense_above);
            }
        }
    }
    // Tiny tensors: K = 1, n < k.
    sparse_matches_selection(&comm, 20, 3, Sparsity::TopK(0.01), true, 1.0);
    sparse_matches_selection(&comm, 21, 1, Sparsity::Threshold(1.0), true, 1.0);
}

#[test]
fn fused_sparse_equals_sparse_of_the_concatenation() {
    let k = 3;
    let comm = CpuCommunicator::new(k).unwrap();
    let mut rng = Rng(30);
    let lens = [5usize, 0, 1000, 17, 3];
    let total: usize = lens.iter().sum();
    let data: Vec<Vec<f32>> = (0..k).map(|_| values(&mut rng, total, 40, false)).collect();
    let res: Vec<Vec<f32>> = (0..k).map(|_| values(&mut rng, total, 5, false)).collect();
    let split = |d: &[Vec<f32>]| -> Vec<Vec<Vec<f32>>> {
        let mut at = 0;
        lens.iter()
            .map(|&n| {
                let part = d.iter().map(|v| v[at..at + n].to_vec()).collect();
                at += n;
                part
            })
            .collect()
    };
    let mut g = GradSync::new(&comm, GradConfig::default()).unwrap();
    let s = Sparsity::TopK(0.05);
    let mut whole = upload(&comm, &data);
    let mut whole_r = upload(&comm, &res);
    g.sparse_all_reduce(&mut whole, s, Some(&mut whole_r))
        .unwrap();
    let mut parts: Vec<_> = split(&data).iter().map(|d| upload(&comm, d)).collect();
    let mut parts_r: Vec<_> = split(&res).iter().map(|d| upload(&comm, d)).collect();
    g.fused_sparse_all_reduce(&mut parts, s, Some(&mut parts_r))
        .unwrap();
    let join = |ts: &[Vec<HostBuffer<f32>>]| -> Vec<Vec<f32>> {
        let per: Vec<Vec<Vec<f32>>> = ts.iter().map(|t| download(&comm, t)).collect();
        (0..k)
            .map(|u| per.iter().flat_map(|t| t[u].clone()).collect())
            .collect()
    };
    assert_eq!(join(&parts), download(&comm, &whole));
    assert_eq!(join(&parts_r), download(&comm, &whole_r));
}

/// Every bad input: a typed error, and the tensor (and residual) untouched.
#[test]
fn bad_input_is_a_typed_error_and_touches_nothing() {
    let k = 2;
    let comm = CpuCommunicator::new(k).unwrap();
    let mut g = GradSync::new(&comm, GradConfig::default()).unwrap();
    let data = vec![vec![1.5f32; 64]; k];
    let mut t = upload(&comm, &data);
    let mut r = upload(&comm, &data);
    let unchanged = |t: &Vec<HostBuffer<f32>>| download(&comm, t) == data;

    // Lengths that differ across ranks.
    let mut odd = upload(&comm, &[vec![1.5f32; 64], vec![1.5f32; 63]]);
    assert!(matches!(
        g.all_reduce(&mut odd),
        Err(Error::CountMismatch { rank: 1, .. })
    ));
    assert!(matches!(
        g.sparse_all_reduce(&mut odd, Sparsity::TopK(0.5), None),
        Err(Error::CountMismatch { .. })
    ));
    let mut list = [upload(&comm, &data), odd];
    assert!(matches!(
        g.fused_all_reduce(&mut list),
        Err(Error::CountMismatch { .. })
    ));
    assert!(unchanged(&list[0]) && unchanged(&t));
    // Thresholds and fractions.
    for th in [f32::NAN, -1.0, f32::NEG_INFINITY] {
        let e = g.sparse_all_reduce(&mut t, Sparsity::Threshold(th), Some(&mut r));
        assert!(matches!(e, Err(Error::BadThreshold(_))), "{th}: {e:?}");
    }
    for f in [0.0, -0.5, 1.5, f64::NAN] {
        let e = g.sparse_all_reduce(&mut t, Sparsity::TopK(f), Some(&mut r));
        assert!(matches!(e, Err(Error::BadFraction(_))), "{f}: {e:?}");
    }
    // A residual of the wrong length.
    let mut short = upload(&comm, &[vec![0f32; 64], vec![0f32; 10]]);
    let e = g.sparse_all_reduce(&mut t, Sparsity::TopK(0.5), Some(&mut short));
    assert!(
        matches!(
            e,
            Err(Error::ResidualLength {
                rank: 1,
                got: 10,
                want: 64
            })
        ),
        "{e:?}"
    );
    // Half precision of a tensor that is not f32.
    let mut d: Vec<HostBuffer<f64>> = (0..k)
        .map(|_| HostBuffer::from_slice(&[1.0f64; 8]))
        .collect();
    let e = g.all_reduce_half(&mut d, Precision::F16, false);
    assert!(matches!(e, Err(Error::HalfNeedsF32("double"))), "{e:?}");
    assert_eq!(d[0].to_vec(), vec![1.0f64; 8]);
    // A tensor with buffers for the wrong number of ranks.
    let mut one = vec![HostBuffer::from_slice(&[1f32; 4])];
    assert!(matches!(
        g.all_reduce(&mut one),
        Err(Error::WrongBufferCount { got: 1, k: 2 })
    ));
    assert!(unchanged(&t) && unchanged(&r));
    // `wait` with nothing pushed: a no-op, not an error.
    let s = g.session(comm.own_queues()).unwrap();
    s.wait(&comm.own_queues()).unwrap();
    assert!(unchanged(&t));
    // `wait` with the wrong number of queues: a typed error, and the
    // dropped session still reduces what was pushed.
    let mut pushed = upload(&comm, &data);
    let mut s = g.session(comm.own_queues()).unwrap();
    s.push(&mut pushed).unwrap();
    assert!(matches!(
        s.wait(&[]),
        Err(Error::WrongStreamCount { got: 0, k: 2 })
    ));
    assert_eq!(download(&comm, &pushed), vec![vec![3.0f32; 64]; k]);
}

/// The CPU execution's own results are deterministic run to run (the GPU
/// test compares the same `results` against the GPU's).
#[test]
fn results_are_deterministic() {
    let comm = CpuCommunicator::new(3).unwrap();
    let a = ringreduce_tests::grad::results(&comm, 5003);
    let b = ringreduce_tests::grad::results(&comm, 5003);
    assert_eq!(a.len(), 7);
    let bits = |v: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        v.iter()
            .map(|x| x.iter().map(|f| f.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&a), bits(&b));
}
