//! Two-step send stamps: each probe's one-way delay from the kernel's
//! transmit stamp, which the next probe carries (format 2, see the crate's
//! header), with the user-space stamp as the fallback.
//!
//! A probe is held until its successor (which carries its transmit stamp)
//! arrives, then released with that stamp. It is released with its own
//! user-space stamp instead when it cannot get one: a later probe than its
//! successor arrived first (the successor is lost or reordered), the stream
//! ends, or the sender had no stamp (format 1, stamps off, a send that
//! failed). A stamp that arrives before its probe (reordering) waits for
//! it, at most [`EARLY_STAMPS_MAX`] of them.
//!
//! Invariants: every probe handed to [`SendStamps::on_probe`] comes out of
//! it exactly once (at the latest from [`SendStamps::flush`]), in arrival
//! order when the stream is in order; a transmit stamp is used only if it
//! lies after the probe's user stamp and within [`STAMP_TO_WIRE_MAX_NS`]
//! of it (else it is not this probe's and is counted as rejected); memory
//! is bounded.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Probe;

/// Transmit stamps kept for probes not yet arrived (tuning knob).
pub const EARLY_STAMPS_MAX: usize = 256;
/// Probes held for their stamp at most (tuning knob); only a stream that
/// arrives backwards holds more than two.
pub const HELD_MAX: usize = 256;
/// The longest a datagram may take from `send` to the driver for its
/// transmit stamp to be believed (tuning knob): generous for a sender's
/// own queue (a qdisc), far below any real mix-up.
pub const STAMP_TO_WIRE_MAX_NS: u64 = 100_000_000;

/// How the send times were taken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SendStampCounts {
    /// Probes timed from the kernel's transmit stamp.
    pub kernel: u64,
    /// Probes timed from the user-space stamp.
    pub user: u64,
    /// Transmit stamps not believed (not after the probe's user stamp, or
    /// too far after it); those probes count as `user` too.
    pub rejected: u64,
}

/// Probes waiting for their transmit stamp.
#[derive(Debug, Default, Clone)]
pub struct SendStamps {
    /// seq → (arrival, user send stamp).
    held: BTreeMap<u64, (u64, u64)>,
    /// seq → transmit stamp, for probes not yet arrived.
    early: BTreeMap<u64, u64>,
    pub counts: SendStampCounts,
}

