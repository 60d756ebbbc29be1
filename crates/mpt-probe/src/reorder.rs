//! Reordering metrics of RFC 4737 ("Packet Reordering Metrics").
//!
//! * A packet is *reordered* (§3.3) when its sequence number is lower than
//!   the next expected one, i.e. a higher number arrived before it.
//! * Its *reordering extent* (§4.2.1) is the number of packets that
//!   arrived between the earliest packet with a higher sequence number
//!   and it: e = i − j, with i its arrival position and j that earliest
//!   packet's.
//! * *n-reordering* (§5): a packet is n-reordered when n is the largest
//!   number such that the n packets that arrived just before it all have
//!   higher sequence numbers; this is what a receiver with a duplicate-ACK
//!   threshold of n (TCP: 3) would take for a loss.
//!
//! Invariants: O(log n) per packet (a binary search over the arrival
//! positions of the successive highest sequence numbers), O(n) memory in
//! the number of packets that raised the highest; duplicates are the
//! caller's to filter.

use serde::Serialize;

/// The reordering of a stream.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Reordering {
    /// Reordered packets (§3.3), and their share of those received.
    pub reordered: u64,
    pub ratio: f64,
    /// Largest and mean reordering extent of the reordered packets (§4.2).
    pub extent_max: u64,
    pub extent_mean: f64,
    /// Packets that are n-reordered for n ≥ 3 (§5; TCP's threshold).
    pub n3_reordered: u64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ReorderMeter {
    /// (sequence, arrival position) of every packet that raised the
    /// highest sequence number: both increasing.
    records: Vec<(u64, u64)>,
    /// Sequence numbers of the last arrivals, for n-reordering.
    recent: [u64; 3],
    received: u64,
    reordered: u64,
    extent_sum: u64,
    extent_max: u64,
    n3: u64,
}

impl ReorderMeter {
    /// Packet `seq` arrived (the next arrival position).
    pub fn on_packet(&mut self, seq: u64) {
        let i = self.received;
        let highest = self.records.last().map(|r| r.0);
        if highest.is_some_and(|h| seq < h) {
            self.reordered += 1;
            // The earliest arrival with a higher sequence number.
            let k = self.records.partition_point(|r| r.0 < seq);
            let j = self.records[k].1;
            let e = i - j;
            self.extent_sum += e;
            self.extent_max = self.extent_max.max(e);
            let last = (i as usize).min(3);
            if last == 3 && self.recent.iter().all(|r| *r > seq) {
                self.n3 += 1;
            }
        } else {
            self.records.push((seq, i));
        }
        self.recent.rotate_left(1);
        self.recent[2] = seq;
        self.received += 1;
    }

    pub fn summary(&self) -> Reordering {
        Reordering {
            reordered: self.reordered,
            ratio: if self.received > 0 {
                self.reordered as f64 / self.received as f64
            } else {
                0.0
            },
            extent_max: self.extent_max,
            extent_mean: if self.reordered > 0 {
                self.extent_sum as f64 / self.reordered as f64
            } else {
                0.0
            },
            n3_reordered: self.n3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(seqs: &[u64]) -> Reordering {
        let mut m = ReorderMeter::default();
        seqs.iter().for_each(|s| m.on_packet(*s));
        m.summary()
    }

    #[test]
    fn in_order_is_not_reordered() {
        assert_eq!(meter(&[0, 1, 2, 5, 6]), Reordering::default());
    }

    #[test]
    fn extents_as_in_rfc4737() {
        // RFC 4737 §4.2.1's example idea: 1 2 3 5 6 7 4 — packet 4 arrives
        // at position 6; the earliest higher one (5) at position 3: e = 3.
        let r = meter(&[1, 2, 3, 5, 6, 7, 4]);
        assert_eq!((r.reordered, r.extent_max, r.n3_reordered), (1, 3, 1));
        assert!((r.ratio - 1.0 / 7.0).abs() < 1e-12);
        // Two late packets: 3 (after 4 only: e = 1, 1-reordered) and 1
        // (after 2, 4, 3, 5: e = 4; the three before it, 4, 3 and 5, are
        // all higher: 3-reordered).
        let r = meter(&[0, 2, 4, 3, 5, 1]);
        assert_eq!(r.reordered, 2);
        assert_eq!(r.extent_max, 4);
        assert!((r.extent_mean - 2.5).abs() < 1e-12);
        assert_eq!(r.n3_reordered, 1);
    }
}
