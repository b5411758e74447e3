//! The gradient layer's kernels (`ringreduce::grad`): the batched copy that
//! packs and unpacks buckets, the half-precision conversions, and the
//! sparse path's radix select, compaction and scatter-add. Each is a
//! data-parallel loop over [`Lanes`], run by every thread of a GPU grid or
//! by the CPU execution's lanes one after another; no result depends on
//! the number of lanes.

pub mod abi;
pub mod compact;
pub mod convert;
pub mod copy;
pub mod lanes;
pub mod select;

use crate::grad::abi::{Task, TaskKind};
use lanes::Lanes;

/// Runs phase `phase` of `t` in lane `g`. A task of several phases runs as
/// one block, with a block barrier between phases.
///
/// # Safety
/// The task's addresses must be valid for what its kind reads and writes,
/// for its `n`, and suitably aligned (4 bytes for `f32`, 8 for pairs and
/// the state, 2 for halves).
pub unsafe fn run_phase<L: Lanes>(g: &L, t: &Task, phase: u32) {
    let Some(kind) = TaskKind::from_u64(t.kind) else {
        return;
    };
    match kind {
        TaskKind::Copy => copy::run(g, t),
        TaskKind::CopyRange => copy::range(g, t),
        TaskKind::ToHalf => convert::to_half(g, t),
        TaskKind::FromHalf => convert::from_half(g, t),
        TaskKind::Feedback if t.state != 0 => select::feedback_first_pass(g, t),
        TaskKind::Feedback => convert::feedback(g, t),
        TaskKind::SelectTopK => select::start_top_k(g, t),
        TaskKind::SelectThreshold => select::start_threshold(g, t),
        TaskKind::Histogram => select::histogram(g, t),
        TaskKind::PickDigit => select::pick_digit(g, t),
        TaskKind::CountTiles => compact::count_tiles(g, t),
        TaskKind::ScanTiles => compact::scan_tiles(g, t, phase),
        TaskKind::WriteSelected => compact::write_selected(g, t),
        TaskKind::ResidualUntied => compact::residual_untied(g, t),
        TaskKind::WriteAnyOrder => compact::write_any_order(g, t),
        TaskKind::Fill => convert::fill(g, t),
        TaskKind::ScatterAdd => compact::scatter_add(g, t),
    }
}

/// `f(i)` for `i` in `0..n`, lane by lane with the launch's stride (so a
/// GPU warp touches consecutive elements).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn for_each_index<L: Lanes>(g: &L, n: u64, mut f: impl FnMut(u64)) {
    let stride = g.lanes();
    let mut i = g.lane();
    while i < n {
        f(i);
        i += stride;
    }
}

/// `f(Some(i))` for `i` in `0..n` as [`for_each_index`] does, but every
/// lane runs the same number of rounds (`f(None)` past the end), so that
/// the lanes of a GPU warp stay together for a warp-wide step.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn for_each_index_uniform<L: Lanes>(g: &L, n: u64, mut f: impl FnMut(Option<u64>)) {
    let stride = g.lanes();
    let rounds = n.div_ceil(stride);
    let mut i = g.lane();
    for _ in 0..rounds {
        f((i < n).then_some(i));
        i += stride;
    }
}

/// `f` of four indices a launch's stride apart per round, over `0..n`, with
/// every lane running the same number of rounds (`None` past the end) as
/// [`for_each_index_uniform`] does: a lane can issue the four loads of a
/// round together, where one at a time would leave the pass latency-bound.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn for_each_four_uniform<L: Lanes>(g: &L, n: u64, mut f: impl FnMut([Option<u64>; 4])) {
    let stride = g.lanes();
    let rounds = n.div_ceil(4 * stride);
    let mut i = g.lane();
    for _ in 0..rounds {
        f([0, 1, 2, 3].map(|u| {
            let j = i + u * stride;
            (j < n).then_some(j)
        }));
        i += 4 * stride;
    }
}

