//! Who a rank is, as it tells the others at the rendezvous: its host, its
//! process and its device.

use serde::{Deserialize, Serialize};

/// One rank's identity and what it exports to its peers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The rank, `0..world`.
    pub rank: u32,
    /// The host's name: ranks with the same one share memory.
    pub host: String,
    /// The process.
    pub pid: u32,
    /// The device's UUID (zeros for the CPU execution).
    pub device: [u8; 16],
    /// What the rank's backend exports for its peers to map (memory
    /// handles); opaque to the rendezvous.
    pub exports: Vec<u8>,
}

/// Names the host for [`Identity::host`], unless set: ranks that name the
/// same host are taken to share one machine's memory (a test's override).
pub const HOST_ENV: &str = "RINGREDUCE_HOST_NAME";

/// This host's name: [`HOST_ENV`], else the kernel's host name.
pub fn host_name() -> String {
    if let Ok(h) = std::env::var(HOST_ENV) {
        if !h.trim().is_empty() {
            return h.trim().to_string();
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}
