//! Property tests of the gradient layer's kernels. The sparse selection
//! against a full sort: top-K picks exactly the K largest magnitudes
//! (negative values included, ties to the lower index), the pairs come in
//! index order, padded (the any-order pass's once sorted), the residual
//! keeps every element not sent, and the result does not depend on how
//! many lanes run the tasks or on the input's alignment. The element-wise tasks
//! against a scalar reference, at every alignment (quads and tails).

use proptest::prelude::*;
use ringreduce_kernels::grad::abi::{
    candidates_for, half_arg, tiles_for, HalfFormat, SelectState, Task, TaskKind, PAD_INDEX,
    SELECT_PASSES,
};
use ringreduce_kernels::grad::lanes::SeqLanes;
use ringreduce_kernels::grad::run_phase;

/// Runs `t` as `lanes` lanes, phase by phase (one-block tasks too).
fn run(t: Task, lanes: u64) {
    let phases = TaskKind::from_u64(t.kind).unwrap().phases();
    for p in 0..phases {
        for lane in 0..lanes {
            unsafe { run_phase(&SeqLanes::new(lane, lanes), &t, p) };
        }
    }
}

/// The top-`kk` (index, bits) pairs of `x` as the kernels write them,
/// padded to `cap`.
fn kernel_top_k(x: &[f32], kk: u64, cap: u64, lanes: u64) -> Vec<u64> {
    kernel_top_k_with(x, kk, cap, lanes, false, false).pairs
}

/// What a selection wrote, with the state's word on how.
struct Selected {
    /// Pairs in index order (the any-order pass's sorted), then padding.
    pairs: Vec<u64>,
    /// The residual's bits: 0 where selected, the value elsewhere.
    residual: Vec<u32>,
    /// Magnitudes the narrowing pass listed.
    candidates: u64,
    /// Whether the any-order pass wrote the selection.
    unordered: bool,
}

/// As [`kernel_top_k`], as the sparse paths run it: where `listed`, the
/// input copied to a work array by the feedback task, which counts the
/// first pass, and a candidate list for the later passes; where
/// `any_order`, the any-order pass before the ordered compaction, which
/// then does nothing if that pass wrote the selection.
fn kernel_top_k_with(
    x: &[f32],
    kk: u64,
    cap: u64,
    lanes: u64,
    listed: bool,
    any_order: bool,
) -> Selected {
    let n = x.len() as u64;
    let tiles = tiles_for(n);
    let mut list = vec![0u32; candidates_for(n) as usize];
    let mut work = x.to_vec();
    if listed {
        work.iter_mut().for_each(|w| *w = f32::NAN);
    }
    let mut state: Box<SelectState> = Box::new(unsafe { std::mem::zeroed() });
    let mut counts = vec![0u64; 2 * tiles as usize];
    let mut pairs = vec![0u64; cap as usize];
    // Poisoned: every element's residual must be written.
    let mut residual = vec![0xdead_beefu32; x.len()];
    let base = Task {
        src: work.as_ptr() as u64,
        state: &mut *state as *mut SelectState as u64,
        aux: counts.as_mut_ptr() as u64,
        n,
        tiles,
        ..Task::default()
    };
    let k = |kind: TaskKind, arg| Task {
        kind: kind as u64,
        arg,
        ..base
    };
    run(k(TaskKind::SelectTopK, kk), lanes);
    if listed {
        let copy = Task {
            kind: TaskKind::Feedback as u64,
            src: x.as_ptr() as u64,
            dst: work.as_mut_ptr() as u64,
            aux: 0,
            ..base
        };
        run(copy, lanes);
    }
    for p in 0..SELECT_PASSES {
        if listed && p == 0 {
            run(k(TaskKind::PickDigit, p), lanes);
            continue;
        }
        let aux2 = if listed { list.as_mut_ptr() as u64 } else { 0 };
        run(
            Task {
                aux2,
                ..k(TaskKind::Histogram, p)
            },
            lanes,
        );
        run(k(TaskKind::PickDigit, p), lanes);
    }
    let write = Task {
        dst: pairs.as_mut_ptr() as u64,
        aux2: residual.as_mut_ptr() as u64,
        ..k(TaskKind::WriteSelected, cap)
    };
    if any_order {
        run(
            Task {
                kind: TaskKind::WriteAnyOrder as u64,
                ..write
            },
            lanes,
        );
    }
    run(k(TaskKind::CountTiles, 0), lanes);
    run(k(TaskKind::ScanTiles, 0), lanes);
    run(write, lanes);
    run(
        Task {
            kind: TaskKind::ResidualUntied as u64,
            ..write
        },
        lanes,
    );
    assert_eq!(state.count, kk.min(n));
    let unordered = state.unordered != 0;
    if unordered {
        let written = (state.count.min(cap)) as usize;
        pairs[..written].sort_by_key(|p| p & 0xffff_ffff);
    }
    Selected {
        pairs,
        residual,
        candidates: state.candidates,
        unordered,
    }
}

