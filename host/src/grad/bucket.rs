//! Packing a list of tensors into buckets: pure, so its rules are tested
//! apart from any backend.

use ringreduce_kernels::grad::abi::{CopyDesc, COPY_PIECE_BYTES};

/// One tensor's place in a packed bucket, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    /// Its index in the caller's list.
    pub tensor: usize,
    /// Where it starts in the bucket.
    pub offset: usize,
    /// Its elements.
    pub len: usize,
}

/// One all-reduce of a fused call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bucket {
    /// Tensors copied into the bucket buffer; `len` elements are reduced.
    Packed {
        /// The tensors, in list order.
        items: Vec<Item>,
        /// Elements reduced (the last item's end).
        len: usize,
    },
    /// A tensor longer than the cap, reduced in place without a copy.
    Alone {
        /// Its index in the list.
        tensor: usize,
    },
}

/// Offsets in a bucket are rounded up to 4 elements, so that copies of
/// 16-byte-aligned tensors run on 16-byte accesses.
pub const ALIGN_ELEMENTS: usize = 4;

/// Fills an open bucket in list order; returns it when the next tensor
/// would not fit.
#[derive(Debug, Default)]
pub struct Packer {
    items: Vec<Item>,
    end: usize,
}

impl Packer {
    /// Adds tensor `tensor` of `len` elements to a bucket of `cap`
    /// elements: returns the bucket this closes, if any, and the tensor's
    /// own bucket if it goes alone (longer than `cap`). Empty tensors are
    /// left out.
    pub fn push(
        &mut self,
        tensor: usize,
        len: usize,
        cap: usize,
    ) -> (Option<Bucket>, Option<Bucket>) {
        if len == 0 {
            return (None, None);
        }
        if len > cap {
            return (None, Some(Bucket::Alone { tensor }));
        }
        let mut closed = None;
        let mut at = self.end.next_multiple_of(ALIGN_ELEMENTS);
        if at + len > cap {
            closed = self.take();
            at = 0;
        }
        self.items.push(Item {
            tensor,
            offset: at,
            len,
        });
        self.end = at + len;
        (closed, None)
    }

    /// The open bucket, if it holds anything.
    pub fn take(&mut self) -> Option<Bucket> {
        if self.items.is_empty() {
            return None;
        }
        let b = Bucket::Packed {
            items: std::mem::take(&mut self.items),
            len: self.end,
        };
        self.end = 0;
        Some(b)
    }

    /// Items packed so far into the open bucket.
    pub fn items(&self) -> &[Item] {
        &self.items
    }
}

/// Every bucket of a whole list, in the order they are reduced.
pub fn plan(lens: &[usize], cap: usize) -> Vec<Bucket> {
    let mut p = Packer::default();
    let mut out = Vec::new();
    for (t, &len) in lens.iter().enumerate() {
        let (closed, alone) = p.push(t, len, cap);
        out.extend(closed);
        out.extend(alone);
    }
    out.extend(p.take());
    out
}

/// Copies of `len` `f32`s between `tensor` and `bucket` (addresses), cut
/// into pieces of at most [`COPY_PIECE_BYTES`]; `into_bucket` packs, else
/// unpacks.
pub fn pieces(tensor: u64, bucket: u64, len: usize, into_bucket: bool, out: &mut Vec<CopyDesc>) {
    let bytes = 4 * len as u64;
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(COPY_PIECE_BYTES);
        let (t, b) = (tensor + at, bucket + at);
        out.push(if into_bucket {
            CopyDesc {
                src: t,
                dst: b,
                bytes: n,
            }
        } else {
            CopyDesc {
                src: b,
                dst: t,
                bytes: n,
            }
        });
        at += n;
    }
}

/// Descriptors as the `u64` words the task reads.
pub fn words(descs: &[CopyDesc]) -> Vec<u64> {
    descs.iter().flat_map(|d| [d.src, d.dst, d.bytes]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_keep_order_align_and_cap() {
        let lens = [3, 5, 0, 10, 2, 9, 1];
        let b = plan(&lens, 12);
        assert_eq!(
            b,
            vec![
                Bucket::Packed {
                    items: vec![
                        Item {
                            tensor: 0,
                            offset: 0,
                            len: 3
                        },
                        Item {
                            tensor: 1,
                            offset: 4,
                            len: 5
                        },
                    ],
                    len: 9
                },
                Bucket::Packed {
                    items: vec![Item {
                        tensor: 3,
                        offset: 0,
                        len: 10
                    },],
                    len: 10
                },
                Bucket::Packed {
                    items: vec![Item {
                        tensor: 4,
                        offset: 0,
                        len: 2
                    }],
                    len: 2
                },
                Bucket::Packed {
                    items: vec![Item {
                        tensor: 5,
                        offset: 0,
                        len: 9
                    },],
                    len: 9
                },
                Bucket::Packed {
                    items: vec![Item {
                        tensor: 6,
                        offset: 0,
                        len: 1
                    }],
                    len: 1
                },
            ]
        );
        assert_eq!(plan(&[20, 1], 12)[0], Bucket::Alone { tensor: 0 });
        assert!(plan(&[0, 0], 12).is_empty());
    }

    #[test]
    fn pieces_cover_the_tensor_once() {
        let mut d = Vec::new();
        let len = (3 * COPY_PIECE_BYTES / 4) as usize + 5;
        pieces(1000, 5000, len, true, &mut d);
        assert_eq!(d.len(), 4);
        assert_eq!(d.iter().map(|x| x.bytes).sum::<u64>(), 4 * len as u64);
        assert!(d.windows(2).all(|w| w[1].src == w[0].src + w[0].bytes));
        assert_eq!(d[0].dst, 5000);
        let mut u = Vec::new();
        pieces(1000, 5000, 2, false, &mut u);
        assert_eq!(
            u,
            vec![CopyDesc {
                src: 5000,
                dst: 1000,
                bytes: 8
            }]
        );
    }
}
