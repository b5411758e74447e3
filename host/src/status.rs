//! Turning a rank's status record into an error that says who was stuck
//! and on what.

use crate::error::{AbortSeen, Error, TimeoutInfo};
use crate::ring::RingOrder;
use ringreduce_kernels::plan::NUM_SUBCHUNKS;
use ringreduce_kernels::{Sizing, StatusRecord, WaitKind, WaitOutcome};

/// The (chunk, step, subchunk) whose signal a flag value stands for: the
/// inverse of `Sizing::new_data_value` (and of `chunk_done_value`, where
/// the step is the last one).
pub fn decode_signal(kind: WaitKind, value: u64, k: u64) -> Option<(u64, u64, u64)> {
    let x = value.checked_sub(1)?;
    let sub = x % NUM_SUBCHUNKS;
    let cs = x / NUM_SUBCHUNKS;
    match kind {
        WaitKind::NewData | WaitKind::FinalData if k > 0 => Some((cs / k, cs % k, sub)),
        WaitKind::ChunkDone => Some((cs, k.saturating_sub(1), sub)),
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
                chunk: rec.chunk,
                step: rec.step,
                sub: rec.sub,
                waiting_for: kind,
                what: kind.describe(),
                peer: if kind.written_by_predecessor() {
                    pred
                } else {
                    succ
                },
                expected: rec.expected,
                seen: rec.seen,
                signal: decode_signal(kind, rec.expected, ring.len() as u64),
                waited_ms: rec.waited_ns / 1_000_000,
            })))
        }
    }
}

/// Picks the error to report from all ranks' records. A user's abort wins.
/// Otherwise the best timeout is the one that points at its cause: a wait
/// whose peer reported nothing (it never arrived), or whose peer had already
/// moved past the point where it should have sent the awaited signal (the
/// signal was lost). Other ranks merely wait on ranks that are themselves
/// stuck. Ties go to the longest wait.
pub fn first_error(recs: &[StatusRecord], ring: &RingOrder) -> Option<Error> {
    let errs: Vec<Option<Error>> = recs.iter().map(|r| error_from_record(r, ring)).collect();
    let mut best: Option<(u8, u64, Error)> = None;
    for (r, e) in recs.iter().zip(&errs) {
        let Some(e) = e else { continue };
        let score = match e {
            Error::Aborted { .. } => 3,
            Error::Timeout(t) => match (recs.get(t.peer), errs.get(t.peer)) {
                (_, Some(None)) => 2,
                // A rank records the slice it waits for before it publishes
                // the one before it, so a peer waiting at slice index `i` has
                // published every slice up to `i - 2`.
                (Some(p), _)
                    if t.signal
                        .map(|(c, s, sub)| {
                            // Flag values count slices in the order they move.
                            let at =
                                |c, s, sub| Sizing::new_data_value(recs.len() as u64, c, s, sub);
                            at(p.chunk, p.step, p.sub) > at(c, s, sub) + 1
                        })
                        .unwrap_or(false) =>
                {
                    2
                }
                _ => 1,
            },
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

/// Each user rank's error, if its record holds one.
pub fn rank_errors(recs: &[StatusRecord], ring: &RingOrder) -> Vec<Option<Error>> {
    recs.iter().map(|r| error_from_record(r, ring)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringreduce_kernels::plan::Sizing;

    #[test]
    fn decodes_what_the_kernel_encodes() {
        for k in [2u64, 3, 8] {
            for c in [0u64, 1, 17] {
                for step in 0..k {
                    for sub in 0..2 {
                        let v = Sizing::new_data_value(k, c, step, sub);
                        assert_eq!(decode_signal(WaitKind::NewData, v, k), Some((c, step, sub)));
                    }
                }
                let v = Sizing::chunk_done_value(c, 1);
                assert_eq!(
                    decode_signal(WaitKind::ChunkDone, v, k),
                    Some((c, k - 1, 1))
                );
            }
        }
        assert_eq!(decode_signal(WaitKind::NextAnnounced, 1, 4), None);
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
        // Rank 2 never ran: rank 1 waits for its announcement, rank 3 for
        // its data; rank 0 waits on rank 3, which is itself stuck.
        let recs = [
            rec(0, 0, WaitOutcome::TimedOut, WaitKind::NewData, 9_000),
            rec(1, 1, WaitOutcome::TimedOut, WaitKind::NextAnnounced, 1_000),
            StatusRecord::default(),
            rec(3, 3, WaitOutcome::TimedOut, WaitKind::NewData, 2_000),
        ];
        match first_error(&recs, &ring) {
            Some(Error::Timeout(t)) => {
                assert_eq!(t.peer, 2);
                assert_eq!(t.rank, 3, "the longer of the two waits on rank 2");
            }
            e => panic!("{e:?}"),
        }
        let mut recs = recs;
        recs[0] = rec(0, 0, WaitOutcome::Aborted, WaitKind::NewData, 1);
        assert!(matches!(
            first_error(&recs, &ring),
            Some(Error::Aborted {
                seen: Some(AbortSeen { rank: 0, .. })
            })
        ));
        assert!(first_error(&[StatusRecord::default(); 4], &ring).is_none());
    }
}