/// The residual a selection of `pairs` (index order, padded) leaves.
fn residual_of(x: &[f32], pairs: &[u64]) -> Vec<u32> {
    let mut r: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    for p in pairs {
        if let Some(e) = r.get_mut((p & 0xffff_ffff) as usize) {
            *e = 0;
        }
    }
    r
}

/// Whether the top `kk` of `x` takes every element tied with the `kk`-th
/// largest magnitude.
fn takes_every_tie(x: &[f32], kk: usize) -> bool {
    let mut m: Vec<u32> = x.iter().map(|v| v.to_bits() & 0x7fff_ffff).collect();
    m.sort_unstable_by(|a, b| b.cmp(a));
    m.get(kk).is_none_or(|&next| next != m[kk - 1])
}

fn sorted_top_k(x: &[f32], kk: usize, cap: usize) -> Vec<u64> {
    let mag = |i: usize| x[i].to_bits() & 0x7fff_ffff;
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| mag(b).cmp(&mag(a)).then(a.cmp(&b)));
    let mut pick: Vec<usize> = idx.into_iter().take(kk).collect();
    pick.sort();
    let mut out: Vec<u64> = pick
        .into_iter()
        .map(|i| i as u64 | ((x[i].to_bits() as u64) << 32))
        .collect();
    out.resize(cap, PAD_INDEX as u64);
    out
}

