//! Path schedulers: which path carries the next outgoing packet.
//!
//! The [`Scheduler`] trait is deliberately narrow: given a [`PathView`] of
//! every path (up or not, how long the packet would wait for the path's
//! pacing budget, the path's expected one-way delay), return one of them.
//! Schedulers keep their own state and never see packets, sockets or
//! clocks, so they are tested exactly in virtual time.
//!
//! [`Ecf`] (`ecf.rs`, the default) sends each packet where it is expected
//! to arrive first.
//!
//! [`SmoothWrr`] is the smooth weighted round-robin used by nginx upstreams
//! (and analysed as "interleaved WRR"): over any window of `W = Σ weights`
//! consecutive picks with a fixed up-set, path `i` is chosen exactly `w_i`
//! times, and picks of one path are spread out rather than bunched.
//!
//! It can count shares in packets or in bytes ([`Share`]). Counting bytes
//! charges each pick with the packet length, which keeps the byte shares
//! right when packet sizes follow a pattern: with packet counting, strictly
//! alternating large and small packets (an IP fragment pair, a TCP segment
//! and its ACK) would put every large packet on one path and every small
//! one on the other.
//!
//! Invariants:
//! * `pick` returns only a path whose `up` flag is true, or `None` if none is;
//! * a path that is down accumulates no credit, so it does not receive a
//!   burst when it comes back.

mod ecf;

pub use ecf::Ecf;

use crate::{Nanos, PathId};

/// What a scheduler sees of one path when it places a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathView {
    /// The path carries data (see `path/liveness.rs`).
    pub up: bool,
    /// Time until the packet would have left on this path: the bytes
    /// already waiting for it and the packet itself, at its pacing rate
    /// (0 when not paced).
    pub wait_ns: Nanos,
    /// Expected one-way delay: half the lowest round-trip time plus the
    /// queueing delay the receiver reports; `None` until measured.
    pub delay_ns: Option<Nanos>,
    /// Pacing budget left once the packet (and what waits for the path)
    /// has left, as time at the pacing rate (0 when none or not paced):
    /// how far the path is from its rate just now.
    pub spare_ns: Nanos,
}

/// Chooses a path per packet.
pub trait Scheduler: Send {
    /// Pick a path among those with `paths[i].up` for a packet of `len`
    /// bytes. `paths.len()` equals the number of configured paths.
    fn pick(&mut self, paths: &[PathView], len: usize) -> Option<PathId>;
    /// Pick one path for a burst of `packets` packets totalling `bytes`
    /// (a TSO super-packet), charged as the whole burst, so that weights
    /// hold while the I/O layer keeps the burst together for batching.
    fn pick_burst(&mut self, paths: &[PathView], bytes: usize, packets: usize) -> Option<PathId> {
        let _ = packets;
        self.pick(paths, bytes)
    }
    /// Whether paths are paced at their estimated rate and packets wait in
    /// mpt's queue for their path's budget (path-aware scheduling); `false`
    /// for static shares.
    fn paced(&self) -> bool {
        false
    }
    /// Replace the relative weights (loss adaptation); schedulers without
    /// weights ignore it.
    fn set_weights(&mut self, weights: &[u32]) {
        let _ = weights;
    }
    /// Short name for status output.
    fn name(&self) -> &'static str;
}

/// What a weight is a share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Packets,
    Bytes,
}

/// Smooth weighted round-robin by packet count or bytes.
#[derive(Debug, Clone)]
pub struct SmoothWrr {
    weights: Vec<i64>,
    current: Vec<i64>,
    share: Share,
}

impl SmoothWrr {
    /// `weights[i]` is path `i`'s relative share of packets; zero weights are
    /// raised to one (configuration rejects them before this point).
    pub fn new(weights: &[u32]) -> Self {
        Self::with_share(weights, Share::Packets)
    }

    /// As [`SmoothWrr::new`], counting shares as `share`.
    pub fn with_share(weights: &[u32], share: Share) -> Self {
        Self {
            weights: weights.iter().map(|&w| i64::from(w.max(1))).collect(),
            current: vec![0; weights.len()],
            share,
        }
    }
}

impl SmoothWrr {
    fn pick_cost(&mut self, paths: &[PathView], cost: i64) -> Option<PathId> {
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for i in 0..self.weights.len() {
            if !paths.get(i).is_some_and(|p| p.up) {
                self.current[i] = 0;
                continue;
            }
            self.current[i] += self.weights[i] * cost;
            total += self.weights[i] * cost;
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        PathId::try_from(b).ok()
    }
}

impl Scheduler for SmoothWrr {
    fn pick(&mut self, paths: &[PathView], len: usize) -> Option<PathId> {
        self.pick_burst(paths, len, 1)
    }

    fn pick_burst(&mut self, paths: &[PathView], bytes: usize, packets: usize) -> Option<PathId> {
        // Cost: packets, or bytes (≤ 64 KiB per burst, so weight × cost ×
        // paths stays far inside i64).
        let cost = match self.share {
            Share::Packets => packets.clamp(1, 1 << 16) as i64,
            Share::Bytes => bytes.clamp(1, 1 << 17) as i64,
        };
        self.pick_cost(paths, cost)
    }

