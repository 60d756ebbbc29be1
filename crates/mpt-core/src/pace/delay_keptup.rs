//! Whether a path delivered what was sent on it, for
//! [`super::TargetDelay`]: a queue reading above the target on a link
//! that keeps up with what we send is not a queue of ours.
//!
//! A saturated bottleneck delivers less than it is sent while its queue
//! grows (the excess is what queues), and exactly its capacity while a
//! queue of ours stands. A link that is not saturated delivers all of
//! it. On a link whose jitter keeps its packets in order (a FIFO radio
//! link; the lab's emulator) the one-way delay under load sits two to
//! three standard deviations above its floor, and reads as 5-12 ms of
//! queue at any rate: a 149 Mbit/s link with 3.6 ms of jitter beside three
//! small ones was paced at 28 Mbit/s for ten seconds, the delay controller
//! cutting whenever that reading crossed its target (seed 1's case 12 of
//! `mptlab sweep`, in the simulation).
//!
//! So each sample's delivered bits are set against the bits sent while its
//! packets left ([`super::RateSample::sent_bps`]). Over the last
//! `span` (at least a round trip: one sample's pair of windows is
//! misaligned by the link's jitter, several percent at 30 ms), a path
//! that delivered at least [`KEPT_UP_SHARE`] of what it was sent kept up
//! (and one that delivered more than sent by as much was draining a
//! queue, which is ours).
//!
//! A queue of ours that stands at exactly the capacity keeps up too, and
//! one fed a little above it nearly does while it grows. Neither moves
//! much from one sample to the next, and what one does move goes one
//! way; a FIFO link's jitter moves its reading up and down by
//! milliseconds. So a reading is excused only if the readings over the
//! span moved, sample to sample, by at least [`KEPT_MOVED_MIN_NS`] in all,
//! of which their net growth is at most a [`KEPT_GROWTH_SHARE`], and
//! never above [`super::UNDRAINED_MAX_NS`]. (After a capacity drop, 100
//! to 10 Mbit/s, a queue of ours stood at 30 ms delivering what it was
//! sent; a 149 Mbit/s link with 3.6 ms of jitter read 8-12 ms from one
//! 30 ms sample to the next.)
//!
//! Invariants: the ring holds the last [`KEPT_RING`] samples that carried
//! a sent rate, newest at `next - 1`; [`KeptUp::excuses`] answers yes only
//! for samples that cover the whole span; nothing here changes the rate.

use super::knobs::{
    KEPT_GROWTH_SHARE, KEPT_MOVED_MIN_NS, KEPT_RING, KEPT_UP_SHARE, UNDRAINED_MAX_NS,
};
use super::RateSample;
use crate::Nanos;

/// One sample: when it ended, its delivered and sent bits, its length and
/// the queue reported at its end.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    at: Nanos,
    got: u64,
    sent: u64,
    len: Nanos,
    queue: Option<Nanos>,
}

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct KeptUp {
    ring: [Entry; KEPT_RING],
    next: usize,
    /// Samples whose queue was excused (status).
    excused: u64,
}

impl KeptUp {
    /// Record a sample (one without a sent rate is skipped).
    pub(super) fn on_sample(&mut self, now: Nanos, s: &RateSample) {
        let Some(sent) = s.sent_bps else {
            return;
        };
        let bits = |bps: u64| (u128::from(bps) * u128::from(s.interval_ns) / 1_000_000_000) as u64;
        self.ring[self.next] = Entry {
            at: now,
            got: bits(s.delivered_bps),
            sent: bits(sent),
            len: s.interval_ns,
            queue: s.queueing_ns,
        };
        self.next = (self.next + 1) % KEPT_RING;
    }

    /// Delivered over sent, how much the queue grew and how far its
    /// readings moved sample to sample, over the newest samples that end
    /// within `span` of `now` and together span at least `span` (`None`:
    /// they do not, nothing was sent, or a queue was not reported).
    fn over_span(&self, now: Nanos, span: Nanos) -> Option<(f64, i64, Nanos)> {
        let (mut got, mut sent, mut ns) = (0u64, 0u64, 0 as Nanos);
        let (mut moved, mut later) = (0, None::<Nanos>);
        let newest = self.ring[(self.next + KEPT_RING - 1) % KEPT_RING].queue;
        for i in 1..=KEPT_RING {
            let e = self.ring[(self.next + KEPT_RING - i) % KEPT_RING];
            if e.len == 0 || e.at + span < now {
                return None;
            }
            let q = e.queue?;
            moved += later.map_or(0, |l| l.abs_diff(q));
            later = Some(q);
            got += e.got;
            sent += e.sent;
            ns += e.len;
            if ns >= span {
                let grew = newest? as i64 - q as i64;
                return (sent > 0).then(|| (got as f64 / sent as f64, grew, moved));
            }
        }
        None
    }

