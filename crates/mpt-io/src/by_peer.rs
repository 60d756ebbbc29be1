//! Datagrams of several peers worked on together, on the workers, each
//! with its own peer's key (a sealer or an opener): all at once when they
//! share one peer (always so for a single tunnel), else one batch per peer.
//!
//! Invariants: every span gets a result, at its own index (`missing` for a
//! peer without a key); a peer's spans keep their order (the workers want
//! spans sorted by buffer and offset); no allocation once the scratch has
//! grown to a batch.

use mpt_core::concentrator::PeerId;

use crate::batch::Span;
use crate::workers::Workers;

/// Scratch, reused batch after batch.
pub struct ByPeer<R> {
    order: Vec<usize>,
    spans: Vec<Span>,
    results: Vec<R>,
}

impl<R> Default for ByPeer<R> {
    fn default() -> Self {
        Self {
            order: Vec::new(),
            spans: Vec::new(),
            results: Vec::new(),
        }
    }
}

impl<R: Send + Copy> ByPeer<R> {
    /// `results[j] = work(key(peers[j]), j, bytes of spans[j])` for every
    /// span `j`, or `missing` where the peer has no key.
    #[allow(clippy::too_many_arguments)] // the batch, its peers, and the work
    pub fn run<K: Sync>(
        &mut self,
        workers: &Workers,
        bufs: &mut [Vec<u8>],
        spans: &[Span],
        peers: &[PeerId],
        results: &mut [R],
        missing: R,
        key: impl Fn(PeerId) -> Option<K>,
        work: impl Fn(&K, usize, &mut [u8]) -> R + Sync,
    ) {
        results.fill(missing);
        let Some(&first) = peers.first() else {
            return;
        };
        if peers.iter().all(|p| *p == first) {
            if let Some(k) = key(first) {
                workers.for_each(bufs, spans, results, &|j, d: &mut [u8]| work(&k, j, d));
            }
            return;
        }
        self.order.clear();
        self.order.extend(0..spans.len());
        self.order.sort_by_key(|&j| (peers[j], j));
        for run in self.order.chunk_by(|&a, &b| peers[a] == peers[b]) {
            let Some(k) = key(peers[run[0]]) else {
                continue;
            };
            self.spans.clear();
            self.spans.extend(run.iter().map(|&j| spans[j]));
            self.results.clear();
            self.results.resize(run.len(), missing);
            workers.for_each(bufs, &self.spans, &mut self.results, &|i, d: &mut [u8]| {
                work(&k, run[i], d)
            });
            for (i, &j) in run.iter().enumerate() {
                results[j] = self.results[i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_span_is_worked_with_its_own_peers_key_in_place() {
        let workers = Workers::inline();
        let mut bufs = vec![vec![0u8; 40]];
        let spans: Vec<Span> = (0..8)
            .map(|i| Span {
                buf: 0,
                offset: i * 5,
                len: 5,
            })
            .collect();
        let peers = [3, 1, 3, 2, 1, 9, 3, 2];
        let mut results = [0u32; 8];
        let mut by = ByPeer::default();
        // Peer 9 has no key; each key stamps its peer's number.
        let key = |p: PeerId| (p != 9).then_some(p as u8);
        by.run(
            &workers,
            &mut bufs,
            &spans,
            &peers,
            &mut results,
            0,
            key,
            |k, j, d| {
                d.fill(*k);
                j as u32 + 100
            },
        );
        assert_eq!(results, [100, 101, 102, 103, 104, 0, 106, 107]);
        for (j, p) in peers.iter().enumerate() {
            let want = if *p == 9 { 0 } else { *p as u8 };
            assert!(
                bufs[0][j * 5..j * 5 + 5].iter().all(|b| *b == want),
                "span {j}"
            );
        }
        // One peer: all at once.
        by.run(
            &workers,
            &mut bufs,
            &spans,
            &[4; 8],
            &mut results,
            0,
            Some,
            |_, j, _| j as u32,
        );
        assert_eq!(results, [0, 1, 2, 3, 4, 5, 6, 7]);
    }
}