impl SendStamps {
    /// Probe `p` arrived at `arrival`: push `(arrival, send time)` of each
    /// probe whose send time is final now onto `out`.
    pub fn on_probe(&mut self, p: &Probe, arrival: u64, out: &mut Vec<(u64, u64)>) {
        // Probes that can no longer get their stamp in order.
        let stale = p.seq.saturating_sub(1);
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() >= stale {
                break;
            }
            let (a, u) = entry.remove();
            out.push((a, self.choose(u, None)));
        }
        if let (Some(tx), Some(prev)) = (p.prev_tx_ns, p.seq.checked_sub(1)) {
            if let Some((a, u)) = self.held.remove(&prev) {
                out.push((a, self.choose(u, Some(tx))));
            } else {
                self.early.insert(prev, tx);
                if self.early.len() > EARLY_STAMPS_MAX {
                    self.early.pop_first();
                }
            }
        }
        if !p.two_step {
            out.push((arrival, self.choose(p.send_ns, None)));
        } else if let Some(tx) = self.early.remove(&p.seq) {
            out.push((arrival, self.choose(p.send_ns, Some(tx))));
        } else {
            self.held.insert(p.seq, (arrival, p.send_ns));
            while self.held.len() > HELD_MAX {
                if let Some((_, (a, u))) = self.held.pop_first() {
                    out.push((a, self.choose(u, None)));
                }
            }
        }
    }

    /// The stream ended: release every held probe with its user stamp.
    pub fn flush(&mut self, out: &mut Vec<(u64, u64)>) {
        for (_, (a, u)) in std::mem::take(&mut self.held) {
            out.push((a, self.choose(u, None)));
        }
        self.early.clear();
    }

    fn choose(&mut self, user: u64, tx: Option<u64>) -> u64 {
        match tx {
            Some(t) if t >= user && t - user <= STAMP_TO_WIRE_MAX_NS => {
                self.counts.kernel += 1;
                t
            }
            Some(_) => {
                self.counts.rejected += 1;
                self.counts.user += 1;
                user
            }
            None => {
                self.counts.user += 1;
                user
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u64, send_ns: u64, prev_tx_ns: Option<u64>) -> Probe {
        Probe {
            seq,
            send_ns,
            prev_tx_ns,
            two_step: true,
        }
    }

    fn feed(s: &mut SendStamps, probes: &[(Probe, u64)]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for (p, at) in probes {
            s.on_probe(p, *at, &mut out);
        }
        s.flush(&mut out);
        out
    }

    #[test]
    fn each_probe_takes_the_stamp_its_successor_carries() {
        let mut s = SendStamps::default();
        // User stamps at 100, 200, 300; the kernel's 5 ns later.
        let out = feed(
            &mut s,
            &[
                (probe(0, 100, None), 1100),
                (probe(1, 200, Some(105)), 1200),
                (probe(2, 300, Some(205)), 1300),
            ],
        );
        assert_eq!(out, vec![(1100, 105), (1200, 205), (1300, 300)]);
        assert_eq!(
            s.counts,
            SendStampCounts {
                kernel: 2,
                user: 1,
                rejected: 0
            }
        );
    }

    #[test]
    fn a_lost_successor_leaves_the_user_stamp_in_arrival_order() {
        let mut s = SendStamps::default();
        let out = feed(
            &mut s,
            &[
                (probe(0, 100, None), 1100),
                // 1 is lost: 0 cannot get its stamp and is released first.
                (probe(2, 300, Some(205)), 1300),
                (probe(3, 400, Some(305)), 1400),
            ],
        );
        assert_eq!(out, vec![(1100, 100), (1300, 305), (1400, 400)]);
    }

    #[test]
    fn a_stamp_that_overtakes_its_probe_waits_for_it() {
        let mut s = SendStamps::default();
        let out = feed(
            &mut s,
            &[
                (probe(1, 200, Some(105)), 1200),
                (probe(0, 100, None), 1250),
            ],
        );
        assert_eq!(out, vec![(1250, 105), (1200, 200)]);
    }

    #[test]
    fn a_stamp_before_the_user_stamp_or_far_after_it_is_not_believed() {
        let mut s = SendStamps::default();
        let far = 200 + STAMP_TO_WIRE_MAX_NS + 1;
        let out = feed(
            &mut s,
            &[
                (probe(0, 100, None), 1100),
                (probe(1, 200, Some(99)), 1200),
                (probe(2, 300, Some(far)), 1300),
            ],
        );
        assert_eq!(out, vec![(1100, 100), (1200, 200), (1300, 300)]);
        assert_eq!(
            s.counts,
            SendStampCounts {
                kernel: 0,
                user: 3,
                rejected: 2
            }
        );
    }

    #[test]
    fn format_1_probes_are_released_at_once() {
        let mut s = SendStamps::default();
        let mut out = Vec::new();
        let p = Probe {
            two_step: false,
            ..probe(0, 100, None)
        };
        s.on_probe(&p, 1100, &mut out);
        assert_eq!(out, vec![(1100, 100)]);
    }

    #[test]
    fn memory_is_bounded_whatever_the_order() {
        let n = 10 * HELD_MAX.max(EARLY_STAMPS_MAX) as u64;
        for stamps in [true, false] {
            let mut s = SendStamps::default();
            let mut out = Vec::new();
            for seq in (1..=n).rev() {
                let tx = stamps.then_some(seq * 100 - 95);
                s.on_probe(&probe(seq, seq * 100, tx), seq, &mut out);
                assert!(s.early.len() <= EARLY_STAMPS_MAX && s.held.len() <= HELD_MAX);
            }
            s.flush(&mut out);
            assert_eq!(out.len() as u64, n, "every probe comes out once");
        }
    }
}
