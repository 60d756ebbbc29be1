//! The queue a cut did not drain, for [`super::TargetDelay`]: a path's
//! delay that does not follow our rate is not a queue of ours.
//!
//! A link with jitter that keeps its packets in order (a radio link's
//! retransmissions and scheduling; the lab's emulator, and netem with a
//! rate) holds each packet behind any earlier one that drew a longer
//! delay. Under load the one-way delay then sits near the top of the
//! jitter's spread, two to three standard deviations above its floor,
//! whatever the rate: a 179 Mbit/s link with 5.6 ms of jitter read 8-15 ms
//! of "queue" at 8 Mbit/s as at 100 (seed 1, case 14 of `mptlab sweep`).
//! The controller read that as a queue of its own above the target, cut
//! once per round trip, took the link's random losses for overflows, and
//! paced it at 5 % of its capacity for the whole transfer.
//!
//! The test is the cut itself. Once the cuts since the queue last stood
//! under `floor + target` have taken the rate to [`UNDRAINED_DEPTH`] of
//! the highest delivery rate seen when they began, a queue of ours drains
//! by a third of [`UNDRAINED_CHECK_NS`] within that window after the
//! cut's round trip. If instead, through that window, the queueing delay
//! stayed above `floor + target` and fell by less than the target, while
//! the path delivered at least [`UNDRAINED_KEEPS_UP`] of the rate paced
//! (so the capacity did not fall meanwhile: then it delivers less, and the
//! queue is ours), the lowest delay of the window is the link's own: the
//! floor, up to [`UNDRAINED_MAX_NS`]. A queue that drains under `floor +
//! target` before the cuts went that deep ends the check (it was ours);
//! a check whose queue drained lowers the floor to what it drained to, and
//! a delay that falls half a target below the floor takes it down with
//! it, so a jitter that went away is forgotten. The controller then
//! judges the queue above that floor (as it already judged it above the
//! lowest queue of ten seconds, up to 5 ms: [`super::JITTER_MAX_NS`]),
//! and a loss that came with no queue above the floor is the link's, not
//! an overflow.
//!
//! This is the "standing queue that a sender cannot drain" of CoDel's
//! reasoning (RFC 8289 §2: the minimum over an interval tells a good
//! queue from a bad one), turned round: a minimum that outlives the
//! sender's own cut is not the sender's.
//!
//! Invariants: `floor_ns <= UNDRAINED_MAX_NS`; a check is pending only
//! after a cut; it is armed only once the rate paced is at most
//! [`UNDRAINED_DEPTH`] of the delivery rate it began from, and decides once
//! [`UNDRAINED_CHECK_NS`] of samples past the arming cut's round trip have
//! been seen; nothing here changes the rate.

use super::knobs::{
    UNDRAINED_CHECK_NS, UNDRAINED_DEPTH, UNDRAINED_KEEPS_UP, UNDRAINED_MAX_NS, UNDRAINED_STILL_NS,
};
use crate::Nanos;

/// A check in progress: what the cuts left and what followed them.
#[derive(Debug, Clone, Copy)]
struct Check {
    /// The highest delivery rate of the window when the first cut came.
    from_bps: u64,
    /// The lowest rate paced since, bits per second.
    paced_bps: u64,
    /// The cut that took the rate to [`UNDRAINED_DEPTH`] of `from_bps`.
    armed_at: Option<Nanos>,
    /// The first and the lowest queueing delay reported in the window.
    first_queue_ns: Option<Nanos>,
    min_queue_ns: Nanos,
    /// Bits delivered and bits paced (rate × interval) in the window, and
    /// the samples' time.
    bits: u128,
    paced_bits: u128,
    ns: u128,
}

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Undrained {
    floor_ns: Nanos,
    check: Option<Check>,
    /// Checks that found the queue undrained (status, tests).
    found: u64,
}

impl Undrained {
    /// The queueing delay the link holds whatever our rate.
    pub(super) fn floor_ns(&self) -> Nanos {
        self.floor_ns
    }

    /// How many checks found a queue that the cuts did not drain.
    #[cfg(test)]
    pub(super) fn found(&self) -> u64 {
        self.found
    }

