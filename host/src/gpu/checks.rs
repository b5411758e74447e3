//! Checks a GPU collective makes before planning: the streams, the views'
//! devices and the raw addresses. Each failure is a typed error with
//! nothing launched.

use super::buffers::Buffers;
use super::driver::{pointer_device, within_allocation};
use super::setup::Inner;
use crate::error::{Error, Result};
use crate::planner::BufferSpan;
use cudarc::driver::{CudaStream, DeviceSlice};
use std::sync::Arc;

/// One stream per rank, on the rank's device. Ranks of one launch group may
/// share any stream; ranks in different launches on one device may not
/// share one, nor use the legacy default stream (either would serialise
/// grids that must run together).
pub fn check_streams(inner: &Inner, streams: &[Arc<CudaStream>]) -> Result<()> {
    let k = inner.ranks.len();
    if streams.len() != k {
        return Err(Error::WrongStreamCount {
            got: streams.len(),
            k,
        });
    }
    let mut group_of = vec![0; k];
    for (g, group) in inner.groups.iter().enumerate() {
        for &u in &group.ranks {
            group_of[u] = g;
        }
    }
    let device = |u: usize| inner.ranks[u].ctx.ordinal();
    for (u, s) in streams.iter().enumerate() {
        let expected = device(u);
        let found = s.context().ordinal();
        if found != expected {
            return Err(Error::StreamDevice {
                rank: u,
                found,
                expected,
            });
        }
        let apart = |v: usize| v != u && device(v) == expected && group_of[v] != group_of[u];
        if s.cu_stream().is_null() && (0..k).any(apart) {
            return Err(Error::DefaultStream { rank: u });
        }
        for (v, other) in streams.iter().enumerate().take(u) {
            if apart(v) && other.cu_stream() == s.cu_stream() {
                return Err(Error::SharedStream { a: v, b: u });
            }
        }
    }
    Ok(())
}

/// Raw addresses: each in a device allocation on its rank's device, long
/// enough for its length.
pub fn check_devices(inner: &Inner, spans: &[BufferSpan], sz: u64) -> Result<()> {
    for (u, s) in spans.iter().enumerate() {
        if s.recv_len == 0 || s.send_len == 0 {
            continue;
        }
        let expected = inner.ranks[u].ctx.ordinal();
        for (which, addr, len) in [("send", s.send, s.send_len), ("recv", s.recv, s.recv_len)] {
            let found = pointer_device(addr);
            if found != expected as i64 {
                return Err(Error::WrongDevice {
                    rank: u,
                    which,
                    found,
                    expected,
                });
            }
            let bytes = len.saturating_mul(sz);
            if !within_allocation(addr, bytes) {
                return Err(Error::BufferOutOfBounds {
                    rank: u,
                    which,
                    addr,
                    bytes,
                });
            }
        }
    }
    Ok(())
}

/// Typed views: each on its rank's device. Views know their device
/// through their stream, with no driver call: cheaper than the pointer
/// queries of the raw path.
pub fn check_views<T>(inner: &Inner, bufs: &[Buffers<'_, T>]) -> Result<()> {
    for (u, b) in bufs.iter().enumerate() {
        let expected = inner.ranks[u].ctx.ordinal();
        let views: [(&'static str, usize); 2] = match b {
            Buffers::OutOfPlace { send, recv } => [
                ("send", send.stream().context().ordinal()),
                ("recv", recv.stream().context().ordinal()),
            ],
            Buffers::InPlace(buf) => [
                ("send", buf.stream().context().ordinal()),
                ("recv", buf.stream().context().ordinal()),
            ],
        };
        for (which, found) in views {
            if found != expected {
                return Err(Error::WrongDevice {
                    rank: u,
                    which,
                    found: found as i64,
                    expected,
                });
            }
        }
    }
    Ok(())
}
