//! What every block of a collective runs: the algorithm its work names.

use crate::abi::{Algorithm, Batch, Collective, Work};
use crate::device::{Device, Handoff};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::{direct, engine, local};

/// Runs one rank's part of the collective `w` describes, with the ring
/// [`engine`] or a [`direct`] algorithm. Every lane of every block calls
/// it with the same `w`; unknown values do nothing.
///
/// # Safety
/// As for [`engine::run`] and [`direct::run`].
#[inline(always)]
pub unsafe fn run<D: Device + Handoff, T: Element, O: ReduceOp, const THREADS: u64>(
    d: &D,
    w: &Work,
) {
    let Some(collective) = Collective::from_u64(w.collective) else {
        return;
    };
    match Algorithm::from_u64(w.algorithm) {
        Some(Algorithm::Ring) => engine::run::<D, T, O, THREADS>(d, w),
        // A local collective runs over a whole launch (`run_launch`).
        Some(Algorithm::Local) | None => {}
        Some(a) => direct::run::<D, T, O, THREADS>(d, w, collective, a),
    }
}

/// Runs block `block` of a launch of `b`: a block of the [`local`] grid,
/// or channel `c` of one rank, on the device `device(c)` gives.
///
/// # Safety
/// As for [`run`] and [`local::run`].
#[inline(always)]
pub unsafe fn run_launch<D: Device + Handoff, T: Element, O: ReduceOp, const THREADS: u64>(
    b: &Batch,
    block: u64,
    device: impl Fn(u64) -> D,
) {
    if b.works[0].algorithm == Algorithm::Local as u64 {
        return local::run::<D, T, O, THREADS>(&device(0), b, block);
    }
    if let Some((rank, channel)) = b.locate(block) {
        run::<D, T, O, THREADS>(&device(channel), &b.work(rank));
    }
}