    /// The rate was cut to `paced_bps` to drain a queue; `from_bps` is the
    /// highest delivery rate of the controller's window.
    pub(super) fn on_cut(&mut self, now: Nanos, paced_bps: u64, from_bps: u64) {
        let c = self.check.get_or_insert(Check {
            from_bps,
            paced_bps,
            armed_at: None,
            first_queue_ns: None,
            min_queue_ns: Nanos::MAX,
            bits: 0,
            paced_bits: 0,
            ns: 0,
        });
        c.paced_bps = c.paced_bps.min(paced_bps);
        if c.armed_at.is_none() && c.paced_bps as f64 <= c.from_bps as f64 * UNDRAINED_DEPTH {
            c.armed_at = Some(now);
        }
    }

    /// A rate sample: `queue_ns` the queueing delay the receiver reported
    /// (above the path's floor of smoothed delays), `delivered_bps` over
    /// `interval_ns` while the rate paced was `paced_bps`; `rtt_ns` the
    /// path's lowest round trip, `target_ns` the controller's target.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_sample(
        &mut self,
        now: Nanos,
        queue_ns: Option<Nanos>,
        delivered_bps: u64,
        paced_bps: u64,
        interval_ns: Nanos,
        rtt_ns: Nanos,
        target_ns: Nanos,
    ) {
        let Some(q) = queue_ns else {
            return;
        };
        if q + target_ns / 2 < self.floor_ns {
            self.floor_ns = q + target_ns / 2;
        }
        let Some(c) = &mut self.check else {
            return;
        };
        let Some(armed_at) = c.armed_at else {
            if q < self.floor_ns + target_ns / 2 {
                // Drained before the cuts went deep: it was ours.
                self.check = None;
            }
            return;
        };
        // The arming cut shows one round trip later.
        if now < armed_at + rtt_ns {
            return;
        }
        c.first_queue_ns.get_or_insert(q);
        c.min_queue_ns = c.min_queue_ns.min(q);
        c.bits += u128::from(delivered_bps) * u128::from(interval_ns);
        c.paced_bits += u128::from(paced_bps) * u128::from(interval_ns);
        c.ns += u128::from(interval_ns);
        if now < armed_at + rtt_ns + UNDRAINED_CHECK_NS {
            return;
        }
        let c = self.check.take().expect("pending");
        // Delivered what was paced: less, the capacity fell below it; more,
        // a queue drained at the capacity (both ours).
        let share = c.bits as f64 / c.paced_bits.max(1) as f64;
        let kept_up = (UNDRAINED_KEEPS_UP..=1.0 / UNDRAINED_KEEPS_UP).contains(&share)
            && c.ns >= u128::from(UNDRAINED_CHECK_NS / 2);
        let fell = c.first_queue_ns.unwrap_or(0).saturating_sub(c.min_queue_ns);
        let stood = c.min_queue_ns >= self.floor_ns + target_ns / 2;
        // More than a jitter explains: a queue of ours, at a rate that
        // happens to match the capacity.
        let jitter_like = c.min_queue_ns <= UNDRAINED_MAX_NS && fell < UNDRAINED_STILL_NS;
        if kept_up && stood && jitter_like {
            self.floor_ns = c.min_queue_ns;
            self.found += 1;
        } else {
            self.floor_ns = self.floor_ns.min(c.min_queue_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS as MS;

    const RTT: Nanos = 100 * MS;
    const TARGET: Nanos = 10 * MS;

    /// Samples of 25 ms in (`from`, `to`] with queue `q(t)`, delivering
    /// `bps` while `paced` is paced (0: `bps`).
    fn feed_paced(
        u: &mut Undrained,
        (from, to): (Nanos, Nanos),
        q: impl Fn(Nanos) -> Nanos,
        bps: u64,
        paced: u64,
    ) {
        let mut t = from;
        while t < to {
            t += 25 * MS;
            let paced = if paced == 0 { bps } else { paced };
            u.on_sample(t, Some(q(t)), bps, paced, 25 * MS, RTT, TARGET);
        }
    }

    fn feed(u: &mut Undrained, from: Nanos, to: Nanos, q: impl Fn(Nanos) -> Nanos, bps: u64) {
        feed_paced(u, (from, to), q, bps, 0);
    }

    /// Cuts from 20 to 10 Mbit/s over three round trips, the path
    /// delivering what it is paced at and its delay at 12 ms throughout.
    #[test]
    fn a_queue_that_outlives_the_cuts_is_the_links() {
        let mut u = Undrained::default();
        u.on_cut(0, 18_000_000, 20_000_000);
        feed(&mut u, 0, 100 * MS, |_| 13 * MS, 18_000_000);
        u.on_cut(100 * MS, 15_000_000, 20_000_000);
        feed(&mut u, 100 * MS, 200 * MS, |_| 12 * MS, 15_000_000);
        u.on_cut(200 * MS, 10_000_000, 20_000_000);
        feed(&mut u, 200 * MS, 300 * MS, |_| 12 * MS, 12_000_000);
        assert_eq!(u.floor_ns(), 0, "within the arming cut's round trip");
        feed(&mut u, 300 * MS, 400 * MS, |_| 12 * MS, 10_000_000);
        assert_eq!(u.floor_ns(), 12 * MS);
        assert_eq!(u.found(), 1);
    }

    #[test]
    fn shallow_cuts_teach_nothing() {
        let mut u = Undrained::default();
        u.on_cut(0, 19_000_000, 20_000_000);
        feed(&mut u, 0, 1_000 * MS, |_| 12 * MS, 19_000_000);
        assert_eq!(u.floor_ns(), 0);
    }

    #[test]
    fn a_queue_that_drains_is_ours() {
        // Paced at half the capacity: a 60 ms queue drains by 50 ms in
        // 100 ms.
        let mut u = Undrained::default();
        u.on_cut(0, 10_000_000, 20_000_000);
        let q = |t: Nanos| (60 * MS).saturating_sub(t.saturating_sub(RTT) / 2);
        feed_paced(&mut u, (0, 200 * MS), q, 20_000_000, 10_000_000);
        assert_eq!(u.floor_ns(), 0);
        assert_eq!(u.found(), 0);
    }

    #[test]
    fn a_queue_that_drains_before_the_cuts_go_deep_ends_the_check() {
        let mut u = Undrained::default();
        u.on_cut(0, 18_000_000, 20_000_000);
        feed(&mut u, 0, 100 * MS, |_| 4 * MS, 20_000_000);
        assert!(u.check.is_none());
    }

    #[test]
    fn a_capacity_that_fell_meanwhile_teaches_nothing() {
        // The path delivers half of what it is paced at: the queue stands
        // because the capacity fell, and it is ours.
        let mut u = Undrained::default();
        u.on_cut(0, 10_000_000, 20_000_000);
        feed_paced(&mut u, (0, 250 * MS), |_| 20 * MS, 5_000_000, 10_000_000);
        assert_eq!(u.floor_ns(), 0);
    }

    #[test]
    fn a_queue_deeper_than_a_jitter_or_falling_is_ours() {
        // Paced at the capacity after a start that overshot: the queue
        // stands still, deeper than any jitter.
        let mut u = Undrained::default();
        u.on_cut(0, 10_000_000, 20_000_000);
        feed(&mut u, 0, 250 * MS, |_| 48 * MS, 10_000_000);
        assert_eq!(u.floor_ns(), 0);
        // Paced a little below it: it falls, slowly.
        u.on_cut(1_000 * MS, 10_000_000, 20_000_000);
        let q = |t: Nanos| (19 * MS).saturating_sub(t.saturating_sub(1_100 * MS) / 20);
        feed(&mut u, 1_000 * MS, 1_250 * MS, q, 10_000_000);
        assert_eq!(u.floor_ns(), 0);
    }

    #[test]
    fn the_floor_follows_the_delay_down() {
        let mut u = Undrained::default();
        u.on_cut(0, 10_000_000, 20_000_000);
        feed(&mut u, 0, 250 * MS, |_| 19 * MS, 10_000_000);
        assert_eq!(u.floor_ns(), 19 * MS);
        feed(&mut u, 250 * MS, 300 * MS, |_| 15 * MS, 10_000_000);
        assert_eq!(u.floor_ns(), 19 * MS, "within half a target");
        feed(&mut u, 300 * MS, 350 * MS, |_| MS, 10_000_000);
        assert_eq!(u.floor_ns(), MS + TARGET / 2);
    }
}
