//! A path's random loss: what a lossy link drops at any rate, told apart
//! from what a full buffer drops, so that only the second cuts the rate.
//!
//! The receiver counts a loss as congestion while its queueing delay reads
//! [`LINK_LOSS_QUEUE_NS`] or more (`estimate.rs`). On a link with several
//! milliseconds of jitter the delay reads that much at any load (a FIFO
//! link holds every packet behind a late one), so its random losses count
//! as congestion as often as not. Seed 1's sweep case 29 (120 Mbit/s, 57
//! ms, 7.4 ms of jitter, 1.5 % loss) counted 32 of the path's 53 losses as
//! congestion: 12 cuts in 10 s held it at 3-7 Mbit/s.
//!
//! * The random loss rate: random losses fall at any queue, and those the
//!   receiver saw with its queue below [`LINK_LOSS_QUEUE_NS`] it counted as
//!   link loss. So the rate is the link losses over the packets delivered
//!   in the samples whose queue read below that bound (the same rule on
//!   the sender's side of it), both sums halved once the packets pass
//!   [`RANDOM_WINDOW_PACKETS`] (a link's loss may change). The packets
//!   start at [`RANDOM_PRIOR_PACKETS`] with no loss: on a path whose queue
//!   rarely reads low, two losses among its first hundred packets there
//!   (a buffer that overflowed early) are no 2 % random loss.
//! * The allowance: over the last round trip (at least
//!   [`RANDOM_SPAN_MIN_NS`]), the congestion losses are the link's while
//!   they stay within what its random loss explains, `λ + Z √λ` with `λ`
//!   the random rate times the packets delivered meanwhile and `Z` =
//!   [`RANDOM_Z`] (a Poisson count rarely goes that far above its mean).
//!   A full buffer drops what the sender sends above its capacity, far
//!   more. The rate's delay signal (a queue above the target) is
//!   unchanged.
//! * Samples whose packets left well below what the path has shown it
//!   carries ([`RANDOM_BELOW_SHOWN`] of its highest delivery rate of the
//!   controller's window) and arrived as fast as they left
//!   ([`RANDOM_DELIVERED_AS_SENT`]) filled no buffer, whatever the queue
//!   reads: all their losses count toward the random rate. A FIFO link
//!   with several milliseconds of jitter reads its queue above
//!   [`LINK_LOSS_QUEUE_NS`] at any rate, so without them its random rate
//!   was never learned (seed 79's sweep case 19: 98 Mbit/s with 7.9 ms of
//!   jitter and 1.4 % loss, paced at 5-25 Mbit/s for ten seconds in the
//!   simulation, 80-100 with them).
//!   Only while their losses are as few as a random loss of
//!   [`RANDOM_SAMPLE_RATE_MAX`] would give: a burst that overflowed a
//!   buffer loses a run of datagrams at once, whatever the sample's mean
//!   rate (fifty clients' daemons that woke late on a busy machine sent
//!   their paced datagrams in bursts, and learned 2-4 % of random loss on
//!   links that lose nothing at random).
//! * A path that never lost a packet with an empty queue has a random rate
//!   of zero, and every congestion loss is the sender's, as before.
//!
//! Invariants: no allocation; the sums only grow until halved; with no
//! link loss counted the verdict is "ours" for any congestion loss.

use super::knobs::{
    RANDOM_BELOW_SHOWN, RANDOM_DELIVERED_AS_SENT, RANDOM_PRIOR_PACKETS, RANDOM_SAMPLE_RATE_MAX,
    RANDOM_SPAN_MIN_NS, RANDOM_WINDOW_PACKETS, RANDOM_Z,
};
use super::RateSample;
use crate::estimate::LINK_LOSS_QUEUE_NS;
use crate::Nanos;

/// Samples kept for the last round trip's sums (at least one sample per
/// [`super::super::SAMPLE_MIN_NS`], so 16 cover 480 ms).
const SPAN_SAMPLES: usize = 16;

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct RandomLoss {
    /// Link losses, and the packets delivered in samples whose queue read
    /// below [`LINK_LOSS_QUEUE_NS`].
    link_lost: u64,
    low_packets: u64,
    /// The last samples: when each ended, its congestion losses and its
    /// packets (a ring, `next` the oldest).
    span: [(Nanos, u64, u64); SPAN_SAMPLES],
    next: usize,
    /// Congestion losses taken for the link's (status).
    excused: u64,
}

