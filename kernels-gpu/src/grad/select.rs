//! Top-K by magnitude without a sort: a radix select over the 31 magnitude
//! bits, a digit of 8 bits per pass. Each pass counts the next digit of the
//! magnitudes that match the digits chosen so far, then one lane picks the
//! digit whose bin holds the K-th largest. After the last pass the state
//! names the K-th largest magnitude exactly, and how many elements equal to
//! it the selection still takes (the lowest indices, see `compact`).

use super::lanes::{Lanes, NO_BIN};
use super::{each_round, for_each_four_uniform, for_each_index_uniform};
use crate::grad::abi::{
    candidates_for, magnitude, SelectState, Task, NARROW_PASS, SELECT_BINS, SELECT_PASSES,
};
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
    (*s).candidates = 0;
    (*s).ties = 0;
    (*s).unordered = 0;
    for b in 0..SELECT_BINS {
        (*s).hist[b] = 0;
    }
}

/// Pass `arg`: counts the digit of every magnitude of `src` whose higher
/// digits are the ones chosen so far, in each block's private histogram
/// first (the first digit of real gradients falls in a few hot bins). With
/// a candidate list (`aux2`), pass [`NARROW_PASS`] also lists the matching
/// magnitudes, and a later pass counts that list instead where it holds
/// them all: every magnitude a later pass counts matches the first digits.
///
/// # Safety
/// As for [`super::run_phase`].
pub unsafe fn histogram<L: Lanes>(g: &L, t: &Task) {
    let s = t.state as *mut SelectState;
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
    let list = t.aux2 as *mut u32;
    let (cap, listed) = (
        candidates_for(t.n),
        core::ptr::addr_of_mut!((*s).candidates),
    );
    g.hist_begin();
    if !list.is_null() && t.arg == NARROW_PASS {
        // Each lane lists its matches of a round after one reservation.
        let put = |slot: u64, bits: u32| {
            if slot < cap {
                list.add(slot as usize).write(magnitude(bits));
            }
        };
        each_round(
            g,
            t.src,
            t.n,
            |x, qs| {
                let b = [0, 1, 2, 3]
                    .map(|o| x[o].map(|w| if qs[o].is_some() { bin(w) } else { NO_BIN }));
                let mut want = 0;
                each4!(o => each4!(j => {
                    g.hist_count(b[o][j]);
                    want += (b[o][j] != NO_BIN) as u32;
                }));
                let mut slot = g.reserve(listed, want);
                each4!(o => each4!(j => if b[o][j] != NO_BIN {
                    put(slot, x[o][j]);
                    slot += 1;
                }));
            },
            |w| {
                let b = w.map_or(NO_BIN, |(_, w)| bin(w));
                g.hist_count(b);
                let slot = g.reserve(listed, (b != NO_BIN) as u32);
                if let Some((_, w)) = w.filter(|_| b != NO_BIN) {
                    put(slot, w);
                }
            },
        );
    } else {
        let (words, n) = if !list.is_null() && t.arg > NARROW_PASS && listed.read() <= cap {
            (t.aux2, listed.read())
        } else {
            (t.src, t.n)
        };
        each_round(
            g,
            words,
            n,
            |x, qs| each4!(o => each4!(j => g.hist_count(if qs[o].is_some() { bin(x[o][j]) } else { NO_BIN }))),
            |w| g.hist_count(w.map_or(NO_BIN, |(_, w)| bin(w))),
        );
    }
    g.hist_flush(core::ptr::addr_of_mut!((*s).hist) as *mut u32);
}

/// Error feedback with the selection's first pass folded in: `dst[i] =
/// src[i] + aux[i]` (a copy without `aux`), as [`super::convert::feedback`]
/// writes it, and each sum's first digit counted as [`histogram`]'s pass 0
/// would count it, so that pass need not read the sums again.
///
/// # Safety
/// As for [`super::run_phase`]; the state's selection started, with nothing
/// chosen yet; `dst` may be `src` or `aux`.
pub unsafe fn feedback_first_pass<L: Lanes>(g: &L, t: &Task) {
    let s = t.state as *mut SelectState;
    let (src, res, dst) = (t.src as *const f32, t.aux as *const f32, t.dst as *mut f32);
    let digit = |x: f32| magnitude(x.to_bits()) >> shift(0);
    let aligned = super::all_aligned(&[(t.src, 16), (t.aux, 16), (t.dst, 16)]);
    let body = if aligned { t.n & !3 } else { 0 };
    let quad = |p: *const f32, q: u64| {
        g.load_pack(p.add(4 * q as usize) as *const u8)
            .map(f32::from_bits)
    };
    g.hist_begin();
    for_each_four_uniform(g, body / 4, |qs| {
        // The eight loads first, then the four stores and sixteen counts.
        let x = qs.map(|q| q.map_or([0.0; 4], |q| quad(src, q)));
        let r = qs.map(|q| match q {
            Some(q) if !res.is_null() => quad(res, q),
            _ => [0.0; 4],
        });
        let sum = [0, 1, 2, 3].map(|o| {
            if res.is_null() {
                x[o]
            } else {
                [0, 1, 2, 3].map(|j| x[o][j] + r[o][j])
            }
        });
        each4!(o => if let Some(q) = qs[o] {
            g.store_pack(dst.add(4 * q as usize) as *mut u8, sum[o].map(f32::to_bits));
        });
        each4!(o => each4!(j => g.hist_count(match qs[o] {
            Some(_) => digit(sum[o][j]),
            None => NO_BIN,
        })));
    });
    for_each_index_uniform(g, t.n - body, |j| {
        let b = match j {
            Some(j) => {
                let i = (body + j) as usize;
                let mut x = src.add(i).read();
                if !res.is_null() {
                    x += res.add(i).read();
                }
                dst.add(i).write(x);
                digit(x)
            }
            None => NO_BIN,
        };
        g.hist_count(b);
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
                // After the last pass, the magnitudes equal to the threshold.
                (*s).ties = h;
                break;
            }
            above += h;
        }
    }
    for b in 0..SELECT_BINS {
        (*s).hist[b] = 0;
    }
}
