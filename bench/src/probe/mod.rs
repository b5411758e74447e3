//! Probes that split a small collective's time where the bench cannot:
//! the local kernel's own GPU time per launch by shape (`kernel`), and the
//! library's host time against the driver's (`host`). The suite runs both
//! (`probes-k8`, `probes-k4`); the `ringreduce-probe` binary runs one.

pub mod host;
pub mod kernel;
