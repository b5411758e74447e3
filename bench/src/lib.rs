//! The tools that run on a GPU host: the bench (nccl-tests-style sweeps of
//! our collectives, with the ceilings they are judged against measured in
//! the same process), the evidence suite and same-job A/B comparison.

pub mod bufs;
pub mod ceilings;
pub mod cli;
pub mod clock;
pub mod compare;
pub mod exact;
pub mod grad;
pub mod metrics;
pub mod nccl;
pub mod plot;
pub mod point;
pub mod probe;
pub mod procs;
pub mod rematch;
pub mod report;
pub mod run;
pub mod sizes;
pub mod suite;
pub mod sweeps;
pub mod table;
pub mod wire;

pub use cli::BenchArgs;