/// The sample's packets left well below what the path has shown it
/// carries (`shown_bps`, the highest delivery rate of the controller's
/// window: [`RANDOM_BELOW_SHOWN`] of it at most) and arrived as fast as
/// they left ([`RANDOM_DELIVERED_AS_SENT`]): no bottleneck buffer filled
/// with them, whatever the queueing delay reads (a FIFO link's jitter);
/// and they lost no more than random loss would ([`few_enough`]).
fn below_shown(s: &RateSample, shown_bps: u64) -> bool {
    let Some(sent) = s.sent_bps.filter(|&b| b > 0) else {
        return false;
    };
    (sent as f64) <= shown_bps as f64 * RANDOM_BELOW_SHOWN
        && s.delivered_bps as f64 >= sent as f64 * RANDOM_DELIVERED_AS_SENT
        && few_enough(s)
}

/// The sample's losses are within what a random loss of
/// [`RANDOM_SAMPLE_RATE_MAX`] gives in its packets, `λ + Z √λ`: not a
/// run that a burst into a full buffer loses.
fn few_enough(s: &RateSample) -> bool {
    let lost = s.congestion_lost + s.link_lost;
    within_random(
        lost,
        RANDOM_SAMPLE_RATE_MAX * (s.delivered_packets + lost) as f64,
    )
}

/// `lost` is a count a random loss of mean `lambda` gives: at most
/// `λ + Z √λ` ([`RANDOM_Z`]; a Poisson count rarely goes further).
fn within_random(lost: u64, lambda: f64) -> bool {
    lost as f64 <= lambda + RANDOM_Z * lambda.sqrt()
}

impl RandomLoss {
    /// The random loss rate so far (0 before any link loss).
    pub(super) fn rate(&self) -> f64 {
        if self.link_lost == 0 || self.low_packets == 0 {
            return 0.0;
        }
        let packets = self.low_packets + self.link_lost + RANDOM_PRIOR_PACKETS;
        (self.link_lost as f64 / packets as f64).min(1.0)
    }

    /// Congestion losses taken for the link's so far.
    pub(super) fn excused(&self) -> u64 {
        self.excused
    }