fn values() -> impl Strategy<Value = Vec<f32>> {
    prop_oneof![
        // Few distinct values: many ties, both signs.
        prop::collection::vec((-6i32..=6).prop_map(|v| v as f32 * 0.5), 1..3000),
        // Any finite floats, with signed zeros and subnormals.
        prop::collection::vec(
            any::<u32>()
                .prop_map(f32::from_bits)
                .prop_filter("finite", |x| x.is_finite()),
            1..3000
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn top_k_is_the_k_largest_magnitudes(x in values(), frac in 0.0001f64..=1.0, lanes in 1u64..9, extra in 0u64..4, off in 0usize..4) {
        // An offset moves the input off the quad alignment.
        let x = &x[off.min(x.len() - 1)..];
        let n = x.len() as u64;
        let kk = ((frac * n as f64).ceil() as u64).clamp(1, n);
        let cap = kk + extra;
        let want = sorted_top_k(x, kk as usize, cap as usize);
        let residual = residual_of(x, &want);
        // Plain; with the candidate list (whether it held the octave or
        // not); and with the any-order pass, which writes the selection
        // exactly where every tie is taken.
        for (listed, any_order) in [(false, false), (true, false), (true, true), (false, true)] {
            let got = kernel_top_k_with(x, kk, cap, lanes, listed, any_order);
            prop_assert_eq!(&got.pairs, &want, "listed {} any order {}", listed, any_order);
            prop_assert_eq!(&got.residual, &residual, "listed {} any order {}", listed, any_order);
            prop_assert_eq!(got.unordered, any_order && takes_every_tie(x, kk as usize));
        }
    }

    #[test]
    fn element_wise_tasks_match_a_scalar_reference(
        v in prop::collection::vec(-1.0e6f32..1.0e6, 0..70),
        r in prop::collection::vec(-1.0e6f32..1.0e6, 70),
        lanes in 1u64..9,
        offs in (0usize..4, 0usize..4, 0usize..4),
    ) {
        let n = v.len();
        // 16-byte-aligned storage, then offsets of 0-3 elements.
        let mut mem = vec![[0u32; 4]; 3 * 20 + 6];
        let base = mem.as_mut_ptr() as *mut u32;
        let (a, b, d) = unsafe { (base.add(offs.0), base.add(80 + offs.1), base.add(160 + offs.2)) };
        for i in 0..n {
            unsafe {
                a.add(i).write(v[i].to_bits());
                b.add(i).write(r[i].to_bits());
            }
        }
        let task = |kind: TaskKind, src: *const u32, aux: *const u32, dst: *mut u32, arg| Task {
            kind: kind as u64,
            src: src as u64,
            aux: aux as u64,
            dst: dst as u64,
            n: n as u64,
            arg,
            ..Task::default()
        };
        let read = |p: *const u32| (0..n).map(|i| unsafe { p.add(i).read() }).collect::<Vec<u32>>();
        run(task(TaskKind::Feedback, a, b, d, 0), lanes);
        let want: Vec<u32> = (0..n).map(|i| (v[i] + r[i]).to_bits()).collect();
        prop_assert_eq!(read(d), want.clone());
        // With a selection's state: the same sums, and their first digits
        // counted (with and without a residual).
        for (aux, want) in [(b as *const u32, want), (std::ptr::null(), v.iter().map(|x| x.to_bits()).collect())] {
            let mut state: Box<SelectState> = Box::new(unsafe { std::mem::zeroed() });
            let state_at = &mut *state as *mut SelectState as u64;
            run(Task { kind: TaskKind::SelectTopK as u64, state: state_at, arg: 1, ..Task::default() }, lanes);
            run(task(TaskKind::Fill, a, b, d, 7), lanes);
            run(Task { state: state_at, ..task(TaskKind::Feedback, a, aux, d, 0) }, lanes);
            prop_assert_eq!(read(d), want.clone());
            let mut hist = [0u32; 256];
            for w in &want {
                hist[((w & 0x7fff_ffff) >> 24) as usize] += 1;
            }
            prop_assert_eq!(state.hist, hist);
        }
        run(task(TaskKind::Fill, a, b, d, 7), lanes);
        prop_assert_eq!(read(d), vec![7; n]);
        // To halves at `d` (as u16s), and back into `b`.
        let h = d as *mut u16;
        for (format, div) in [(HalfFormat::F16, 1.0f32), (HalfFormat::F16, 8.0), (HalfFormat::Bf16, 3.0)] {
            run(task(TaskKind::ToHalf, a, std::ptr::null(), h as *mut u32, half_arg(format, div)), lanes);
            let halves: Vec<u16> = (0..n).map(|i| unsafe { h.add(i).read() }).collect();
            let want: Vec<u16> = v.iter().map(|&x| match format {
                HalfFormat::F16 => half::f16::from_f32(x / div).to_bits(),
                HalfFormat::Bf16 => half::bf16::from_f32(x / div).to_bits(),
            }).collect();
            prop_assert_eq!(&halves, &want);
            run(task(TaskKind::FromHalf, h as *const u32, std::ptr::null(), b, format as u64), lanes);
            let back: Vec<u32> = halves.iter().map(|&x| match format {
                HalfFormat::F16 => half::f16::from_bits(x).to_f32().to_bits(),
                HalfFormat::Bf16 => half::bf16::from_bits(x).to_f32().to_bits(),
            }).collect();
            prop_assert_eq!(read(b), back);
        }
    }
}

#[test]
fn negative_values_are_picked_by_magnitude() {
    let x = [1.0f32, -9.0, 3.0, -2.0, 9.0, 0.0];
    let got = kernel_top_k(&x, 3, 3, 2);
    let idx: Vec<u64> = got.iter().map(|p| p & 0xffff_ffff).collect();
    assert_eq!(idx, vec![1, 2, 4]);
}

/// The candidate list's two cases, each against the sort: normally
/// distributed values, whose octave of the K-th largest fits the list, and
/// values in one octave, which overflow it so the later passes read every
/// element again.
#[test]
fn the_candidate_list_fits_or_falls_back() {
    // A fixed normal sample (Box-Muller over a small LCG).
    let mut seed = 12345u64;
    let mut uniform = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let normal: Vec<f32> = (0..20_000)
        .map(|_| {
            ((-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos()) as f32
                * 1e-3
        })
        .collect();
    let one_octave: Vec<f32> = (0..20_000)
        .map(|i| 1.0 + (i % 977) as f32 / 1024.0)
        .collect();
    for (x, fits) in [(&normal, true), (&one_octave, false)] {
        let n = x.len() as u64;
        for kk in [20, 200] {
            for lanes in [1, 5] {
                let got = kernel_top_k_with(x, kk, kk, lanes, true, false);
                let listed = got.candidates;
                assert_eq!(got.pairs, sorted_top_k(x, kk as usize, kk as usize));
                assert_eq!(listed <= candidates_for(n), fits, "{listed} listed");
                assert!(listed > 0);
            }
        }
    }
}

/// The scatter-add rebuilds one range of what the pairs index: pairs
/// outside `aux..arg` and padding are skipped, the rest land at
/// `index - aux`, added to what is there.
#[test]
fn scatter_add_takes_its_range_of_the_indices() {
    let pair = |i: u32, v: f32| i as u64 | ((v.to_bits() as u64) << 32);
    let pairs = [
        pair(0, 1.0),
        pair(5, 2.0),
        pair(3, 4.0),
        pair(PAD_INDEX, 8.0),
        pair(7, 16.0),
        pair(4, 32.0),
        pair(2, 64.0),
    ];
    for lanes in [1, 3] {
        let mut dst = vec![0.5f32; 4];
        let t = Task {
            kind: TaskKind::ScatterAdd as u64,
            src: pairs.as_ptr() as u64,
            dst: dst.as_mut_ptr() as u64,
            aux: 3,
            n: pairs.len() as u64,
            arg: 7,
            ..Task::default()
        };
        run(t, lanes);
        // Indices 3, 4 and 5 of 3..7 (not 0, 2, 7 or the padding).
        assert_eq!(dst, vec![4.5, 32.5, 2.5, 0.5]);
    }
}
