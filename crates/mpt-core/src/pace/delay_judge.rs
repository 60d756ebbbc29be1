//! What one sample says of a path, for [`super::TargetDelay`]: the queue
//! above the path's own floor and the target it is held to (moved here
//! from `delay.rs`, unchanged),
//! whether a queue above the target is of our making, whether the
//! delivery rate measured the path's capacity (the delivery rate
//! estimation draft's application-limited samples are told apart here),
//! the capacity over the recent samples that measured it, whether the
//! rate is above a capacity known, and the rate a start ends at.
//!
//! Invariants: `recent` is a ring of the last [`RECENT_SAMPLES`] samples
//! that measured the capacity, `recent_next` its oldest; nothing here
//! changes the rate.

use super::knobs::{
    JITTER_MAX_NS, JITTER_PEAK_GAIN, JITTER_TARGET_GAIN, KNOWN_EXCEEDED, KNOWN_FOR_NS,
    MIN_RATE_BPS, RECENT_SAMPLES, TARGET_MAX_NS, TARGET_NS,
};
use super::{RateSample, TargetDelay};
use crate::Nanos;

/// What one sample says of the path ([`TargetDelay::judge`]).
pub(super) struct Judgement {
    /// A queue above the target is of our making: cutting drains it.
    pub(super) ours: bool,
    /// The delivery rate is the path's capacity.
    pub(super) measures: bool,
    /// The queue grew by more than the target over the sample.
    pub(super) fast: bool,
}

impl TargetDelay {
    /// The queueing delay above its own floor (the path's jitter, up to
    /// [`JITTER_MAX_NS`]: a floor above that is a queue that never drained,
    /// not jitter), or above the queue our last cut did not drain
    /// (`delay_undrained.rs`), whichever is higher.
    pub(super) fn excess(&mut self, now: Nanos, s: &RateSample) -> Nanos {
        let Some(q) = s.queueing_ns else {
            return 0;
        };
        self.queue_floor.update(now, q as i64);
        let floor = self.queue_floor.get(now).unwrap_or(q as i64).max(0) as Nanos;
        q.saturating_sub(floor.min(JITTER_MAX_NS).max(self.undrained.floor_ns()))
    }

    /// The target queueing delay for a path with the sample's jitter, and
    /// at least [`JITTER_PEAK_GAIN`] times the highest jitter a sample
    /// with no queue of ours reported within [`JITTER_MEMORY_NS`].
    pub(super) fn target(&mut self, now: Nanos, s: &RateSample) -> Nanos {
        let of = |jitter: Nanos, gain: u64| {
            TARGET_NS
                .saturating_add(jitter.saturating_mul(gain))
                .min(TARGET_MAX_NS)
        };
        let j = s.jitter_ns.unwrap_or(0);
        let current = of(j, JITTER_TARGET_GAIN);
        if let (Some(q), Some(g)) = (s.queueing_ns, s.queue_growth_ns) {
            if q < current && g.unsigned_abs() <= j {
                self.jitter_peak.update(now, j as i64);
            }
        }
        let peak = self.jitter_peak.get(now).unwrap_or(0).max(0) as Nanos;
        current.max(of(peak, JITTER_PEAK_GAIN))
    }

    /// What the sample says of the path: whether a queue above the target
    /// is ours (the queue grew fast, as when we send more than the
    /// path carries, or the pacer held packets back over the whole of the
    /// interval in which the delivered packets were sent, one round trip
    /// before the report), and whether its delivery rate is the path's
    /// capacity (the pacer held packets back throughout, or a queue
    /// grew fast from one that already stood, so the bottleneck was busy
    /// for the whole interval). The delivery rate estimation draft
    /// (draft-cheng-iccrg-delivery-rate-estimation §3.3) marks the other
    /// samples application-limited. Over a 40 ms path whose scheduler had
    /// just begun to fill it, a sample of 8 Mbit/s on a 20 Mbit/s link cut
    /// the rate to 11, where it stayed for seconds.
    pub(super) fn judge(
        &mut self,
        now: Nanos,
        s: &RateSample,
        q: Nanos,
        rtt_min: Option<Nanos>,
        target: Nanos,
    ) -> Judgement {
        self.limited_since = match (s.limited, self.limited_since) {
            (false, _) => None,
            (true, None) => Some(now.saturating_sub(s.interval_ns)),
            (true, since) => since,
        };
        let window = s.interval_ns + rtt_min.unwrap_or(0);
        let throughout = self.limited_since.is_some_and(|t| now >= t + window);
        let growth = s.queue_growth_ns.unwrap_or(0);
        let fast = growth >= target as i64;
        let stood = q as i64 - growth >= (target / 2) as i64;
        Judgement {
            ours: throughout || fast,
            measures: throughout || (fast && stood),
            fast,
        }
    }

    /// Records a sample that measured the capacity.
    pub(super) fn remember(&mut self, now: Nanos, s: &RateSample) {
        let bits = (u128::from(s.delivered_bps) * u128::from(s.interval_ns) / 1_000_000_000) as u64;
        self.recent[self.recent_next] = (now, bits, s.interval_ns);
        self.recent_next = (self.recent_next + 1) % RECENT_SAMPLES;
    }

    /// The delivery rate over the samples that measured the capacity and
    /// ended within `span` of `now`, newest first, until they span that
    /// long.
    pub(super) fn span_capacity(&self, now: Nanos, span: Nanos) -> Option<u64> {
        let (mut bits, mut ns) = (0u64, 0 as Nanos);
        for i in 1..=RECENT_SAMPLES {
            let (at, b, len) =
                self.recent[(self.recent_next + RECENT_SAMPLES - i) % RECENT_SAMPLES];
            if len == 0 || at + span < now {
                break;
            }
            bits += b;
            ns += len;
            if ns >= span {
                break;
            }
        }
        (ns > 0).then(|| (u128::from(bits) * 1_000_000_000 / u128::from(ns)) as u64)
    }

    /// The rate is at or above the capacity measured with a standing
    /// queue within [`KNOWN_FOR_NS`], and the path delivered less than
    /// [`KNOWN_EXCEEDED`] times that capacity (`sample`; more: it grew,
    /// and the rate grows as on a path not yet measured). Then it creeps:
    /// doubling its step once per round trip, a 20 Mbit/s path of 30 ms
    /// each way went from 19.5 to 22 in 200 ms, and its 20 ms buffer
    /// overflowed before the queue showed.
    pub(super) fn above_known(&self, now: Nanos, sample: u64) -> bool {
        let known = self.queued_smoothed as f64;
        self.queued_at.is_some_and(|t| now < t + KNOWN_FOR_NS)
            && known > 0.0
            && self.rate as f64 >= known
            && (sample as f64) < known * KNOWN_EXCEEDED
    }

    /// The rate the start ends at: the highest delivery rate of the last
    /// [`BW_WINDOW_NS`] (a bottleneck that was busy delivered its
    /// capacity; the highest of them, as one sample of a jittery path
    /// reads anything from a quarter of its rate up; a later drain takes
    /// what is left of the excess).
    pub(super) fn start_exit(&self, now: Nanos) -> u64 {
        (self.delivered_max.get(now).unwrap_or(0) as u64).max(MIN_RATE_BPS)
    }
}