    fn set_weights(&mut self, weights: &[u32]) {
        // A path added at runtime starts with no credit.
        self.current.resize(weights.len(), 0);
        self.weights.resize(weights.len(), 1);
        for (w, n) in self.weights.iter_mut().zip(weights) {
            *w = i64::from((*n).max(1));
        }
    }

    fn name(&self) -> &'static str {
        match self.share {
            Share::Packets => "wrr-packets",
            Share::Bytes => "wrr-bytes",
        }
    }
}

/// Views of paths that are up (`true`) or down, with nothing else known.
pub fn views_of(up: &[bool]) -> Vec<PathView> {
    up.iter()
        .map(|&up| PathView {
            up,
            ..PathView::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(weights: &[u32], up: &[bool], n: usize) -> Vec<usize> {
        let mut s = SmoothWrr::new(weights);
        let mut counts = vec![0; weights.len()];
        for _ in 0..n {
            counts[s.pick(&views_of(up), 1400).unwrap() as usize] += 1;
        }
        counts
    }

    #[test]
    fn shares_match_weights_within_one_percent() {
        for weights in [
            vec![1, 1],
            vec![1, 2, 3, 4],
            vec![5, 1],
            vec![7, 3, 1, 1, 9],
        ] {
            let up = vec![true; weights.len()];
            let n = 10_000;
            let counts = shares(&weights, &up, n);
            let total: u32 = weights.iter().sum();
            for (i, &w) in weights.iter().enumerate() {
                let expected = n as f64 * f64::from(w) / f64::from(total);
                let err = (counts[i] as f64 - expected).abs() / expected;
                assert!(
                    err < 0.01,
                    "weights {weights:?} path {i}: {} vs {expected}",
                    counts[i]
                );
            }
        }
    }

    #[test]
    fn interleaves_rather_than_bursts() {
        // Weights 3:1 must give a pattern like A A B A, never A A A B... with
        // more than 3 As in a row.
        let mut s = SmoothWrr::new(&[3, 1]);
        let picks: Vec<_> = (0..400)
            .map(|_| s.pick(&views_of(&[true, true]), 1).unwrap())
            .collect();
        let mut run = 0;
        for p in &picks {
            run = if *p == 0 { run + 1 } else { 0 };
            assert!(run <= 3);
        }
        // Equal weights strictly alternate.
        let mut s = SmoothWrr::new(&[1, 1]);
        let picks: Vec<_> = (0..10)
            .map(|_| s.pick(&views_of(&[true, true]), 1).unwrap())
            .collect();
        assert_eq!(picks, vec![0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn byte_shares_survive_size_patterns() {
        // Alternating 1420/48-byte packets (a fragment pair) on equal weights.
        for (weights, tol) in [(vec![1u32, 1], 0.01), (vec![3, 1, 2], 0.01)] {
            let up = vec![true; weights.len()];
            let mut pk = SmoothWrr::with_share(&weights, Share::Packets);
            let mut by = SmoothWrr::with_share(&weights, Share::Bytes);
            let mut bytes_pk = vec![0usize; weights.len()];
            let mut bytes_by = vec![0usize; weights.len()];
            for i in 0..10_000 {
                let len = if i % 2 == 0 { 1420 } else { 48 };
                bytes_pk[pk.pick(&views_of(&up), len).unwrap() as usize] += len;
                bytes_by[by.pick(&views_of(&up), len).unwrap() as usize] += len;
            }
            let total: usize = bytes_by.iter().sum();
            let wsum: u32 = weights.iter().sum();
            for (i, w) in weights.iter().enumerate() {
                let expected = total as f64 * f64::from(*w) / f64::from(wsum);
                let err = (bytes_by[i] as f64 - expected).abs() / expected;
                assert!(err < tol, "bytes {weights:?}: {bytes_by:?}");
            }
            if weights == [1, 1] {
                // Packet counting puts all large packets on one path.
                assert!(bytes_pk[0] > 20 * bytes_pk[1], "{bytes_pk:?}");
            }
        }
    }

    #[test]
    fn bursts_keep_the_weights() {
        // Bursts of 1 to 45 packets of 1400 bytes on weights 3:1.
        let mut s = SmoothWrr::with_share(&[3, 1], Share::Bytes);
        let mut bytes = [0usize; 2];
        for i in 0..10_000 {
            let n = 1 + (i * 7) % 45;
            bytes[s.pick_burst(&views_of(&[true, true]), n * 1400, n).unwrap() as usize] +=
                n * 1400;
        }
        let share = bytes[0] as f64 / (bytes[0] + bytes[1]) as f64;
        assert!((share - 0.75).abs() < 0.01, "{share}");
    }

    #[test]
    fn skips_down_paths_and_none_when_all_down() {
        let counts = shares(&[1, 1, 1], &[true, false, true], 1000);
        assert_eq!(counts[1], 0);
        assert_eq!(counts[0] + counts[2], 1000);
        let mut s = SmoothWrr::new(&[1, 2]);
        assert_eq!(s.pick(&views_of(&[false, false]), 1), None);
        assert_eq!(s.pick(&[], 1), None);
    }
}
