//! Choosing the ring order from the links between devices. Pure functions
//! over what the driver reports, so the choice is tested without GPUs.
//!
//! Each rank writes into its successor's staging buffer and flags, and into
//! its predecessor's "chunk done" flag and slot, so a ring edge between two
//! devices needs peer access both ways. Ranks on one device need none.

use crate::error::{Error, Result};
use crate::ring::RingOrder;

/// What the driver reports about the link from one device to another
/// (`cuDeviceGetP2PAttribute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// `CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED`.
    pub access: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK`: lower is faster.
    pub perf_rank: i32,
}

/// Rings of up to this many ranks are searched exhaustively ((k-1)! orders);
/// larger ones are built greedily.
const EXHAUSTIVE_MAX: usize = 9;

/// The cost of the edge between user ranks `u` and `v`, or `None` when
/// their devices cannot reach each other both ways.
fn edge(
    devices: &[usize],
    link: &impl Fn(usize, usize) -> Link,
    u: usize,
    v: usize,
) -> Option<i32> {
    let (a, b) = (devices[u], devices[v]);
    if a == b {
        return Some(i32::MIN);
    }
    let (ab, ba) = (link(a, b), link(b, a));
    (ab.access && ba.access).then(|| ab.perf_rank.max(ba.perf_rank))
}

/// The first edge of `order` whose devices cannot reach each other, as a
/// typed error.
pub fn check_ring(
    devices: &[usize],
    order: &RingOrder,
    link: impl Fn(usize, usize) -> Link,
) -> Result<()> {
    let ufr = order.user_from_ring();
    let k = ufr.len();
    for p in 0..k {
        let (u, v) = (ufr[p] as usize, ufr[(p + 1) % k] as usize);
        if k > 1 && edge(devices, &link, u, v).is_none() {
            return Err(Error::NoPeerAccess {
                a: u,
                b: v,
                device_a: devices[u],
                device_b: devices[v],
            });
        }
    }
    Ok(())
}

/// The ring for ranks placed on `devices` (user rank `u` on `devices[u]`).
///
/// Ordinal order (user ranks sorted by device, then by rank) unless the
/// links differ: with NVSwitch, or one device, every order is equal. When
/// they differ, the ring whose slowest edge is fastest wins, then the one
/// with the smallest sum of performance ranks, then the earliest in
/// lexicographic order. A ring no order can close is an error naming the
/// first unreachable pair of the ordinal ring.
pub fn ring_from_topology(
    devices: &[usize],
    link: impl Fn(usize, usize) -> Link,
) -> Result<RingOrder> {
    let k = devices.len();
    let mut ordinal: Vec<u32> = (0..k as u32).collect();
    ordinal.sort_by_key(|&u| (devices[u as usize], u));
    let ordinal = RingOrder::new(&ordinal)?;
    let mut costs = Vec::new();
    for u in 0..k {
        for v in 0..k {
            if u != v && devices[u] != devices[v] {
                costs.push(edge(devices, &link, u, v));
            }
        }
    }
    let uniform = costs.iter().all(|c| c.is_some() && *c == costs[0]);
    if uniform {
        return Ok(ordinal);
    }
    let cost = |ring: &[u32]| -> Option<(i32, i64)> {
        let mut worst = i32::MIN;
        let mut sum = 0i64;
        for p in 0..ring.len() {
            let c = edge(
                devices,
                &link,
                ring[p] as usize,
                ring[(p + 1) % ring.len()] as usize,
            )?;
            worst = worst.max(c);
            sum += c.max(0) as i64;
        }
        Some((worst, sum))
    };
    let start = ordinal.user_from_ring().to_vec();
    let best = if k <= EXHAUSTIVE_MAX {
        let mut best: Option<((i32, i64), Vec<u32>)> = None;
        let mut rest = start[1..].to_vec();
        permutations(&mut rest, 0, &mut |perm| {
            let mut ring = Vec::with_capacity(k);
            ring.push(start[0]);
            ring.extend_from_slice(perm);
            if let Some(c) = cost(&ring) {
                if best.as_ref().is_none_or(|(b, _)| c < *b) {
                    best = Some((c, ring));
                }
            }
        });
        best.map(|(_, r)| r)
    } else {
        greedy(&start, |u, v| edge(devices, &link, u, v)).filter(|r| cost(r).is_some())
    };
    match best {
        Some(r) => RingOrder::new(&r),
        None => {
            check_ring(devices, &ordinal, &link)?;
            Ok(ordinal)
        }
    }
}

/// Calls `f` with every permutation of `v[i..]` (prefix fixed), in
/// lexicographic order of the original positions.
fn permutations(v: &mut Vec<u32>, i: usize, f: &mut impl FnMut(&[u32])) {
    if i == v.len() {
        f(v);
        return;
    }
    for j in i..v.len() {
        let x = v.remove(j);
        v.insert(i, x);
        permutations(v, i + 1, f);
        let x = v.remove(i);
        v.insert(j, x);
    }
}

/// Nearest neighbour from `start[0]`, preferring the cheapest reachable
/// rank not yet in the ring, ties to the earliest in `start`.
fn greedy(start: &[u32], edge: impl Fn(usize, usize) -> Option<i32>) -> Option<Vec<u32>> {
    let mut ring = vec![start[0]];
    let mut left: Vec<u32> = start[1..].to_vec();
    while !left.is_empty() {
        let cur = *ring.last().unwrap() as usize;
        let (i, _) = left
            .iter()
            .enumerate()
            .filter_map(|(i, &v)| edge(cur, v as usize).map(|c| (i, c)))
            .min_by_key(|&(i, c)| (c, i))?;
        ring.push(left.remove(i));
    }
    Some(ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvswitch(_: usize, _: usize) -> Link {
        Link {
            access: true,
            perf_rank: 0,
        }
    }

    #[test]
    fn nvswitch_keeps_ordinal_order() {
        let r = ring_from_topology(&[0, 1, 2, 3, 4, 5, 6, 7], nvswitch).unwrap();
        assert_eq!(r.user_from_ring(), &[0, 1, 2, 3, 4, 5, 6, 7]);
        // Users listed out of device order: ordinal order follows devices.
        let r = ring_from_topology(&[3, 1, 2, 0], nvswitch).unwrap();
        assert_eq!(r.user_from_ring(), &[3, 1, 2, 0]);
    }

    #[test]
    fn one_device_needs_no_links() {
        let none = |_: usize, _: usize| Link {
            access: false,
            perf_rank: 9,
        };
        let r = ring_from_topology(&[0, 0, 0, 0], none).unwrap();
        assert_eq!(r.user_from_ring(), &[0, 1, 2, 3]);
    }

    /// Two NVLink pairs (0-1, 2-3) joined by slower PCIe: the ring must use
    /// both fast pairs and cross the slow link only twice.
    #[test]
    fn prefers_fast_links() {
        let link = |a: usize, b: usize| Link {
            access: true,
            perf_rank: if a / 2 == b / 2 { 0 } else { 5 },
        };
        // Devices placed so that ordinal-neighbour users are not paired.
        let devices = [0, 2, 1, 3];
        let r = ring_from_topology(&devices, link).unwrap();
        let ufr = r.user_from_ring();
        let slow = (0..4)
            .filter(|&p| {
                let (a, b) = (devices[ufr[p] as usize], devices[ufr[(p + 1) % 4] as usize]);
                a / 2 != b / 2
            })
            .count();
        assert_eq!(slow, 2, "ring {ufr:?}");
    }

    /// A missing link is routed around when possible…
    #[test]
    fn routes_around_a_missing_link() {
        let link = |a: usize, b: usize| Link {
            access: (a, b) != (1, 2) && (a, b) != (2, 1),
            perf_rank: 0,
        };
        let devices = [0, 1, 2, 3];
        let r = ring_from_topology(&devices, link).unwrap();
        check_ring(&devices, &r, link).unwrap();
        assert_ne!(r.user_from_ring(), &[0, 1, 2, 3]);
    }

    /// …and a typed error naming the pair when it is not.
    #[test]
    fn unreachable_pair_is_named() {
        let link = |a: usize, b: usize| Link {
            access: a.min(b) != 0 || a.max(b) == 1,
            perf_rank: 0,
        };
        // Device 0 reaches only device 1: no ring of three closes.
        let e = ring_from_topology(&[0, 1, 2], link).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoPeerAccess {
                    device_a: 2,
                    device_b: 0,
                    ..
                }
            ),
            "{e}"
        );
        // One-way access is not enough either.
        let one_way = |a: usize, b: usize| Link {
            access: a < b,
            perf_rank: 0,
        };
        let e = ring_from_topology(&[0, 1], one_way).unwrap_err();
        assert!(matches!(e, Error::NoPeerAccess { .. }), "{e}");
    }

    #[test]
    fn an_override_is_checked() {
        let link = |a: usize, b: usize| Link {
            access: (a + b) % 2 == 1,
            perf_rank: 0,
        };
        let devices = [0, 1, 2, 3];
        assert!(check_ring(&devices, &RingOrder::new(&[0, 1, 2, 3]).unwrap(), link).is_ok());
        let e = check_ring(&devices, &RingOrder::new(&[0, 2, 1, 3]).unwrap(), link).unwrap_err();
        assert_eq!(
            e,
            Error::NoPeerAccess {
                a: 0,
                b: 2,
                device_a: 0,
                device_b: 2
            }
        );
    }

    #[test]
    fn large_rings_are_built_greedily() {
        let k = 16;
        let link = |a: usize, b: usize| Link {
            access: true,
            perf_rank: (a as i32 - b as i32).abs(),
        };
        let devices: Vec<usize> = (0..k).rev().collect();
        let r = ring_from_topology(&devices, link).unwrap();
        check_ring(&devices, &r, link).unwrap();
        let mut seen = r.user_from_ring().to_vec();
        seen.sort();
        assert_eq!(seen, (0..k as u32).collect::<Vec<_>>());
    }
}