    /// A new sample: true when its congestion losses are the sender's (a
    /// full buffer's), false when there are none or the link's random
    /// loss explains those of the last round trip.
    pub(super) fn on_sample(
        &mut self,
        now: Nanos,
        s: &RateSample,
        rtt_min: Option<Nanos>,
        shown_bps: u64,
    ) -> bool {
        let low = s.queueing_ns.is_some_and(|q| q < LINK_LOSS_QUEUE_NS);
        let below = below_shown(s, shown_bps);
        if low || below {
            self.low_packets = self.low_packets.saturating_add(s.delivered_packets);
        }
        self.link_lost = self.link_lost.saturating_add(s.link_lost);
        if below && !low {
            // No buffer of ours filled: its congestion losses are the
            // link's too.
            self.link_lost = self.link_lost.saturating_add(s.congestion_lost);
        }
        if self.low_packets > RANDOM_WINDOW_PACKETS {
            self.low_packets /= 2;
            self.link_lost /= 2;
        }
        self.span[self.next] = (now, s.congestion_lost, s.delivered_packets);
        self.next = (self.next + 1) % SPAN_SAMPLES;
        if s.congestion_lost == 0 {
            return false;
        }
        let p = self.rate();
        if p == 0.0 {
            return true;
        }
        let from = now.saturating_sub(rtt_min.unwrap_or(0).max(RANDOM_SPAN_MIN_NS));
        let (lost, packets) = self
            .span
            .iter()
            .filter(|(t, _, _)| *t > from && *t <= now)
            .fold((0u64, 0u64), |(l, n), (_, sl, sn)| (l + sl, n + sn));
        let lambda = p * (packets + lost) as f64;
        let ours = !within_random(lost, lambda);
        if !ours {
            self.excused += s.congestion_lost;
        }
        ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    fn sample(q_ms: u64, packets: u64, link: u64, congestion: u64) -> RateSample {
        RateSample {
            delivered_bps: packets * 1500 * 8 * 1000 / 30,
            delivered_packets: packets,
            interval_ns: 30 * NANOS_PER_MS,
            queueing_ns: Some(q_ms * NANOS_PER_MS),
            queue_growth_ns: Some(0),
            jitter_ns: Some(NANOS_PER_MS),
            realtime: false,
            congestion_lost: congestion,
            link_lost: link,
            limited: true,
            sent_bps: None,
        }
    }

    #[test]
    fn a_clean_link_s_every_congestion_loss_is_ours() {
        let mut r = RandomLoss::default();
        for i in 0..100 {
            assert!(!r.on_sample(i * 30 * NANOS_PER_MS, &sample(2, 100, 0, 0), None, 0));
        }
        assert!(r.on_sample(3_000 * NANOS_PER_MS, &sample(20, 100, 0, 1), None, 0));
        assert_eq!(r.rate(), 0.0);
    }

    #[test]
    fn a_lossy_link_s_random_losses_at_a_queue_cut_nothing() {
        // 2 % random loss: 2 of every 100 packets, counted as link loss
        // when the queue read low and as congestion when it read high.
        let mut r = RandomLoss::default();
        let mut ours = 0;
        for i in 0..400u64 {
            let now = i * 30 * NANOS_PER_MS;
            let s = if i % 2 == 0 {
                sample(4, 98, 2, 0)
            } else {
                sample(15, 98, 0, 2)
            };
            ours += u64::from(r.on_sample(now, &s, Some(100 * NANOS_PER_MS), 0));
        }
        assert!((r.rate() - 0.02).abs() < 0.002, "{}", r.rate());
        assert!(ours <= 4, "{ours} of 200 samples cut");
    }

    /// `n` samples of `s`, 30 ms apart, from `now`; the time after them.
    fn feed(r: &mut RandomLoss, mut now: Nanos, n: usize, s: &RateSample) -> Nanos {
        for _ in 0..n {
            now += 30 * NANOS_PER_MS;
            r.on_sample(now, s, None, 0);
        }
        now
    }

    #[test]
    fn a_full_buffer_on_a_lossy_link_still_cuts() {
        let mut r = RandomLoss::default();
        let mut now = feed(&mut r, 0, 100, &sample(4, 98, 2, 0));
        // Sent 10 % above the capacity: a tenth of the packets overflow,
        // until a cut takes effect. It is seen within the round trip.
        let rtt = Some(100 * NANOS_PER_MS);
        let cut_after = (1..=4).find(|_| {
            now += 30 * NANOS_PER_MS;
            r.on_sample(now, &sample(25, 90, 0, 10), rtt, 0)
        });
        assert!(cut_after.is_some_and(|n| n <= 2), "{cut_after:?}");
    }

    #[test]
    fn the_rate_follows_a_link_that_stops_losing() {
        let mut r = RandomLoss::default();
        let now = feed(&mut r, 0, 200, &sample(4, 100, 3, 0));
        let before = r.rate();
        feed(&mut r, now, 5_000, &sample(4, 100, 0, 0));
        assert!(r.rate() < before / 4.0, "{} then {}", before, r.rate());
    }

    /// Losses at a high queue count toward the random rate only from
    /// samples sent well below what the path has shown it carries and
    /// delivered as sent: not from those sent at its rate, nor from
    /// those it delivered less of than was sent (its capacity fell, and
    /// a buffer filled).
    #[test]
    fn only_samples_that_filled_no_buffer_teach_the_rate_at_a_high_queue() {
        let mbit = 1_000_000;
        let at = |sent: u64, delivered: u64| RateSample {
            sent_bps: Some(sent * mbit),
            delivered_bps: delivered * mbit,
            ..sample(15, 100, 0, 2)
        };
        let mut r = RandomLoss::default();
        feed_shown(&mut r, 200, &at(40, 40), 40 * mbit);
        assert_eq!(r.rate(), 0.0, "sent at the rate shown");
        feed_shown(&mut r, 200, &at(20, 12), 40 * mbit);
        assert_eq!(r.rate(), 0.0, "delivered less than sent");
        feed_shown(&mut r, 200, &at(20, 20), 40 * mbit);
        assert!((r.rate() - 0.02).abs() < 0.003, "{}", r.rate());
    }

    /// A run of losses in a sample sent below the rate shown (a burst that
    /// overflowed a buffer, a GSO send dropped whole) is no random loss:
    /// the link that only loses so never learns a random rate.
    #[test]
    fn a_run_of_losses_below_the_rate_shown_teaches_no_random_rate() {
        let mbit = 1_000_000;
        let mut r = RandomLoss::default();
        // Ten packets a sample (4 Mbit/s, 30 ms), four lost at once.
        let burst = RateSample {
            sent_bps: Some(2 * mbit),
            delivered_bps: 2 * mbit,
            ..sample(15, 6, 0, 4)
        };
        feed_shown(&mut r, 200, &burst, 4 * mbit);
        assert_eq!(r.rate(), 0.0);
        // One lost of ten is still the link's.
        let one = RateSample {
            sent_bps: Some(2 * mbit),
            delivered_bps: 2 * mbit,
            ..sample(15, 9, 0, 1)
        };
        feed_shown(&mut r, 200, &one, 4 * mbit);
        assert!(r.rate() > 0.05, "{}", r.rate());
    }

    fn feed_shown(r: &mut RandomLoss, n: u64, s: &RateSample, shown: u64) {
        for i in 0..n {
            r.on_sample(i * 30 * NANOS_PER_MS, s, None, shown);
        }
    }
}
