//! The wire alone: what loopback TCP moves on this machine with as many
//! streams at once as a simulated hierarchical job sends between its
//! hosts. The step between hosts runs over these sockets, so a row timed
//! beside this figure says how much of its time is the wire's.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::Instant;

/// Bytes one `write` or `read` moves at most, as NCCL's socket transport
/// moves its slices.
const CHUNK: usize = 1 << 20;

/// What every sent byte holds; a receiver checks the first byte of each
/// read, so a stream that moved nothing cannot pass for a fast one.
const PATTERN: u8 = 0x5a;

/// One measurement: `streams` streams at once, `bytes` through each.
#[derive(Debug, Clone, Copy)]
pub struct Wire {
    pub streams: usize,
    pub bytes: usize,
    /// From every stream released at once to the last one's last byte.
    pub seconds: f64,
}

impl Wire {
    /// Each stream's rate, in GB/s (10^9 bytes).
    pub fn gbps_each(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }

    /// The measured time in microseconds.
    pub fn us(&self) -> f64 {
        self.seconds * 1e6
    }

    /// A part's name for the rows timed beside it.
    pub fn label(&self) -> String {
        format!(
            "wire alone: loopback TCP, {} streams of {:.1} MB at once, {:.2} GB/s each",
            self.streams,
            self.bytes as f64 / 1e6,
            self.gbps_each()
        )
    }
}

/// Moves `bytes` through each of `streams` loopback TCP connections at
/// once (a sender and a receiver thread each) and times it; an error if
/// any stream moves other bytes than it was sent.
pub fn loopback(streams: usize, bytes: usize) -> Result<Wire, String> {
    if streams == 0 || bytes == 0 {
        return Err(format!(
            "the wire alone needs streams and bytes ({streams} x {bytes})"
        ));
    }
    let io = |what: &str, e: std::io::Error| format!("the wire alone, {what}: {e}");
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    let addr = listener.local_addr().map_err(|e| io("address", e))?;
    let mut pairs = Vec::with_capacity(streams);
    for _ in 0..streams {
        let out = TcpStream::connect(addr).map_err(|e| io("connect", e))?;
        let (inn, _) = listener.accept().map_err(|e| io("accept", e))?;
        pairs.push((out, inn));
    }
    let go = Arc::new(Barrier::new(2 * streams + 1));
    let mut threads: Vec<JoinHandle<Result<(), String>>> = Vec::with_capacity(2 * streams);
    for (out, inn) in pairs {
        let g = go.clone();
        threads.push(std::thread::spawn(move || send(out, bytes, &g)));
        let g = go.clone();
        threads.push(std::thread::spawn(move || receive(inn, bytes, &g)));
    }
    go.wait();
    let start = Instant::now();
    let mut first_error = None;
    for t in threads {
        let r = t
            .join()
            .unwrap_or_else(|_| Err("a wire thread panicked".into()));
        if let Err(e) = r {
            first_error.get_or_insert(e);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    match first_error {
        Some(e) => Err(e),
        None => Ok(Wire {
            streams,
            bytes,
            seconds,
        }),
    }
}

fn send(mut s: TcpStream, bytes: usize, go: &Barrier) -> Result<(), String> {
    let buf = vec![PATTERN; CHUNK.min(bytes)];
    go.wait();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len());
        s.write_all(&buf[..n])
            .map_err(|e| format!("the wire alone, send: {e}"))?;
        left -= n;
    }
    Ok(())
}

fn receive(mut s: TcpStream, bytes: usize, go: &Barrier) -> Result<(), String> {
    let mut buf = vec![0u8; CHUNK.min(bytes)];
    go.wait();
    let mut got = 0;
    while got < bytes {
        let n = s
            .read(&mut buf)
            .map_err(|e| format!("the wire alone, receive: {e}"))?;
        if n == 0 {
            return Err(format!(
                "the wire alone: a stream closed after {got} of {bytes} bytes"
            ));
        }
        if buf[0] != PATTERN || buf[n - 1] != PATTERN {
            return Err("the wire alone: a stream delivered bytes it was not sent".into());
        }
        got += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stream_moves_its_bytes_and_is_timed() {
        let w = loopback(3, 3 * CHUNK + 17).expect("loopback");
        assert_eq!((w.streams, w.bytes), (3, 3 * CHUNK + 17));
        assert!(w.seconds > 0.0 && w.gbps_each().is_finite());
        assert!(w.label().contains("3 streams of 3.1 MB"), "{}", w.label());
    }

    #[test]
    fn nothing_to_move_is_an_error() {
        assert!(loopback(0, 1).is_err());
        assert!(loopback(1, 0).is_err());
    }
}
