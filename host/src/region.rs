//! A rank's part of a collective as element ranges of its buffers, and
//! the checks that every range lies within its buffer: what every backend
//! takes from [`Collectives`](crate::Collectives) callers.

use crate::error::{Error, Result};
use std::ops::Range;

/// One rank's part of a collective: element ranges of its buffers, with
/// the shapes of [`Buffers`](crate::Buffers).
pub enum Region<'a, B> {
    /// Input and output in separate buffers.
    OutOfPlace {
        /// The input's buffer.
        send: &'a B,
        /// Its elements.
        send_at: Range<usize>,
        /// The output's buffer.
        recv: &'a mut B,
        /// Its elements.
        recv_at: Range<usize>,
    },
    /// Input and output as two ranges of one buffer: apart, or in the
    /// collective's in-place layout (any other overlap is
    /// [`Error::InPlaceMisplaced`]). So a rank's send and recv can be parts
    /// of one allocation.
    Split {
        /// The buffer.
        buf: &'a mut B,
        /// The input's elements.
        send_at: Range<usize>,
        /// The output's elements.
        recv_at: Range<usize>,
    },
    /// One buffer, input and output.
    InPlace {
        /// The buffer.
        buf: &'a mut B,
        /// Its elements.
        at: Range<usize>,
    },
}

/// A range past a buffer's end, as the library's error.
pub(crate) fn check_range(
    rank: usize,
    which: &'static str,
    r: &Range<usize>,
    len: usize,
) -> Result<()> {
    if r.start > r.end || r.end > len {
        return Err(Error::BufferOutOfBounds {
            rank,
            which,
            addr: r.start as u64,
            bytes: r.end.saturating_sub(r.start) as u64,
        });
    }
    Ok(())
}

/// Every region's ranges within its buffers (`len` gives a buffer's
/// elements), before any is sliced.
pub(crate) fn check_regions<B>(regions: &[Region<'_, B>], len: impl Fn(&B) -> usize) -> Result<()> {
    for (u, r) in regions.iter().enumerate() {
        match r {
            Region::OutOfPlace {
                send,
                send_at,
                recv,
                recv_at,
            } => {
                check_range(u, "send", send_at, len(send))?;
                check_range(u, "recv", recv_at, len(recv))?;
            }
            Region::Split {
                buf,
                send_at,
                recv_at,
            } => {
                check_range(u, "send", send_at, len(buf))?;
                check_range(u, "recv", recv_at, len(buf))?;
            }
            Region::InPlace { buf, at } => check_range(u, "send", at, len(buf))?,
        }
    }
    Ok(())
}
