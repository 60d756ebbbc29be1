//! Liveness of a path, each direction on its own.
//!
//! * **Receive direction** (peer → us): up while something authentic was
//!   heard recently. A path silent for [`PathState::suspect_after`] (one and
//!   a half keepalives) is *suspect* and is probed every
//!   [`PathState::fast_probe_interval`] (a quarter keepalive): a live path
//!   answers within a round trip; a dead one is declared so after
//!   [`PathState::rx_dead_after`], three fast probes or one round trip plus
//!   four variations after suspicion, and never later than `dead`. With the
//!   defaults (100 ms keepalive) that is 225 ms on a short path.
//! * **Send direction** (us → peer): known only from the peer's reports,
//!   the hearing mask of every probe and echo, which arrive on any path. A
//!   path is usable for sending while the latest report says the peer hears
//!   us on it, that report is younger than `dead`, and no send failed hard.
//!
//! Invariants: the two directions never read each other's state, so a path
//! that fails one way keeps carrying data the other way; a path's receive
//! state changes only through [`PathState::on_receive`] and time, its send
//! state only through reports, send errors and time.

use super::PathState;
use crate::Nanos;

/// Unanswered fast probes after which a suspect path is declared dead
/// (tuning knob).
const FAST_PROBES_UNANSWERED: u64 = 3;
/// Shortest fast-probe interval (tuning knob: bounds the probe rate of a
/// path configured with a tiny keepalive).
const FAST_PROBE_MIN: Nanos = 5 * crate::NANOS_PER_MS;

impl PathState {
    /// Silence after which the path is suspect and probed fast.
    pub fn suspect_after(&self) -> Nanos {
        self.cfg.keepalive + self.cfg.keepalive / 2
    }

    /// Interval between probes while the path is suspect.
    pub fn fast_probe_interval(&self) -> Nanos {
        (self.cfg.keepalive / 4).max(FAST_PROBE_MIN)
    }

    /// Silence after which the receive direction is declared dead.
    pub fn rx_dead_after(&self) -> Nanos {
        let fast = self.fast_probe_interval();
        // RFC 6298's retransmission timeout of the path's round trips.
        let rtt = self.rtt.timeout().unwrap_or(0);
        let answer = (FAST_PROBES_UNANSWERED * fast).max(rtt.saturating_add(fast));
        self.cfg
            .dead
            .min(self.suspect_after().saturating_add(answer))
    }

    /// How long nothing was heard on the path (`None`: never heard).
    pub fn silent_for(&self, now: Nanos) -> Option<Nanos> {
        self.last_rx.map(|t| now.saturating_sub(t))
    }

    /// Whether we hear the peer on this path (the receive direction is up).
    pub fn hearing(&self, now: Nanos) -> bool {
        self.silent_for(now)
            .is_some_and(|s| s < self.rx_dead_after())
    }

    /// Heard before, silent for a while, not yet declared dead.
    pub fn suspect(&self, now: Nanos) -> bool {
        self.silent_for(now)
            .is_some_and(|s| s >= self.suspect_after() && s < self.rx_dead_after())
    }

    /// When the next probe is due after one sent at `now`.
    pub fn probe_interval(&self, now: Nanos) -> Nanos {
        if self.suspect(now) {
            self.fast_probe_interval()
        } else {
            self.cfg.keepalive
        }
    }

    /// The next instant at which the receive state may change by itself
    /// (suspicion starts, or the direction is declared dead).
    pub fn next_liveness_deadline(&self, now: Nanos) -> Option<Nanos> {
        let t = self.last_rx?;
        [self.suspect_after(), self.rx_dead_after()]
            .into_iter()
            .map(|d| t.saturating_add(d))
            .find(|at| *at > now)
    }

    /// A report from the peer (on any path) about whether it hears us on
    /// this path, sent at `sent` (the peer's clock). Reports travel on
    /// paths of different delays: one sent before the latest applied is
    /// stale and ignored, so a slow path cannot undo what a fast one said.
    pub fn on_hearing_report(&mut self, now: Nanos, sent: u64, hears_us: bool) {
        if self.report_at.is_some() && sent < self.report_sent {
            return;
        }
        self.peer_hears_us = hears_us;
        self.report_at = Some(now);
        self.report_sent = sent;
    }

    /// Whether data may be sent on this path: the peer recently said it
    /// hears us here, and no send failed hard since.
    pub fn sendable(&self, now: Nanos) -> bool {
        self.peer_hears_us
            && !self.send_blocked
            && self.remote.is_some()
            && self
                .report_at
                .is_some_and(|t| now.saturating_sub(t) < self.cfg.dead)
    }
}

#[cfg(test)]
mod tests {
    use crate::path::tests::path;
    use crate::NANOS_PER_MS as MS;

    #[test]
    fn suspicion_fast_probes_and_early_death() {
        let mut p = path();
        assert!(!p.hearing(0) && !p.suspect(0));
        p.on_receive(1_000, 1, 0, 0);
        assert_eq!(p.probe_interval(1_000), 100 * MS);
        let t = 1_000 + 150 * MS;
        assert!(p.hearing(t) && p.suspect(t));
        assert_eq!(p.probe_interval(t), 25 * MS);
        // No RTT yet: three fast probes after suspicion, 225 ms in all.
        assert_eq!(p.rx_dead_after(), 225 * MS);
        assert!(!p.hearing(1_000 + 225 * MS));
        assert_eq!(p.next_liveness_deadline(1_000), Some(1_000 + 150 * MS));
        assert_eq!(p.next_liveness_deadline(t), Some(1_000 + 225 * MS));
        // A long round trip waits for the answer; `dead` bounds everything.
        p.on_rtt_sample(200 * MS);
        assert_eq!(p.rx_dead_after(), 500 * MS);
    }

    #[test]
    fn send_direction_follows_reports_only() {
        let mut p = path();
        assert!(!p.sendable(0));
        p.on_hearing_report(10, 1, true);
        assert!(p.sendable(10));
        // Our receive direction being silent does not matter.
        assert!(!p.hearing(10));
        assert!(p.sendable(10 + 499 * MS));
        // A stale report does, and so does the peer saying it lost us.
        assert!(!p.sendable(10 + 500 * MS));
        // A report sent before the latest one arrives late: ignored.
        p.on_hearing_report(15, 0, false);
        assert!(p.sendable(15));
        p.on_hearing_report(20, 2, false);
        assert!(!p.sendable(20));
        p.on_hearing_report(30, 3, true);
        p.send_blocked = true;
        assert!(!p.sendable(30));
    }
}
