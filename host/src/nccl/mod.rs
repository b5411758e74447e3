//! NCCL, the engine between nodes (feature `nccl`): the library, loaded at
//! run time ([`library`]); the step between nodes of a hierarchical job
//! (`across`) and a flat NCCL backend ([`NcclCommunicator`]), both over
//! one waiting discipline (`link`).

pub(crate) mod across;
mod comm;
pub mod library;
pub(crate) mod link;

pub use comm::{nccl_op, nccl_type, NcclCommunicator};

pub use library::{version, version_text, LIBRARY_ENV, MIN_VERSION};
