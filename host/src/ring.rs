//! Ring orders.

use crate::error::{Error, Result};
use ringreduce_kernels::ring::is_permutation;

/// The order of user ranks around the ring: position `p` holds user rank
/// `user_from_ring[p]`. Each rank sends only to the next position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingOrder {
    user_from_ring: Vec<u32>,
}

impl RingOrder {
    /// `0, 1, …, k-1`.
    pub fn identity(k: usize) -> Self {
        RingOrder {
            user_from_ring: (0..k as u32).collect(),
        }
    }

    /// A ring from user ranks in ring order; it must be a permutation of
    /// `0..order.len()`.
    pub fn new(order: &[u32]) -> Result<Self> {
        if !is_permutation(order) {
            return Err(Error::BadRingOrder {
                order: order.to_vec(),
                k: order.len(),
            });
        }
        Ok(RingOrder {
            user_from_ring: order.to_vec(),
        })
    }

    /// The order for a communicator of `k` ranks: `order`, checked, or the
    /// identity when `None`.
    pub fn for_ranks(order: Option<&[u32]>, k: usize) -> Result<Self> {
        match order {
            None => Ok(Self::identity(k)),
            Some(o) if o.len() != k => Err(Error::RingOrderLength {
                order: o.to_vec(),
                k,
            }),
            Some(o) => Self::new(o),
        }
    }

    /// Ranks in the ring.
    pub fn len(&self) -> usize {
        self.user_from_ring.len()
    }

    /// Whether the ring has no ranks.
    pub fn is_empty(&self) -> bool {
        self.user_from_ring.is_empty()
    }

    /// User ranks in ring order.
    pub fn user_from_ring(&self) -> &[u32] {
        &self.user_from_ring
    }

    /// The ring position of a user rank.
    pub fn ring_from_user(&self, user: usize) -> usize {
        self.user_from_ring
            .iter()
            .position(|&u| u as usize == user)
            .expect("a permutation holds every rank")
    }

    /// User ranks of the ring neighbours of `user`: (predecessor, successor).
    pub fn neighbours(&self, user: usize) -> (usize, usize) {
        let k = self.len();
        let p = self.ring_from_user(user);
        (
            self.user_from_ring[(p + k - 1) % k] as usize,
            self.user_from_ring[(p + 1) % k] as usize,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert!(RingOrder::new(&[1, 2, 0, 3]).is_ok());
        assert!(matches!(
            RingOrder::new(&[1, 1]),
            Err(Error::BadRingOrder { .. })
        ));
        assert!(matches!(
            RingOrder::for_ranks(Some(&[0, 1]), 3),
            Err(Error::RingOrderLength { k: 3, .. })
        ));
        let r = RingOrder::new(&[1, 2, 0, 3]).unwrap();
        assert_eq!(r.ring_from_user(0), 2);
        assert_eq!(r.neighbours(0), (2, 3));
        assert_eq!(r.neighbours(1), (3, 2));
    }
}
