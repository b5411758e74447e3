//! Turning a rank's status record into an error that says who was stuck
//! and on what.

use crate::error::{AbortSeen, Error, TimeoutInfo};
use crate::ring::RingOrder;
use ringreduce_kernels::{StatusRecord, WaitKind, WaitOutcome};

/// The predecessor's (chunk, step, subchunk) whose "new data" signal a
/// wait at (chunk, step, sub) expects: the same slice of the step before.
/// `None` for a wait on the successor's head, which frees a slot that an
/// earlier step, maybe of an earlier call, filled.
pub fn awaited_signal(kind: WaitKind, rec: &StatusRecord) -> Option<(u64, u64, u64)> {
    match kind {
        WaitKind::NewData if rec.step > 0 => Some((rec.chunk, rec.step - 1, rec.sub)),
        _ => None,
    }
}

/// The error a status record describes, or `None` if the rank is fine.
pub fn error_from_record(rec: &StatusRecord, ring: &RingOrder) -> Option<Error> {
    let outcome = WaitOutcome::from_u64(rec.outcome)?;
    let kind = WaitKind::from_u64(rec.wait_kind).unwrap_or(WaitKind::NewData);
    let rank = rec.user_rank as usize;
    match outcome {
        WaitOutcome::Ok => None,
        WaitOutcome::Aborted => Some(Error::Aborted {
            seen: Some(AbortSeen {
                rank,
                chunk: rec.chunk,
                step: rec.step,
            }),
        }),
        WaitOutcome::TimedOut => {
            let (pred, succ) = ring.neighbours(rank);
            Some(Error::Timeout(Box::new(TimeoutInfo {
                rank,
                ring_pos: rec.ring_pos as usize,
                channel: rec.channel as usize,
                chunk: rec.chunk,
                step: rec.step,
                sub: rec.sub,
                waiting_for: kind,
                what: kind.describe(),
                peer: match kind {
                    // A direct wait names its peer in the record's `sub`.
                    WaitKind::PeerReady => rec.sub as usize,
                    k if k.written_by_predecessor() => pred,
                    _ => succ,
                },
                expected: rec.expected,
                seen: rec.seen,
                signal: awaited_signal(kind, rec),
                waited_ms: rec.waited_ns / 1_000_000,
            })))
        }
    }
}

/// Picks the error to report from the records of every rank and channel,
/// `per_rank` consecutive records per user rank. A user's abort wins.
/// Otherwise the best timeout is the one that points at its cause: a wait
/// whose peer reported nothing (it never arrived), or whose peer had
/// already moved past the point where it should have sent the awaited
/// signal (the signal was lost). Other ranks merely wait on ranks that are
/// themselves stuck. Ties go to the longest wait.
pub fn first_error(recs: &[StatusRecord], per_rank: usize, ring: &RingOrder) -> Option<Error> {
    let errs: Vec<Option<Error>> = recs.iter().map(|r| error_from_record(r, ring)).collect();
    let per_rank = per_rank.max(1);
    let silent = |u: usize| {
        errs.iter()
            .skip(u * per_rank)
            .take(per_rank)
            .all(|e| e.is_none())
    };
    let mut best: Option<(u8, u64, Error)> = None;
    for (r, e) in recs.iter().zip(&errs) {
        let Some(e) = e else { continue };
        let score = match e {
            Error::Aborted { .. } => 3,
            Error::Timeout(t) if silent(t.peer) => 2,
            Error::Timeout(t) => {
                // A channel records the slice it waits for before it
                // publishes the one before it, so a peer waiting at slice
                // (c, s, b) has published every slice up to two before:
                // (c, s - 1, b) and earlier.
                let peer = recs.get(t.peer * per_rank + t.channel);
                match (peer, t.signal) {
                    (Some(p), Some((c, s, b))) if (p.chunk, p.step, p.sub) >= (c, s + 1, b) => 2,
                    _ => 1,
                }
            }
            _ => 1,
        };
        let better = match &best {
            None => true,
            Some((s, w, _)) => score > *s || (score == *s && r.waited_ns > *w),
        };
        if better {
            best = Some((score, r.waited_ns, e.clone()));
        }
    }
    best.map(|(_, _, e)| e)
}

/// Each user rank's error, if one of its `per_rank` records holds one.
pub fn rank_errors(recs: &[StatusRecord], per_rank: usize, ring: &RingOrder) -> Vec<Option<Error>> {
    recs.chunks(per_rank.max(1))
        .map(|rs| rs.iter().find_map(|r| error_from_record(r, ring)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_awaited_signal_is_the_step_before() {
        let r = StatusRecord {
            chunk: 3,
            step: 2,
            sub: 1,
            ..Default::default()
        };
        assert_eq!(awaited_signal(WaitKind::NewData, &r), Some((3, 1, 1)));
        assert_eq!(awaited_signal(WaitKind::SlotFree, &r), None);
    }

    fn rec(user: u64, pos: u64, outcome: WaitOutcome, kind: WaitKind, waited: u64) -> StatusRecord {
        StatusRecord {
            outcome: outcome as u64,
            user_rank: user,
            ring_pos: pos,
            wait_kind: kind as u64,
            expected: 3,
            waited_ns: waited,
            ..Default::default()
        }
    }

    #[test]
    fn the_cause_is_the_silent_peer() {
        let ring = RingOrder::identity(4);
        // Rank 2 never ran: rank 1 waits for it to free a slot, rank 3 for
        // its data; rank 0 waits on rank 3, which is itself stuck.
        let recs = [
            rec(0, 0, WaitOutcome::TimedOut, WaitKind::NewData, 9_000),
            rec(1, 1, WaitOutcome::TimedOut, WaitKind::SlotFree, 1_000),
            StatusRecord::default(),
            rec(3, 3, WaitOutcome::TimedOut, WaitKind::NewData, 2_000),
        ];
        match first_error(&recs, 1, &ring) {
            Some(Error::Timeout(t)) => {
                assert_eq!(t.peer, 2);
                assert_eq!(t.rank, 3, "the longer of the two waits on rank 2");
            }
            e => panic!("{e:?}"),
        }
        let mut recs = recs;
        recs[0] = rec(0, 0, WaitOutcome::Aborted, WaitKind::NewData, 1);
        assert!(matches!(
            first_error(&recs, 1, &ring),
            Some(Error::Aborted {
                seen: Some(AbortSeen { rank: 0, .. })
            })
        ));
        assert!(first_error(&[StatusRecord::default(); 4], 1, &ring).is_none());
    }
}
