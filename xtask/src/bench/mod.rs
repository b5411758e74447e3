//! The bench runner: nccl-tests-style sweeps of our collectives, with the
//! ceilings they are judged against measured in the same process.

pub mod ceilings;
pub mod cli;
pub mod exact;
pub mod metrics;
pub mod nccl;
pub mod plot;
pub mod report;
pub mod run;
pub mod sizes;
pub mod table;

pub use cli::BenchArgs;
