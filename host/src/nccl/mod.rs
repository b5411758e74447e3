//! NCCL, the engine between nodes (feature `nccl`): the library, loaded at
//! run time ([`library`]).

pub(crate) mod across;
pub mod library;

pub use library::{version, version_text, LIBRARY_ENV, MIN_VERSION};
