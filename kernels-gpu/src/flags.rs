//! The flag protocol's primitives: bounded waits, signals and the status
//! record a wait that gives up leaves for the host.

use crate::abi::{ChannelConn, RankInfo, StatusRecord, WaitKind, WaitOutcome};
use crate::device::{Device, Scope};

/// Polls between two looks at the abort word and the clock. The abort word
/// sits in host memory, so reading it costs a bus round trip; one look per
/// few hundred polls keeps that off the fast path while still reacting to
/// `abort()` within microseconds.
pub const POLLS_PER_CHECK: u32 = 256;

/// What a wait needs to know about its rank, passed by value so that the
/// (out-of-line) wait does not force the kernel arguments into local memory.
#[derive(Clone, Copy, Debug)]
pub struct WaitCtx {
    pub abort_flag: u64,
    pub timeout_ns: u64,
    pub status: u64,
    pub user_rank: u64,
    pub ring_pos: u64,
    pub channel: u64,
    pub scope: Scope,
}

impl WaitCtx {
    /// The context of channel number `channel`, `chan`, of rank `rank`.
    #[inline(always)]
    pub fn of(rank: &RankInfo, chan: &ChannelConn, channel: u64) -> Self {
        WaitCtx {
            abort_flag: rank.abort_flag,
            timeout_ns: rank.timeout_ns,
            status: chan.status,
            user_rank: rank.user_rank,
            ring_pos: rank.ring_pos,
            channel,
            scope: rank.scope(),
        }
    }
}

/// Where a wait happened, for the status record.
#[derive(Clone, Copy, Debug)]
pub struct WaitSite {
    pub kind: WaitKind,
    pub chunk: u64,
    pub step: u64,
    pub sub: u64,
    pub expected: u64,
}

/// Spins until the counter at `flag` reaches `want` and returns what it
/// read; the acquire loads make what the writer published before its
/// counter store visible to the loads after. Gives up when the host sets
/// the abort word or when `timeout_ns` passes without progress, writes the
/// status record, and returns `None`.
///
/// # Safety
/// `flag` must be a valid flag address; `args` must describe this rank.
#[inline(never)]
pub unsafe fn wait_at_least<D: Device>(
    d: &D,
    args: WaitCtx,
    flag: u64,
    site: WaitSite,
) -> Option<u64> {
    let flag = flag as *const u64;
    let mut polls: u32 = 0;
    let mut start: u64 = 0;
    loop {
        let seen = d.load_acquire(flag, args.scope);
        if seen >= site.expected {
            return Some(seen);
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(POLLS_PER_CHECK) {
            let now = d.now_ns();
            if start == 0 {
                start = now.max(1);
            }
            let waited = now.saturating_sub(start);
            let aborted =
                args.abort_flag != 0 && d.load_volatile(args.abort_flag as *const u64) != 0;
            let timed_out = args.timeout_ns != 0 && waited > args.timeout_ns;
            if aborted || timed_out {
                let outcome = if aborted {
                    WaitOutcome::Aborted
                } else {
                    WaitOutcome::TimedOut
                };
                report(d, &args, outcome, site, seen, waited);
                return None;
            }
        }
        d.spin_hint();
    }
}

/// Writes this rank's status record, outcome last, so that a host reading
/// a nonzero outcome sees the whole record.
unsafe fn report<D: Device>(
    d: &D,
    args: &WaitCtx,
    outcome: WaitOutcome,
    site: WaitSite,
    seen: u64,
    waited: u64,
) {
    if args.status == 0 {
        return;
    }
    let rec = StatusRecord {
        outcome: 0,
        user_rank: args.user_rank,
        ring_pos: args.ring_pos,
        channel: args.channel,
        chunk: site.chunk,
        step: site.step,
        sub: site.sub,
        wait_kind: site.kind as u64,
        expected: site.expected,
        seen,
        waited_ns: waited,
    };
    let words = &rec as *const StatusRecord as *const u64;
    let dst = args.status as *mut u64;
    for i in 1..StatusRecord::WORDS {
        d.store_volatile(dst.add(i), *words.add(i));
    }
    // The host reads the record, whatever the peers' scope.
    d.fence(Scope::Sys);
    d.store_volatile(dst, outcome as u64);
    d.fence(Scope::Sys);
}

/// Publishes values in peers' flags (a zero address is skipped): one fence
/// releases every store the block made before the barrier that preceded
/// this call, then each flag is stored.
///
/// # Safety
/// Every nonzero address must be a valid flag.
#[inline(always)]
pub unsafe fn signal<D: Device, const N: usize>(d: &D, scope: Scope, flags: [(u64, u64); N]) {
    d.fence(scope);
    for (flag, value) in flags {
        if flag != 0 {
            d.store_volatile(flag as *mut u64, value);
        }
    }
}
