//! The bound on [`super::TargetDelay`]'s rate by what the path showed it
//! carries (the module documentation of `delay.rs`, "the rate never
//! exceeds"), and what arms its narrow form: a standing queue above the
//! target, or our own packets lost where the bottleneck's buffer is
//! shallower than the target.
//!
//! Invariants: the bound is at least [`MIN_RATE_BPS`] once applied; it
//! only lowers the rate, never raises it; `floor_bps` only falls here
//! (to [`MIN_RATE_BPS`], after an overflow below the target); while
//! real-time packets flow the ceiling only rises.

use super::knobs::{
    HEADROOM, HEADROOM_QUEUED, MIN_RATE_BPS, OVERFLOW_CLEAN_LOSS, OVERFLOW_MEMORY_BOUND_NS,
    OVERFLOW_STEADY_SHARE, QUEUE_MEMORY_NS, REALTIME_HEADROOM,
};
use super::TargetDelay;
use crate::Nanos;

impl TargetDelay {
    /// Our packets were lost at a full buffer with the queue at `q_ns`,
    /// no more than the `target_ns`: the buffer is shallower than the
    /// target (a jittery path's target can exceed it), so the queue never
    /// reads above the target and the overflow is the one sign of the
    /// bottleneck. On a path without random loss of its own (whose losses
    /// are then all overflows), the start's rate stops being a floor for
    /// the bound, and while the path delivered [`OVERFLOW_STEADY_SHARE`]
    /// of its recent highest rate (its capacity, not a radio link's dip)
    /// the narrow bound holds for [`OVERFLOW_MEMORY_BOUND_NS`]. So on a
    /// lossy path too when the losses were a share of the sample's
    /// packets no random loss explains (`overflowing`,
    /// [`super::OVERFLOW_LOSS_SHARE`]): they were not all the link's. Above the
    /// target the standing queue arms it instead.
    pub(super) fn note_overflow(
        &mut self,
        now: Nanos,
        q_ns: Nanos,
        target_ns: Nanos,
        delivered: u64,
        overflowing: bool,
    ) {
        if q_ns > target_ns || (self.random.rate() >= OVERFLOW_CLEAN_LOSS && !overflowing) {
            return;
        }
        let shown = self.delivered_max.get(now).unwrap_or(0) as f64;
        if delivered as f64 >= shown * OVERFLOW_STEADY_SHARE {
            self.overflowed_at = Some(now);
        }
        self.floor_bps = MIN_RATE_BPS;
    }

    /// The highest rate the path may be paced at now: [`HEADROOM`] × the
    /// highest delivery rate of the window (or the floor), narrowed to
    /// [`HEADROOM_QUEUED`] × that or the capacity measured under a
    /// standing queue while a queue or an overflow is remembered, and
    /// below the smoothed capacity while real-time packets flow.
    pub(super) fn bound_bps(&mut self, now: Nanos, realtime: bool) -> u64 {
        let shown = self.delivered_max.get(now).unwrap_or(0) as f64;
        let queued = self.queued_at.is_some_and(|t| now < t + QUEUE_MEMORY_NS);
        let overflowed = self
            .overflowed_at
            .is_some_and(|t| now < t + OVERFLOW_MEMORY_BOUND_NS);
        let bound = if (queued || overflowed) && self.queued_capacity > 0 {
            (shown.max(self.queued_capacity as f64) * HEADROOM_QUEUED) as u64
        } else if queued || overflowed {
            ((shown * HEADROOM_QUEUED) as u64).max(self.floor_bps)
        } else {
            ((shown * HEADROOM) as u64).max(self.floor_bps)
        };
        // While real-time packets flow, stay below the capacity measured
        // when a queue stood (it only rises meanwhile: pacing below it, the
        // deliveries measured would pull it down step by step).
        if !realtime {
            self.realtime_ceiling = 0;
            return bound;
        }
        self.realtime_ceiling = self.realtime_ceiling.max(self.queued_smoothed);
        match self.realtime_ceiling {
            0 => bound,
            c => bound.min((c as f64 * REALTIME_HEADROOM) as u64),
        }
    }
}
