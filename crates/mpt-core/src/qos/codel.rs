//! CoDel, "Controlled Delay" active queue management (RFC 8289, Nichols,
//! Jacobson et al.), applied per flow queue as in FQ-CoDel (RFC 8290).
//!
//! CoDel looks at each packet's sojourn time when it leaves the queue. Once
//! the sojourn stayed above `target` for a whole `interval`, it drops one
//! packet and then drops again at intervals shrinking as
//! `interval / sqrt(count)`, until the sojourn falls below `target`. A
//! bulk TCP so gets its congestion signal after one interval of standing
//! queue instead of when the buffer is full.
//!
//! Invariants:
//! * no drop while the sojourn is below `target` or at most one MTU waits
//!   behind the packet (RFC 8289 §4.2: a single packet is no standing
//!   queue);
//! * state only changes in [`Codel::should_drop`], called once per dequeued
//!   packet in order.

use crate::{Nanos, NANOS_PER_MS};

/// RFC 8289 §4.2 recommended target sojourn (spec constant).
pub const TARGET_NS: Nanos = 5 * NANOS_PER_MS;
/// RFC 8289 §4.3 recommended interval (spec constant).
pub const INTERVAL_NS: Nanos = 100 * NANOS_PER_MS;

/// CoDel's two parameters. RFC 8289 §4.3 sets the interval "on the order
/// of a worst-case RTT through the bottleneck" and §4.4 the target at 5 to
/// 10 % of it; [`Params::for_rtt`] does so for a tunnel whose inner flows
/// see the slowest path's round trip, at the 10 % end: mpt's queue is the
/// inner TCP's bottleneck queue, and on links whose capacity swings (a
/// recorded LTE trace) a 5 % target cut the window while the paths'
/// pacing caught up (the lab's `two-lte`; `docs/results-notes.md`, "CoDel's
/// target at a tenth of its interval").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub target_ns: Nanos,
    pub interval_ns: Nanos,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            target_ns: TARGET_NS,
            interval_ns: INTERVAL_NS,
        }
    }
}

/// Interval per nanosecond of round trip, and target per nanosecond of
/// interval (tuning knobs within RFC 8289's guidance).
const INTERVAL_PER_RTT: u64 = 2;
const TARGET_PER_INTERVAL: u64 = 10;
/// Largest interval (tuning knob: a typo-free bound for absurd RTTs).
const INTERVAL_MAX_NS: Nanos = 1_000 * NANOS_PER_MS;

impl Params {
    /// For inner flows whose round trip is `rtt_ns`: the spec's interval,
    /// widened for longer round trips (a Wi-Fi + LTE tunnel's inner TCP
    /// sees the LTE path's 80-100 ms), and a target of a tenth of it.
    pub fn for_rtt(rtt_ns: Nanos) -> Self {
        let interval = (rtt_ns * INTERVAL_PER_RTT).clamp(INTERVAL_NS, INTERVAL_MAX_NS);
        Self {
            interval_ns: interval,
            target_ns: (interval / TARGET_PER_INTERVAL).max(TARGET_NS),
        }
    }
}

/// The state of one CoDel instance.
#[derive(Debug, Clone, Default)]
pub struct Codel {
    /// When the sojourn will have stayed above target for an interval
    /// (0: it is below).
    first_above: Nanos,
    /// Next drop while dropping.
    drop_next: Nanos,
    count: u32,
    last_count: u32,
    dropping: bool,
}

/// `t + interval / sqrt(count)` (RFC 8289 §5.5's control law).
fn control_law(t: Nanos, count: u32, interval: Nanos) -> Nanos {
    t + (interval as f64 / f64::from(count.max(1)).sqrt()) as Nanos
}

impl Codel {
    /// The sojourn of the packet leaving now is above target long enough.
    fn ok_to_drop(
        &mut self,
        now: Nanos,
        sojourn: Nanos,
        backlog: usize,
        mtu: usize,
        p: Params,
    ) -> bool {
        if sojourn < p.target_ns || backlog <= mtu {
            self.first_above = 0;
            return false;
        }
        if self.first_above == 0 {
            self.first_above = now + p.interval_ns;
            return false;
        }
        now >= self.first_above
    }

    /// Whether to drop the packet leaving now after `sojourn` in the queue,
    /// with `backlog` bytes still waiting behind it. Call once per packet.
    pub fn should_drop(
        &mut self,
        now: Nanos,
        sojourn: Nanos,
        backlog: usize,
        mtu: usize,
        p: Params,
    ) -> bool {
        let ok = self.ok_to_drop(now, sojourn, backlog, mtu, p);
        if self.dropping {
            if !ok {
                self.dropping = false;
                return false;
            }
            if now >= self.drop_next {
                self.count = self.count.saturating_add(1);
                self.drop_next = control_law(self.drop_next, self.count, p.interval_ns);
                return true;
            }
            return false;
        }
        if !ok {
            return false;
        }
        self.dropping = true;
        // Re-enter near the last drop rate if the last episode was recent
        // (RFC 8289 §5.6).
        let delta = self.count.saturating_sub(self.last_count);
        self.count = if delta > 1 && now.saturating_sub(self.drop_next) < 16 * p.interval_ns {
            delta
        } else {
            1
        };
        self.drop_next = control_law(now, self.count, p.interval_ns);
        self.last_count = self.count;
        true
    }

    /// Whether CoDel is in its dropping state (status, tests).
    /// Drops of the current (or last) dropping episode, as RFC 8289 counts
    /// them (an episode that starts soon after the last resumes its count).
    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn dropping(&self) -> bool {
        self.dropping
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = NANOS_PER_MS;
    const P: Params = Params {
        target_ns: TARGET_NS,
        interval_ns: INTERVAL_NS,
    };

    #[test]
    fn parameters_follow_the_round_trip() {
        let short = Params::for_rtt(10 * MS);
        assert_eq!((short.interval_ns, short.target_ns), (INTERVAL_NS, 10 * MS));
        let lte = Params::for_rtt(90 * MS);
        assert_eq!((lte.interval_ns, lte.target_ns), (180 * MS, 18 * MS));
        assert_eq!(Params::for_rtt(10_000 * MS).interval_ns, 1_000 * MS);
    }

    #[test]
    fn no_drop_below_target_or_with_one_packet_behind() {
        let mut c = Codel::default();
        for t in 0..1000 {
            assert!(!c.should_drop(t * MS, 4 * MS, 100_000, 1500, P));
            assert!(!c.should_drop(t * MS, 50 * MS, 1500, 1500, P));
        }
    }

    #[test]
    fn drops_after_an_interval_above_target_then_faster() {
        let mut c = Codel::default();
        let mut drops = vec![];
        // A standing queue of 20 ms, one packet per ms.
        for t in 0..1000 {
            if c.should_drop(t * MS, 20 * MS, 100_000, 1500, P) {
                drops.push(t);
            }
        }
        assert_eq!(drops[0], 100, "first drop one interval after the rise");
        let gaps: Vec<_> = drops.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps[0], 100, "second after interval/sqrt(1)");
        assert!(
            gaps.windows(2).all(|g| g[1] <= g[0]),
            "gaps shrink: {gaps:?}"
        );
        assert!(*gaps.last().unwrap() < 40);
        // The queue drains: dropping stops.
        assert!(!c.should_drop(1000 * MS, MS, 100_000, 1500, P));
        assert!(!c.dropping());
    }
}
