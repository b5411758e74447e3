//! Checks a GPU collective makes before planning: the streams, the views'
//! devices and the raw addresses. Each failure is a typed error with
//! nothing launched.

use super::buffers::Buffers;
use super::driver::{pointer_device, within_allocation};
use super::inner::Inner;
use crate::error::{Error, Result};
use crate::planner::BufferSpan;
use cudarc::driver::{CudaStream, DeviceSlice};
use std::sync::Arc;

/// One stream per rank, on the rank's device, and no two launches on one
/// device serialised by their streams (see [`serialising_streams`]).
pub fn check_streams(inner: &Inner, streams: &[Arc<CudaStream>]) -> Result<()> {
    let k = inner.ranks.len();
    if streams.len() != k {
        return Err(Error::WrongStreamCount {
            got: streams.len(),
            k,
        });
    }
    for (u, s) in streams.iter().enumerate() {
        let expected = inner.ranks[u].ctx.ordinal();
        let found = s.context().ordinal();
        if found != expected {
            return Err(Error::StreamDevice {
                rank: u,
                found,
                expected,
            });
        }
    }
    if inner.groups.len() < 2 {
        // One launch runs every rank: any sharing of streams is allowed.
        return Ok(());
    }
    let mut group_of = vec![0; k];
    for (g, group) in inner.groups.iter().enumerate() {
        for &u in &group.ranks {
            group_of[u] = g;
        }
    }
    let device: Vec<usize> = inner.ranks.iter().map(|r| r.ctx.ordinal()).collect();
    let ids: Vec<usize> = streams.iter().map(|s| s.cu_stream() as usize).collect();
    serialising_streams(&device, &group_of, &ids).map_or(Ok(()), Err)
}

/// Ranks of one launch group may share any stream, the legacy default
/// stream (id 0) too. Ranks of two groups on one device (more than
/// `BATCH_RANKS` ranks there) may not share one, nor use the legacy default
/// stream, which serialises with every other: either would make one launch
/// wait for another that cannot finish without it. Ranks on different
/// devices never conflict. `device[u]`, `group_of[u]` and `stream[u]` are
/// rank `u`'s.
pub fn serialising_streams(
    device: &[usize],
    group_of: &[usize],
    stream: &[usize],
) -> Option<Error> {
    let k = device.len().min(group_of.len()).min(stream.len());
    for u in 0..k {
        let apart = |v: usize| v != u && device[v] == device[u] && group_of[v] != group_of[u];
        if stream[u] == 0 && (0..k).any(apart) {
            return Some(Error::DefaultStream { rank: u });
        }
        if let Some(v) = (0..u).find(|&v| apart(v) && stream[v] == stream[u]) {
            return Some(Error::SharedStream { a: v, b: u });
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_may_be_shared_within_a_launch_only() {
        // One group of three: any sharing, the default stream too.
        let one = [0, 0, 0, 0];
        assert!(serialising_streams(&one, &[0, 0, 0], &[7, 7, 7]).is_none());
        assert!(serialising_streams(&one, &[0, 0, 0], &[0, 7, 0]).is_none());
        // Two groups on one device: a stream across them, or the default
        // stream, is refused.
        assert!(matches!(
            serialising_streams(&one, &[0, 0, 1], &[7, 8, 7]),
            Some(Error::SharedStream { a: 0, b: 2 })
        ));
        assert!(matches!(
            serialising_streams(&one, &[0, 1], &[5, 0]),
            Some(Error::DefaultStream { rank: 1 })
        ));
        assert!(serialising_streams(&one, &[0, 0, 1, 1], &[7, 7, 8, 8]).is_none());
        // One rank per GPU: each device's default stream is its own.
        assert!(serialising_streams(&[0, 1], &[0, 1], &[0, 0]).is_none());
    }
}
