//! A rank's part of a collective as element ranges of its buffers, and
//! the checks that every range lies within its buffer: what every backend
//! takes from [`Collectives`](crate::Collectives) callers.

use crate::error::{Error, Result};
use ringreduce_kernels::Collective;
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

impl<B> Region<'_, B> {
    /// The same buffers with input `send_at` and output `recv_at`: a part
    /// of a larger collective's region (`None` in place, which has no
    /// separate input).
    pub(crate) fn apart(
        &mut self,
        send_at: Range<usize>,
        recv_at: Range<usize>,
    ) -> Option<Region<'_, B>> {
        match self {
            Region::OutOfPlace { send, recv, .. } => Some(Region::OutOfPlace {
                send: &**send,
                send_at,
                recv: &mut **recv,
                recv_at,
            }),
            Region::Split { buf, .. } => Some(Region::Split {
                buf: &mut **buf,
                send_at,
                recv_at,
            }),
            Region::InPlace { .. } => None,
        }
    }

    /// The same output, with input `send_at` of another buffer: a part
    /// whose input was gathered elsewhere first.
    pub(crate) fn with_input<'s>(
        &'s mut self,
        send: &'s B,
        send_at: Range<usize>,
        recv_at: Range<usize>,
    ) -> Region<'s, B> {
        let recv = match self {
            Region::OutOfPlace { recv, .. } => &mut **recv,
            Region::Split { buf, .. } | Region::InPlace { buf, .. } => &mut **buf,
        };
        Region::OutOfPlace {
            send,
            send_at,
            recv,
            recv_at,
        }
    }

    /// The buffer the input is in.
    pub(crate) fn input(&self) -> &B {
        match self {
            Region::OutOfPlace { send, .. } => send,
            Region::Split { buf, .. } | Region::InPlace { buf, .. } => buf,
        }
    }

    /// The buffer the output is in.
    pub(crate) fn output(&self) -> &B {
        match self {
            Region::OutOfPlace { recv, .. } => recv,
            Region::Split { buf, .. } | Region::InPlace { buf, .. } => buf,
        }
    }
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

/// The one region of a backend that runs a whole job's call as one rank's
/// (the hierarchical and NCCL ones), its ranges checked as
/// [`check_regions`] does; any other count is [`Error::WrongBufferCount`].
pub(crate) fn one_region<'r, 'a, B>(
    regions: &'r mut [Region<'a, B>],
    len: impl Fn(&B) -> usize,
) -> Result<&'r mut Region<'a, B>> {
    let [region] = regions else {
        return Err(Error::WrongBufferCount {
            got: regions.len(),
            k: 1,
        });
    };
    check_regions(std::slice::from_ref(region), len)?;
    Ok(region)
}

/// The input and output element ranges of rank `rank`'s one region of
/// collective `c` over `world` ranks (the in-place shapes at NCCL's
/// offsets), checked against the collective's lengths: for backends that
/// run a whole job's call as one rank's (the hierarchical and NCCL ones).
pub(crate) fn ranges_of<B>(
    c: Collective,
    region: &Region<'_, B>,
    rank: usize,
    world: usize,
) -> Result<(Range<usize>, Range<usize>)> {
    let (send_at, recv_at) = match region {
        Region::InPlace { at, .. } => {
            let n = match c {
                Collective::AllReduce => at.len(),
                _ if !at.len().is_multiple_of(world) => {
                    return Err(Error::InPlaceLength {
                        rank,
                        len: at.len() as u64,
                        k: world,
                    })
                }
                _ => at.len() / world,
            };
            let (so, ro) = c.in_place_offsets(rank as u64, n as u64);
            let (sl, rl) = c.lengths(world as u64, n as u64);
            let (so, ro) = (at.start + so as usize, at.start + ro as usize);
            (so..so + sl as usize, ro..ro + rl as usize)
        }
        Region::OutOfPlace {
            send_at, recv_at, ..
        }
        | Region::Split {
            send_at, recv_at, ..
        } => (send_at.clone(), recv_at.clone()),
    };
    let n = match c {
        Collective::ReduceScatter => recv_at.len(),
        _ => send_at.len(),
    } as u64;
    let (sl, rl) = c.lengths(world as u64, n);
    if send_at.len() as u64 != sl {
        return Err(Error::SendLength {
            rank,
            send_len: send_at.len() as u64,
            expected: sl,
            collective: c.name(),
        });
    }
    if recv_at.len() as u64 != rl {
        return Err(Error::RecvLength {
            rank,
            recv_len: recv_at.len() as u64,
            expected: rl,
            collective: c.name(),
        });
    }
    Ok((send_at, recv_at))
}
