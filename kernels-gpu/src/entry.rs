//! What every block of a ring or direct entry runs: the algorithm its work
//! names, if the entry runs it.
//!
//! Each entry is compiled for one algorithm family and one set of
//! collectives (`SET`, a mask of [`Collective::bit`](crate::types::Collective::bit)s,
//! see [`crate::catalogue`]): a work outside them does nothing, and the code
//! for them is not in the entry at all.

use crate::abi::Work;
use crate::device::{Device, Handoff};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::types::{Algorithm, Collective};
use crate::{direct, engine};

/// Runs one rank's part of the ring collective `w` describes. Every lane
/// of every block calls it with the same `w`.
///
/// # Safety
/// As for [`engine::run`].
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn ring<
    D: Device + Handoff,
    T: Element,
    O: ReduceOp,
    const THREADS: u64,
    const SET: u64,
>(
    d: &D,
    w: &Work,
) {
    if w.algorithm == Algorithm::Ring as u64 {
        engine::run::<D, T, O, THREADS, SET>(d, w);
    }
}

/// Runs one rank's part of the direct collective `w` describes. Every lane
/// of every block calls it with the same `w`.
///
/// # Safety
/// As for [`direct::run`].
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn direct<D: Device, T: Element, O: ReduceOp, const THREADS: u64, const SET: u64>(
    d: &D,
    w: &Work,
) {
    let Some(c) = Collective::from_u64_in(w.collective, SET) else {
        return;
    };
    if let Some(a @ (Algorithm::OneShot | Algorithm::TwoShot)) = Algorithm::from_u64(w.algorithm) {
        direct::run::<D, T, O, THREADS>(d, w, c, a)
    }
}
