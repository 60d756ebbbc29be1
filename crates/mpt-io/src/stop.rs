//! A loop's stop after SIGINT or SIGTERM: it stops reading the TUN at
//! once, keeps sending what waits in its send queues (paced, as before the
//! signal) and ends when they are empty, or [`DRAIN_MAX_NS`] after the
//! signal, whichever comes first; a second signal ends it at once. A
//! restart then costs the inner connections no packet that mpt had taken
//! (what it had queued is at most `queue_ms` of sending), only the time the
//! daemon is away.
//!
//! Invariants: once started, a drain ends no later than [`DRAIN_MAX_NS`]
//! after its start; [`Drain::wait_cap`] never lets a loop sleep past that
//! end; nothing here reads a clock.

use std::time::Duration;

use mpt_core::{Nanos, NANOS_PER_MS};

/// The longest a stopping loop keeps sending what it queued (tuning knob:
/// twice the default `queue_ms`, so that a full queue at the paths'
/// pacing rates leaves, and a queue on a path that went down does not hold
/// the stop up for long).
pub const DRAIN_MAX_NS: Nanos = 200 * NANOS_PER_MS;

/// See the module documentation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    until: Option<Nanos>,
}

impl Drain {
    /// A signal at `now`: `true` when the loop must end at once (a second
    /// signal), else the drain starts.
    pub fn signal(&mut self, now: Nanos) -> bool {
        if self.until.is_some() {
            return true;
        }
        self.until = Some(now.saturating_add(DRAIN_MAX_NS));
        false
    }

    /// Whether a stop is under way (the TUN is no longer read).
    pub fn active(&self) -> bool {
        self.until.is_some()
    }

    /// Whether the loop may end now; `queued` counts the packets still
    /// waiting, asked only while a stop is under way (it may visit every
    /// peer: never on a loop turn that is not stopping).
    pub fn done(&self, now: Nanos, queued: impl FnOnce() -> usize) -> bool {
        self.until.is_some_and(|u| now >= u || queued() == 0)
    }

    /// The loop's wait, `timeout` (`None`: until input), cut so that it
    /// wakes at the drain's end.
    pub fn wait_cap(&self, now: Nanos, timeout: Option<Duration>) -> Option<Duration> {
        let Some(u) = self.until else {
            return timeout;
        };
        let left = Duration::from_nanos(u.saturating_sub(now));
        Some(timeout.map_or(left, |t| t.min(left)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_ends_when_the_queue_is_empty_or_at_its_bound() {
        let mut d = Drain::default();
        assert!(!d.active() && !d.done(0, || panic!("asked while not stopping")));
        assert_eq!(d.wait_cap(0, None), None);
        assert!(!d.signal(1_000));
        assert!(d.active());
        assert!(!d.done(1_000, || 5), "packets wait: keep sending");
        assert!(d.done(1_001, || 0), "the queue is empty");
        assert!(d.done(1_000 + DRAIN_MAX_NS, || 5), "the bound");
        // The loop never sleeps past the bound.
        let cap = d.wait_cap(1_000, None).unwrap();
        assert_eq!(cap, Duration::from_nanos(DRAIN_MAX_NS));
        let short = Duration::from_millis(1);
        assert_eq!(d.wait_cap(1_000, Some(short)), Some(short));
        assert_eq!(
            d.wait_cap(2_000 + DRAIN_MAX_NS, Some(short)),
            Some(Duration::ZERO)
        );
        // A second signal ends it at once.
        assert!(d.signal(2_000));
    }
}
