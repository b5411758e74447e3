//! Test hooks shared by both communicators.

/// Faults a test can ask a communicator to simulate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestHooks {
    /// (user rank, chunk, step): from there on the rank drops its "new data"
    /// signals (needs the `fault-injection` feature in the kernels).
    pub lost_signal: Option<(usize, u64, u64)>,
    /// A rank whose blocks are never launched.
    pub withhold_rank: Option<usize>,
    /// A rank whose first lane panics at the start of each collective (the
    /// CPU execution only: an internal bug there must break the
    /// communicator, not hang it).
    pub lane_panic: Option<usize>,
}
