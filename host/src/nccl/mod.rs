//! NCCL, the engine between nodes (feature `nccl`): the library, loaded at
//! run time ([`library`]); the step between nodes of a hierarchical job
//! (`across`), over the one waiting discipline (`link`) that the flat
//! NCCL backend ([`NcclCommunicator`](crate::NcclCommunicator)) shares.

pub(crate) mod across;
pub mod library;
pub(crate) mod link;

pub use library::{nccl_op, nccl_type, version, version_text, LIBRARY_ENV, MIN_VERSION};
