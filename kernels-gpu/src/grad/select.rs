//! Top-K by magnitude without a sort: a radix select over the 31 magnitude
//! bits, a digit of 8 bits per pass. Each pass counts the next digit of the
//! magnitudes that match the digits chosen so far, then one lane picks the
//! digit whose bin holds the K-th largest. After the last pass the state
//! names the K-th largest magnitude exactly, and how many elements equal to
//! it the selection still takes (the lowest indices, see `compact`).

use super::lanes::{Lanes, NO_BIN};
use super::{for_each_four_uniform, for_each_index_uniform};
use crate::grad::abi::{magnitude, SelectState, Task, SELECT_BINS, SELECT_PASSES};
use crate::unroll::each4;

/// A threshold no magnitude reaches (they are at most `0x7fff_ffff`).
const NOTHING: u64 = 0x8000_0000;

/// The bit position of pass `p`'s digit.
const fn shift(pass: u64) -> u64 {
    8 * (SELECT_PASSES - 1 - pass)
}

/// Lane 0: a top-`arg` selection, nothing chosen yet.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn start_top_k<L: Lanes>(g: &L, t: &Task) {
    if g.lane() == 0 {
        reset(t.state as *mut SelectState, 0, 0, t.arg);
    }
}

/// Lane 0: every magnitude of at least `arg`'s bits.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn start_threshold<L: Lanes>(g: &L, t: &Task) {
    if g.lane() == 0 {
        reset(t.state as *mut SelectState, t.arg, u64::MAX, 0);
    }
}

unsafe fn reset(s: *mut SelectState, threshold: u64, take_equal: u64, remaining: u64) {
    (*s).threshold = threshold;
    (*s).take_equal = take_equal;
    (*s).remaining = remaining;
    (*s).count = 0;
    for b in 0..SELECT_BINS {
        (*s).hist[b] = 0;
    }
}

/// Pass `arg`: counts the digit of every magnitude of `src` whose higher
/// digits are the ones chosen so far, in each block's private histogram
/// first (the first digit of real gradients falls in a few hot bins).
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn histogram<L: Lanes>(g: &L, t: &Task) {
    let s = t.state as *mut SelectState;
    let src = t.src as *const u32;
    let sh = shift(t.arg);
    let prefix = (*s).threshold >> (sh + 8);
    let bin = |bits: u32| {
        let m = magnitude(bits) as u64;
        if m >> (sh + 8) == prefix {
            ((m >> sh) & 0xff) as u32
        } else {
            NO_BIN
        }
    };
    g.hist_begin();
    // Quads where `src` allows, then the rest; both loops are uniform.
    let body = if t.src.is_multiple_of(16) {
        t.n & !3
    } else {
        0
    };
    for_each_four_uniform(g, body / 4, |qs| {
        // The four loads first, then the sixteen counts.
        let x = qs.map(|q| match q {
            Some(q) => g.load_pack(src.add(4 * q as usize) as *const u8),
            None => [u32::MAX; 4],
        });
        each4!(o => each4!(j => g.hist_count(match qs[o] {
            Some(_) => bin(x[o][j]),
            None => NO_BIN,
        })));
    });
    for_each_index_uniform(g, t.n - body, |j| {
        g.hist_count(j.map_or(NO_BIN, |j| bin(src.add((body + j) as usize).read())));
    });
    g.hist_flush(core::ptr::addr_of_mut!((*s).hist) as *mut u32);
}

/// Lane 0 of pass `arg`: the digit holding the `remaining`-th largest of
/// the matching magnitudes, counted from the top; clears the histogram for
/// the next pass.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn pick_digit<L: Lanes>(g: &L, t: &Task) {
    if g.lane() != 0 {
        return;
    }
    let s = t.state as *mut SelectState;
    let sh = shift(t.arg);
    let want = (*s).remaining;
    if want == 0 {
        // Top-0 (the host never asks for it): select nothing.
        (*s).threshold = NOTHING;
        (*s).take_equal = 0;
    } else {
        let mut above = 0u64;
        let mut b = SELECT_BINS;
        while b > 0 {
            b -= 1;
            let h = (*s).hist[b] as u64;
            if above + h >= want {
                (*s).threshold |= (b as u64) << sh;
                (*s).remaining = want - above;
                (*s).take_equal = want - above;
                break;
            }
            above += h;
        }
    }
    for b in 0..SELECT_BINS {
        (*s).hist[b] = 0;
    }
}
