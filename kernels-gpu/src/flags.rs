//! The flag protocol's primitives: bounded waits, signals and the status
//! record a wait that gives up leaves for the host.

use crate::abi::{ChannelConn, RankInfo, StatusRecord, WaitKind, WaitOutcome};
use crate::device::Device;
use crate::plan::UNROLL;
use crate::types::Scope;
use crate::unroll::unroll8;

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
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
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
    let mut patience = Patience::default();
    loop {
        let seen = d.load_acquire(flag, args.scope);
        if seen >= site.expected {
            return Some(seen);
        }
        if let Some((outcome, waited)) = patience.give_up(d, &args) {
            report(d, &args, outcome, site, seen, waited);
            return None;
        }
        d.spin_hint();
    }
}

/// The bound on a wait: counts the polls that found a counter short, and
/// every [`POLLS_PER_CHECK`] of them looks at the clock and the abort word.
#[derive(Default)]
struct Patience {
    polls: u32,
    start: u64,
}

impl Patience {
    /// After a poll that found a counter short: the outcome and the time
    /// waited, once the wait must give up.
    #[cfg_attr(target_arch = "nvptx64", inline(always))]
    #[cfg_attr(not(target_arch = "nvptx64"), inline)]
    unsafe fn give_up<D: Device>(&mut self, d: &D, args: &WaitCtx) -> Option<(WaitOutcome, u64)> {
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(POLLS_PER_CHECK) {
            return None;
        }
        let now = d.now_ns();
        if self.start == 0 {
            self.start = now.max(1);
        }
        let waited = now.saturating_sub(self.start);
        if args.abort_flag != 0 && d.load_volatile(args.abort_flag as *const u64) != 0 {
            Some((WaitOutcome::Aborted, waited))
        } else if args.timeout_ns != 0 && waited > args.timeout_ns {
            Some((WaitOutcome::TimedOut, waited))
        } else {
            None
        }
    }
}

/// Spins until every counter `flag(0..count)` (a zero address is skipped)
/// reaches `site.expected`, polling eight at a time with volatile (relaxed)
/// loads so that their round trips overlap, then acquires with one fence:
/// a direct collective waits for all its peers at once, and acquire loads
/// one peer after another would each wait for the one before. Gives up as
/// [`wait_at_least`] does, reporting the first counter not yet reached as
/// `site.sub`; returns whether every counter was reached.
///
/// # Safety
/// Every nonzero `flag(i)` must be a valid flag address; `args` must
/// describe this rank.
#[inline(never)]
pub unsafe fn wait_all_at_least<D: Device>(
    d: &D,
    args: WaitCtx,
    count: u64,
    flag: impl Fn(u64) -> u64,
    site: WaitSite,
) -> bool {
    let mut patience = Patience::default();
    let mut q = 0;
    while q < count {
        let seen = unroll8!(u => {
            let f = if q + u < count { flag(q + u) } else { 0 };
            if f == 0 {
                u64::MAX
            } else {
                d.load_volatile(f as *const u64)
            }
        });
        // Walked backwards with constant indices, so `seen` stays in
        // registers: the first short slot wins.
        let mut short = None;
        for (u, &v) in seen.iter().enumerate().rev() {
            if v < site.expected {
                short = Some((q + u as u64, v));
            }
        }
        let Some((sub, seen)) = short else {
            q += UNROLL;
            continue;
        };
        if let Some((outcome, waited)) = patience.give_up(d, &args) {
            report(d, &args, outcome, WaitSite { sub, ..site }, seen, waited);
            return false;
        }
        d.spin_hint();
    }
    d.fence(args.scope);
    true
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
#[cfg_attr(target_arch = "nvptx64", inline(always))]
#[cfg_attr(not(target_arch = "nvptx64"), inline)]
pub unsafe fn signal<D: Device, const N: usize>(d: &D, scope: Scope, flags: [(u64, u64); N]) {
    d.fence(scope);
    for (flag, value) in flags {
        if flag != 0 {
            d.store_volatile(flag as *mut u64, value);
        }
    }
}
