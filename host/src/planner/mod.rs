//! The planner: turns each collective's buffers into per-rank work. Pure
//! functions over addresses, no GPU, shared by every backend, one job per
//! module: the buffers' checks, the ring's wiring (once, at creation) and
//! the plan of a call. The channel policy is [`crate::channels`]; reusing a
//! plan for moved buffers is the memo's ([`crate::memo`]).

mod plan;
mod validate;
mod wiring;

pub use plan::{call_channels, plan, CallOpts, Plan};
pub(crate) use validate::addresses;
pub use validate::{sizing, staging_bytes, validate, validate_part, BufferSpan, Part};
pub use wiring::{connect, ChannelWiring, RankWiring, Static};
