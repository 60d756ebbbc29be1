//! A radio link's dips, for [`super::TargetDelay`]: whether the path's
//! capacity came back after it dipped (a radio link) or dropped for good.
//!
//! Invariants: `drained_from_bps` is 0 unless a drain began and its dip
//! has not come back yet; `comebacks` holds the latest comeback times,
//! oldest first; nothing here changes the rate.

use super::knobs::{
    COMEBACKS_FOR_RADIO, COMEBACK_MEMORY_NS, COMEBACK_SHARE, DIP_SHARE, MIN_RATE_BPS,
    RADIO_DEPTH_SHARE, RADIO_TARGET_MAX_NS, RADIO_TARGET_NS, TARGET_NS,
};
use super::{RateSample, TargetDelay};
use crate::Nanos;

impl TargetDelay {
    /// A delivery rate back at [`COMEBACK_SHARE`] of what the path carried
    /// before its last drain, after it fell below [`DIP_SHARE`] of that,
    /// is a comeback: the capacity had dipped, not dropped (a drain on a
    /// steady link delivers the link's rate throughout, and is no dip).
    /// A sample delivers below that share as a dip only while it was sent
    /// at that share or more (or, before the sender's marks reach back,
    /// while the pacer held packets back): an inner TCP that slowed down
    /// after a loss delivers less too, and on a steady 103 Mbit/s path
    /// of 69 ms its two slowdowns read as a radio link's dips, whose
    /// 40 ms target then let the rate grow 20 % past the 20 ms buffer.
    pub(super) fn note_comeback(&mut self, now: Nanos, sample: u64, s: &RateSample) {
        let from = self.drained_from_bps;
        if from == 0 {
            return;
        }
        let sent_then = s
            .sent_bps
            .map_or(s.limited, |b| b as f64 >= from as f64 * DIP_SHARE);
        if sent_then || sample as f64 >= from as f64 * DIP_SHARE {
            self.dip_bps = self.dip_bps.min(sample);
        }
        let dipped = (self.dip_bps as f64) < from as f64 * DIP_SHARE;
        if dipped && !self.draining && sample as f64 >= from as f64 * COMEBACK_SHARE {
            self.comebacks.rotate_left(1);
            self.comebacks[COMEBACKS_FOR_RADIO - 1] = Some(now);
            self.drained_from_bps = 0;
        }
    }

    /// The path came back from [`COMEBACKS_FOR_RADIO`] dips within
    /// [`COMEBACK_MEMORY_NS`]: a radio link, whose capacity returns after
    /// a dip as suddenly as it went.
    pub(super) fn dips_come_back(&self, now: Nanos) -> bool {
        self.comebacks
            .iter()
            .all(|c| c.is_some_and(|t| now < t + COMEBACK_MEMORY_NS))
    }

    /// The queueing target of a radio link: [`RADIO_TARGET_NS`] until its
    /// buffer overflowed, then [`RADIO_DEPTH_SHARE`] of the buffer's depth
    /// at the path's rate (a drop-tail buffer holds bytes: at 20 Mbit/s a
    /// buffer of 100 ms at 8 holds 40 ms), at most [`RADIO_TARGET_MAX_NS`].
    pub(super) fn radio_target(&self, now: Nanos) -> Nanos {
        let Some(bytes) = self.overflow_bytes.get(now) else {
            return RADIO_TARGET_NS;
        };
        let ns = bytes.max(0) as f64 * 8e9 / self.rate.max(MIN_RATE_BPS) as f64;
        ((ns * RADIO_DEPTH_SHARE) as Nanos).clamp(TARGET_NS, RADIO_TARGET_MAX_NS)
    }
}
