//! A stalled send direction: data left on the path and no report of the
//! peer has covered it for longer than the path's round trips explain.
//!
//! Why: a radio link can stop in one direction for seconds (the recorded
//! AT&T uplink is at zero for 2.25 s of its first 5). Liveness declares
//! the direction dead only after the peer has stopped hearing us for its
//! dead interval and said so on another path; until then, and for
//! everything already sent, the packets sit in the link's queue. An inner
//! TCP whose ACKs sit there sends nothing and waits for its own
//! retransmission timeout, backed off to seconds. Each packet carries its
//! path's sequence number and every receiver report names the highest
//! one that arrived (`rx_path_seq`), so the sender knows what is out on
//! the path without the peer saying anything new: the same idea as
//! RFC 8985's tail loss probe and QUIC's probe timeout (RFC 9002 §6.2),
//! per path.
//!
//! The rule: once data is out that no report covers, the clock runs from
//! the send (or from the last report that covered more); past
//! [`PathState::stall_after`] (the path's RFC 6298 timeout, the standing
//! queue the sender knows of, and a report interval) the path is
//! *stalled*, if we heard the peer on it since the data could have
//! arrived (the peer reports on the path itself: while its direction to
//! us is silent, missing reports say nothing about ours). The tunnel then
//! sends again, from the recovery ring and on a path that has not
//! stalled, the newest data the path carried that no report covered
//! (what a cwnd-limited inner TCP, or the other end's, waits for), sends
//! its own reports about the path on another path, and probes it; the
//! first report that covers more ends the stall. The path keeps its
//! place in the scheduler: taking it out moved its queue away, and after
//! an outage the path's queueing estimate, fed by probes alone, kept the
//! scheduler away for a second while the link offered capacity
//! (`sim_trace.rs`). When liveness takes the path down, what it carried
//! since is sent again the same way.
//!
//! Invariants:
//! * only data packets start the clock; probes and reports do not (the
//!   peer reports when data arrives, not when a report does);
//! * sequence numbers are compared in their low 16 bits, as they travel,
//!   so a peer's widening of them never matters;
//! * a stall ends only through a report that covers more than the last
//!   one did; time alone never ends it (liveness may take the path down
//!   meanwhile).

use super::PathState;
use crate::pace::FEEDBACK_INTERVAL_NS;
use crate::{Nanos, NANOS_PER_MS};

/// Shortest time data may stay uncovered by a report before the path
/// counts as stalled (tuning knob: above a report interval and the event
/// loop's timers on a path of a millisecond).
pub const STALL_MIN_NS: Nanos = 50 * NANOS_PER_MS;

/// What the send direction has out that no report covers yet.
#[derive(Debug, Default, Clone, Copy)]
pub struct StallWatch {
    /// Path sequence number of the last data packet sent.
    last_data: Option<u16>,
    /// Highest path sequence number a report covered.
    covered: Option<u16>,
    /// Since when data has been out uncovered (restarted by progress).
    since: Option<Nanos>,
    /// Stalled now.
    pub stalled: bool,
    /// Times the path stalled.
    pub stalls: u64,
}

