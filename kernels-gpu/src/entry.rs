//! What every block of a collective runs: the algorithm its work names.

use crate::abi::{Algorithm, Collective, Work};
use crate::device::{Device, Handoff};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::{direct, engine};

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
        // A local collective has entries of its own (`crate::local`).
        Some(Algorithm::Local) | None => {}
        Some(a) => direct::run::<D, T, O, THREADS>(d, w, collective, a),
    }
}