/// The `n` words at `p` in uniform rounds: `four(quads, at)` with the four
/// quads a lane loads together and their quad indices (where `p` is
/// 16-byte aligned; `None` past the end, whose words are not the array's),
/// then `one(Some((index, word)))` for each word left (`None` past the
/// end). Every lane of the launch runs the same rounds, so that the
/// warp-wide counts and reservations of the callers line up.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) unsafe fn each_round<L: Lanes>(
    g: &L,
    p: u64,
    n: u64,
    mut four: impl FnMut([[u32; 4]; 4], [Option<u64>; 4]),
    mut one: impl FnMut(Option<(u64, u32)>),
) {
    let words = p as *const u32;
    let body = if p.is_multiple_of(16) { n & !3 } else { 0 };
    for_each_four_uniform(g, body / 4, |qs| {
        // The four loads first, then the work on them.
        let x = qs.map(|q| match q {
            Some(q) => g.load_pack(words.add(4 * q as usize) as *const u8),
            None => [u32::MAX; 4],
        });
        four(x, qs);
    });
    for_each_index_uniform(g, n - body, |j| {
        one(j.map(|j| (body + j, words.add((body + j) as usize).read())))
    });
}

/// Four `f32`s (or words) in one 16-byte access.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub(crate) struct Quad<T: Copy>(pub [T; 4]);

/// Four halves in one 8-byte access.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct HalfQuad(pub [u16; 4]);

/// Element-wise work over `0..n` in quads: with `aligned` (every array
/// of the task aligned for its quad), `quad(i)` for each `i` in
/// `0, 4, …` below `n & !3`, spread over the lanes, then `one(i)` for the
/// tail; otherwise `one(i)` for every `i`. Wide accesses keep enough bytes
/// in flight per thread for HBM; the result is the same either way.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn for_each_quad<L: Lanes>(
    g: &L,
    n: u64,
    aligned: bool,
    mut quad: impl FnMut(u64),
    mut one: impl FnMut(u64),
) {
    if aligned {
        let body = n & !3;
        for_each_index(g, body / 4, |q| quad(4 * q));
        for_each_index(g, n - body, |j| one(body + j));
    } else {
        for_each_index(g, n, one);
    }
}

/// `store(i, load(i))` for `i = first, first + stride, …` below `n`,
/// four loads before their stores: the compiler may not move a load above
/// a store to a pointer that could alias it, so one item at a time would
/// leave a lane one load in flight. The batched copy and [`map_quads`]
/// both run on it.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn four_at_a_time<V: Copy>(
    first: u64,
    stride: u64,
    n: u64,
    load: impl Fn(u64) -> V,
    store: impl Fn(u64, V),
) {
    let mut i = first;
    while i + 3 * stride < n {
        let (a, b) = (load(i), load(i + stride));
        let (c, d) = (load(i + 2 * stride), load(i + 3 * stride));
        store(i, a);
        store(i + stride, b);
        store(i + 2 * stride, c);
        store(i + 3 * stride, d);
        i += 4 * stride;
    }
    while i < n {
        store(i, load(i));
        i += stride;
    }
}

/// Element-wise work over quads as [`for_each_quad`], split into
/// `load(i) -> V` and `store(i, V)` so that each lane loads its next four
/// quads (a launch's stride apart) before it stores any of them
/// ([`four_at_a_time`]); the results are the same.
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn map_quads<L: Lanes, V: Copy>(
    g: &L,
    n: u64,
    aligned: bool,
    load: impl Fn(u64) -> V,
    store: impl Fn(u64, V),
    one: impl FnMut(u64),
) {
    if !aligned {
        for_each_index(g, n, one);
        return;
    }
    let quads = n / 4;
    four_at_a_time(
        g.lane(),
        g.lanes(),
        quads,
        |q| load(4 * q),
        |q, v| store(4 * q, v),
    );
    let body = 4 * quads;
    let mut one = one;
    for_each_index(g, n - body, |j| one(body + j));
}

/// Whether each of `addrs` is a multiple of its alignment `(addr, align)`
/// (a null address counts as aligned: the array is unused).
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub(crate) fn all_aligned(addrs: &[(u64, u64)]) -> bool {
    addrs.iter().all(|&(a, al)| a.is_multiple_of(al))
}