    /// Whether a queueing delay of `q` above the floor is the link's: the
    /// path kept up over `span`, and its queue moved but did not grow.
    /// Counted.
    pub(super) fn excuses(&mut self, now: Nanos, q: Nanos, span: Nanos) -> bool {
        let yes = q <= UNDRAINED_MAX_NS
            && self
                .over_span(now, span)
                .is_some_and(|(share, grew, moved)| {
                    (KEPT_UP_SHARE..=1.0 / KEPT_UP_SHARE).contains(&share)
                        && moved >= KEPT_MOVED_MIN_NS
                        && grew as f64 <= moved as f64 * KEPT_GROWTH_SHARE
                });
        self.excused += u64::from(yes);
        yes
    }

    /// Samples whose queue was excused.
    pub(super) fn excused(&self) -> u64 {
        self.excused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    const MS: Nanos = NANOS_PER_MS;
    const SPAN: Nanos = 300 * MS;

    fn sample(delivered: u64, sent: Option<u64>, queue_ms: u64) -> RateSample {
        RateSample {
            delivered_bps: delivered,
            delivered_packets: 0,
            interval_ns: 30 * MS,
            queueing_ns: Some(queue_ms * MS),
            queue_growth_ns: None,
            jitter_ns: None,
            realtime: false,
            congestion_lost: 0,
            link_lost: 0,
            limited: true,
            sent_bps: sent,
        }
    }

    /// Ten samples of 30 ms ending at 30 ms × `from + 1..=from + 10`.
    fn feed(k: &mut KeptUp, from: u64, f: impl Fn(u64) -> RateSample) {
        for i in from + 1..=from + 10 {
            k.on_sample(i * 30 * MS, &f(i));
        }
    }

    #[test]
    fn a_link_that_delivers_what_it_is_sent_and_jitters_is_excused() {
        let mut k = KeptUp::default();
        feed(&mut k, 0, |i| {
            let got = if i % 2 == 0 { 80_000_000 } else { 64_000_000 };
            sample(got, Some(72_000_000), if i % 3 == 0 { 12 } else { 7 })
        });
        assert!(k.excuses(300 * MS, 10 * MS, SPAN));
        assert!(!k.excuses(300 * MS, 25 * MS, SPAN), "beyond a jitter");
        assert_eq!(k.excused(), 1);
    }

    #[test]
    fn a_saturated_link_or_a_growing_queue_is_not() {
        let mut k = KeptUp::default();
        feed(&mut k, 0, |_| sample(20_000_000, Some(21_000_000), 10));
        assert!(
            !k.excuses(300 * MS, 10 * MS, SPAN),
            "0.952 of what was sent"
        );
        // Delivered what was sent, but the queue grew 1 ms per sample.
        let mut k = KeptUp::default();
        feed(&mut k, 0, |i| sample(20_000_000, Some(20_000_000), i));
        assert!(!k.excuses(300 * MS, 10 * MS, SPAN));
        // Delivered what was sent, the queue standing still: ours, at
        // exactly the capacity.
        let mut k = KeptUp::default();
        feed(&mut k, 0, |_| sample(20_000_000, Some(20_000_000), 10));
        assert!(!k.excuses(300 * MS, 10 * MS, SPAN));
    }

    #[test]
    fn too_few_samples_or_no_sent_rate_excuse_nothing() {
        let mut k = KeptUp::default();
        for i in 1..=5 {
            k.on_sample(i * 30 * MS, &sample(20_000_000, Some(20_000_000), 8));
        }
        assert!(!k.excuses(150 * MS, 8 * MS, SPAN), "150 ms of 300");
        feed(&mut k, 5, |_| sample(20_000_000, None, 8));
        assert!(!k.excuses(450 * MS, 8 * MS, SPAN), "old samples only");
        let mut k = KeptUp::default();
        feed(&mut k, 0, |i| {
            let mut s = sample(20_000_000, Some(20_000_000), 6 + i % 2 * 4);
            s.queueing_ns = s.queueing_ns.filter(|_| i != 7);
            s
        });
        assert!(
            !k.excuses(300 * MS, 8 * MS, SPAN),
            "a sample without a queue"
        );
        assert!(!KeptUp::default().excuses(0, 8 * MS, SPAN));
    }

    #[test]
    fn the_newest_samples_decide() {
        let mut k = KeptUp::default();
        feed(&mut k, 0, |i| {
            sample(10_000_000, Some(20_000_000), 6 + i % 2 * 4)
        });
        feed(&mut k, 10, |i| {
            sample(20_000_000, Some(20_000_000), 6 + i % 2 * 4)
        });
        assert!(k.excuses(600 * MS, 8 * MS, SPAN));
        assert!(!k.excuses(600 * MS, 8 * MS, 2 * SPAN));
    }
}
