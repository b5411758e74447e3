//! Turning a rank's status record into an error that says who was stuck
//! and on what.

use crate::error::Error;
use crate::ring::RingOrder;
use ringreduce_kernels::{StatusRecord, WaitKind, WaitOutcome};

/// The error a status record describes, or `None` if the rank is fine.
pub fn error_from_record(rec: &StatusRecord, ring: &RingOrder) -> Option<Error> {
    let outcome = WaitOutcome::from_u64(rec.outcome)?;
    let kind = WaitKind::from_u64(rec.wait_kind).unwrap_or(WaitKind::NewData);
    let rank = rec.user_rank as usize;
    match outcome {
        WaitOutcome::Ok => None,
        WaitOutcome::Aborted => Some(Error::Aborted {
            rank,
            chunk: rec.chunk,
            step: rec.step,
        }),
        WaitOutcome::TimedOut => {
            let (pred, succ) = ring.neighbours(rank);
            Some(Error::Timeout {
                rank,
                ring_pos: rec.ring_pos as usize,
                chunk: rec.chunk,
                step: rec.step,
                sub: rec.sub,
                waiting_for: kind,
                what: kind.describe(),
                peer: if kind.written_by_predecessor() { pred } else { succ },
                expected: rec.expected,
                seen: rec.seen,
                waited_ms: rec.waited_ns / 1_000_000,
            })
        }
    }
}

/// Picks the error to report from all ranks' records: the timeout that
/// waited longest names the rank closest to the cause (the others time out
/// later, or wait on ranks that are themselves stuck); an abort wins over
/// everything since the user asked for it.
pub fn first_error<'a, I: IntoIterator<Item = &'a StatusRecord>>(
    recs: I,
    ring: &RingOrder,
) -> Option<Error> {
    let mut best: Option<(u64, Error)> = None;
    for r in recs {
        if let Some(e) = error_from_record(r, ring) {
            let score = if matches!(e, Error::Aborted { .. }) {
                u64::MAX
            } else {
                r.waited_ns
            };
            if best.as_ref().map(|(s, _)| score > *s).unwrap_or(true) {
                best = Some((score, e));
            }
        }
    }
    best.map(|(_, e)| e)
}