/// `a` is after `b` in 16-bit serial arithmetic (RFC 1982).
fn after(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

impl PathState {
    /// A data packet left on the path as path sequence `path_seq`.
    pub fn on_data_sent(&mut self, now: Nanos, path_seq: u32) {
        let w = &mut self.stall;
        w.last_data = Some(path_seq as u16);
        if w.since.is_none() {
            w.since = Some(now);
        }
    }

    /// A report of the peer says path sequence `rx_path_seq` is the
    /// highest that arrived. Returns whether this ended a stall.
    pub fn on_covered(&mut self, now: Nanos, rx_path_seq: u32) -> bool {
        let w = &mut self.stall;
        let seq = rx_path_seq as u16;
        if w.covered.is_some_and(|c| !after(seq, c)) {
            return false;
        }
        w.covered = Some(seq);
        let all = w.last_data.is_none_or(|d| !after(d, seq));
        w.since = if all { None } else { w.since.map(|_| now) };
        std::mem::replace(&mut w.stalled, false)
    }

    /// Every data packet sent on the path is covered by a report (or none
    /// was sent): none of ours is still in the path's queue.
    pub fn nothing_out(&self) -> bool {
        self.stall.since.is_none()
    }

    /// How long data may stay uncovered before the path counts as stalled,
    /// with `queue_ns` of standing queue known at its bottleneck; `None`
    /// until a round trip was measured.
    pub fn stall_after(&self, queue_ns: Nanos) -> Option<Nanos> {
        let rto = self.rtt_timeout()?;
        Some(
            rto.saturating_add(queue_ns)
                .saturating_add(FEEDBACK_INTERVAL_NS)
                .max(STALL_MIN_NS),
        )
    }

    /// When the path stalls if nothing is reported before (`None`: nothing
    /// is out, it is stalled already, no round trip is known, or nothing
    /// was heard on the path since the data could have arrived).
    ///
    /// The peer reports on the path itself, so silence explains missing
    /// reports: its direction to us may be out while ours works (a radio
    /// uplink's fade, seen from the downlink's sender), and our data
    /// still arrives; liveness handles a path silent both ways. Only a
    /// path we keep hearing on, whose reports yet cover nothing new,
    /// stalls: the peer would have reported what arrived.
    pub fn stall_deadline(&self, queue_ns: Nanos) -> Option<Nanos> {
        let w = &self.stall;
        if w.stalled {
            return None;
        }
        let since = w.since?;
        let arrived = since.saturating_add(self.rtt_min().unwrap_or(0));
        if self.last_rx.is_none_or(|t| t <= arrived) {
            return None;
        }
        Some(since.saturating_add(self.stall_after(queue_ns)?))
    }

    /// Mark the path stalled if its deadline has passed; returns whether
    /// it stalled now.
    pub fn check_stall(&mut self, now: Nanos, queue_ns: Nanos) -> bool {
        if self.stall_deadline(queue_ns).is_none_or(|d| now < d) {
            return false;
        }
        self.stall.stalled = true;
        self.stall.stalls += 1;
        true
    }

    /// The path sequence numbers (low 16 bits) sent after the last one a
    /// report covered, up to the last data packet: at most `max`, the
    /// newest, oldest first.
    pub fn uncovered(&self, max: u16) -> impl Iterator<Item = u16> {
        let w = &self.stall;
        let (last, n) = match (w.last_data, w.covered) {
            (Some(d), Some(c)) if after(d, c) => (d, d.wrapping_sub(c).min(max)),
            (Some(d), None) => (d, max.min(d.wrapping_add(1))),
            _ => (0, 0),
        };
        (0..n).rev().map(move |k| last.wrapping_sub(k))
    }
}

#[cfg(test)]
mod tests {
    use crate::path::tests::path;
    use crate::NANOS_PER_MS as MS;

    #[test]
    fn data_uncovered_past_the_timeout_stalls_until_a_report_covers_more() {
        let mut p = path();
        p.on_rtt_sample(60 * MS); // timeout 180 ms (RFC 6298's first sample)
        assert_eq!(p.stall_after(0), Some(190 * MS));
        assert_eq!(p.stall_after(30 * MS), Some(220 * MS));
        p.on_data_sent(0, 7);
        p.on_data_sent(5 * MS, 8);
        assert_eq!(p.stall_deadline(0), None, "nothing heard since");
        p.on_receive(61 * MS, 100, 1, 0);
        assert_eq!(p.stall_deadline(0), Some(190 * MS));
        // A report covering 7 but not 8 restarts the clock.
        assert!(!p.on_covered(100 * MS, 7));
        assert_eq!(p.stall_deadline(0), None, "heard before the restart");
        p.on_receive(170 * MS, 100, 2, 0);
        assert_eq!(p.stall_deadline(0), Some(290 * MS));
        assert!(!p.check_stall(289 * MS, 0));
        assert!(p.check_stall(290 * MS, 0));
        assert!(p.stall.stalled && p.stall.stalls == 1);
        assert_eq!(p.stall_deadline(0), None, "stalled already");
        assert!(!p.check_stall(400 * MS, 0), "counted once");
        // An old report is no progress; one that covers more ends it.
        assert!(!p.on_covered(410 * MS, 6));
        assert!(p.stall.stalled);
        assert!(p.on_covered(420 * MS, 9));
        assert!(!p.stall.stalled);
        assert_eq!(p.stall_deadline(0), None, "nothing is out");
    }

    #[test]
    fn a_path_silent_towards_us_does_not_stall() {
        // Its reports cannot come: whether our data arrives is unknown,
        // and liveness judges a path silent both ways.
        let mut p = path();
        p.on_rtt_sample(20 * MS);
        p.on_receive(0, 100, 1, 0);
        p.on_data_sent(10 * MS, 5);
        assert!(!p.check_stall(5_000 * MS, 0));
        // Heard again (after the data could have arrived), still nothing
        // covered: it stalls at once.
        p.on_receive(5_000 * MS, 100, 2, 0);
        assert!(p.check_stall(5_000 * MS, 0));
    }

    #[test]
    fn reports_and_probes_alone_never_stall_a_path() {
        let mut p = path();
        p.on_rtt_sample(10 * MS);
        // No data sent: nothing to wait for.
        assert!(!p.check_stall(10_000 * MS, 0));
        p.on_data_sent(0, 3);
        // Covered, then the path carried only control packets (4, 5, ...).
        assert!(!p.on_covered(20 * MS, 3));
        assert!(!p.check_stall(10_000 * MS, 0));
    }

    #[test]
    fn the_uncovered_sequence_numbers_are_the_newest_across_the_wrap() {
        let mut p = path();
        for s in 65_530u32..65_540 {
            p.on_data_sent(0, s);
        }
        p.on_covered(0, 65_533);
        let all: Vec<u16> = p.uncovered(100).collect();
        assert_eq!(all, vec![65_534, 65_535, 0, 1, 2, 3]);
        let newest: Vec<u16> = p.uncovered(2).collect();
        assert_eq!(newest, vec![2, 3]);
        p.on_covered(0, 65_539);
        assert_eq!(p.uncovered(100).count(), 0);
    }
}
