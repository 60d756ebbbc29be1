//! [`ProbeBw`]: BBR-style rate control of one path from receiver reports
//! (after draft-cardwell-iccrg-bbr-congestion-control-02, with the
//! standing-queue bound of BBRv2's "inflight_hi" replaced by the
//! receiver's queueing delay).
//!
//! * Bandwidth: the largest delivery rate of the last [`BW_WINDOW_NS`]
//!   among samples that measured the path (the pacer limited sending) or
//!   beat the estimate (BBR §4.5.2's max filter and its rule for
//!   application-limited samples). While nothing measures the path the
//!   last estimate stays.
//! * Startup: pace at [`STARTUP_GAIN`] × bandwidth until the bandwidth
//!   grew by less than [`FULL_BW_GROWTH`] in [`FULL_BW_PHASES`] limited
//!   phases (BBR §4.3.2.2), or a queue builds.
//! * ProbeBW: cycle the pacing gain through [`PROBE_GAINS`] (BBR
//!   §4.3.4.3), one phase per round trip (at least [`PHASE_MIN_NS`]): probe
//!   25 % above the estimate, drain what that queued (as long as a queue
//!   stands, as BBR's Drain state), then cruise.
//! * Standing queue: when the receiver's queueing delay stands
//!   [`QUEUE_CUT_NS`] above its floor (the path's own jitter, the minimum
//!   of [`QUEUE_FLOOR_WINDOW_NS`]) and grew by [`QUEUE_GROWTH_NS`] over
//!   the sample (the bottleneck is saturated, so the delivery rate is its
//!   capacity), the estimate is cut to the delivery rate just measured,
//!   by at most half; packets lost while a queue stands cut it to at
//!   least [`LOSS_BETA`] of itself. Either way the cycle goes to its drain
//!   phase, at most once per phase: a capacity drop is followed within
//!   one round trip plus a report, not after the max filter's window. A
//!   queue that stands but shrinks cuts nothing: the path is draining, or
//!   the scheduler sends elsewhere, and its delivery rate then says
//!   nothing about its capacity.
//!
//! Invariants: the pacing rate is never below [`MIN_RATE_BPS`]; the
//! estimate changes only through samples; no allocation.

use super::{RateControl, RateSample, FEEDBACK_INTERVAL_NS};
use crate::estimate::Windowed;
use crate::{Nanos, NANOS_PER_MS};

/// Startup pacing gain (tuning knob; BBR uses 2/ln 2 ≈ 2.89 with
/// per-ACK feedback, ours comes every few milliseconds).
pub const STARTUP_GAIN: f64 = 2.0;
/// ProbeBW pacing gain cycle (BBR §4.3.4.3).
pub const PROBE_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Growth below which startup counts a phase as flat (BBR §4.3.2.2).
pub const FULL_BW_GROWTH: f64 = 1.25;
/// Flat phases after which startup ends (BBR §4.3.2.2).
pub const FULL_BW_PHASES: u32 = 3;
/// Window of the bandwidth max filter (tuning knob: several probe cycles).
pub const BW_WINDOW_NS: Nanos = 2_000 * NANOS_PER_MS;
/// Shortest gain-cycle phase (tuning knob: two reports at least).
pub const PHASE_MIN_NS: Nanos = 40 * NANOS_PER_MS;
/// Queueing delay above the floor that counts as a standing queue (tuning
/// knob: above a Wi-Fi link's jitter, below a radio's buffer).
pub const QUEUE_CUT_NS: Nanos = 10 * NANOS_PER_MS;
/// Growth of the queueing delay over one sample that counts as a queue
/// building (tuning knob: above the receiver's scheduling noise).
pub const QUEUE_GROWTH_NS: Nanos = 2 * NANOS_PER_MS;
/// Share of the estimate kept after a congestion loss (BBRv2's beta,
/// draft-cardwell-iccrg-bbr-congestion-control-02 §4.2.1).
pub const LOSS_BETA: f64 = 0.7;
/// Window of the queueing-delay floor (tuning knob, as the delay floor's).
pub const QUEUE_FLOOR_WINDOW_NS: Nanos = 10_000 * NANOS_PER_MS;
/// Bandwidth assumed before the first sample (tuning knob).
pub const INITIAL_RATE_BPS: u64 = 50_000_000;
/// Lowest estimate (tuning knob: a path that carried nothing must still
/// get a probe's worth of traffic).
pub const MIN_RATE_BPS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Startup,
    ProbeBw,
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct ProbeBw {
    mode: Mode,
    phase: usize,
    phase_start: Option<Nanos>,
    phase_limited: bool,
    bw: Windowed<10>,
    bw_est: u64,
    full_bw: u64,
    flat_phases: u32,
    queue_floor: Windowed<10>,
    cut_at: Option<Nanos>,
    /// The last sample saw a standing queue: the drain phase lasts.
    queue_stands: bool,
    /// The previous sample's delivery rate.
    prev_sample: u64,
    pub cuts: u64,
}

impl Default for ProbeBw {
    fn default() -> Self {
        Self {
            mode: Mode::Startup,
            phase: 0,
            phase_start: None,
            phase_limited: false,
            bw: Windowed::new(BW_WINDOW_NS, true),
            bw_est: INITIAL_RATE_BPS,
            full_bw: 0,
            flat_phases: 0,
            queue_floor: Windowed::new(QUEUE_FLOOR_WINDOW_NS, false),
            cut_at: None,
            queue_stands: false,
            prev_sample: 0,
            cuts: 0,
        }
    }
}

impl ProbeBw {
    fn phase_len(rtt_min: Option<Nanos>) -> Nanos {
        (rtt_min.unwrap_or(0) + FEEDBACK_INTERVAL_NS).max(PHASE_MIN_NS)
    }

    fn gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => STARTUP_GAIN,
            Mode::ProbeBw => PROBE_GAINS[self.phase],
        }
    }

    /// Go to the drain phase of the cycle.
    fn drain(&mut self, now: Nanos) {
        self.mode = Mode::ProbeBw;
        self.phase = 1;
        self.phase_start = Some(now);
    }

    fn end_phase(&mut self, now: Nanos) {
        if self.mode == Mode::Startup {
            if self.bw_est as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
                self.full_bw = self.bw_est;
                self.flat_phases = 0;
            } else if self.phase_limited {
                self.flat_phases += 1;
                if self.flat_phases >= FULL_BW_PHASES {
                    self.drain(now);
                    return;
                }
            }
        } else if !(self.phase == 1 && self.queue_stands) {
            // The drain phase lasts while the queue stands (BBR's Drain).
            self.phase = (self.phase + 1) % PROBE_GAINS.len();
        }
        self.phase_limited = false;
        self.phase_start = Some(now);
    }
}

impl RateControl for ProbeBw {
    fn on_sample(&mut self, now: Nanos, s: &RateSample, rtt_min: Option<Nanos>) {
        let phase_len = Self::phase_len(rtt_min);
        let start = *self.phase_start.get_or_insert(now);
        if now >= start + phase_len {
            self.end_phase(now);
        }
        let excess = s.queueing_ns.map(|q| {
            self.queue_floor.update(now, q as i64);
            let floor = self.queue_floor.get(now).unwrap_or(q as i64);
            q.saturating_sub(floor.max(0) as Nanos)
        });
        let queue_stands = excess.is_some_and(|e| e > QUEUE_CUT_NS);
        self.queue_stands = queue_stands;
        // The path was busy if the pacer held packets back, or if a queue
        // stands at its bottleneck while we send (paced above capacity).
        let sample = s.delivered_bps.max(MIN_RATE_BPS);
        let busy = s.limited || queue_stands;
        self.phase_limited |= busy;
        if busy || sample > self.bw_est {
            self.bw.update(now, sample as i64);
        }
        self.bw_est = self.bw.get(now).map_or(self.bw_est, |b| b as u64);
        // Only a queue that grows while it stands says the path carries
        // less than we send: then the delivery rate is its capacity. A
        // queue that stands but shrinks is draining (we send less than the
        // path carries, or the scheduler avoids the path), and a low
        // sample then says nothing.
        let growing = s
            .queue_growth_ns
            .is_some_and(|g| g > QUEUE_GROWTH_NS as i64);
        let saturated = queue_stands && growing;
        let overflow = queue_stands && s.congestion_lost > 0;
        let may_cut = self.cut_at.is_none_or(|t| now >= t + phase_len);
        let prev = std::mem::replace(&mut self.prev_sample, sample);
        if (saturated || overflow) && may_cut && sample.max(prev) < self.bw_est {
            // At most halve per cut (a drop to a tenth is followed in a
            // few round trips); a loss alone cuts by BBRv2's beta.
            let keep = if saturated {
                self.bw_est / 2
            } else {
                (self.bw_est as f64 * LOSS_BETA) as u64
            };
            // One sample alone may be a stall of the receiver; the path's
            // capacity is the better of the last two.
            let cut = sample.max(prev).max(keep);
            self.bw.reset(now, cut as i64);
            self.bw_est = cut;
            self.cut_at = Some(now);
            self.cuts += 1;
            self.drain(now);
        }
    }

    fn pacing_rate_bps(&self, _now: Nanos) -> Option<u64> {
        Some((self.bw_est as f64 * self.gain()) as u64)
    }

    fn bandwidth_bps(&self) -> Option<u64> {
        Some(self.bw_est)
    }

    fn cuts(&self) -> u64 {
        self.cuts
    }

    fn state(&self) -> &'static str {
        match self.mode {
            Mode::Startup => "startup",
            Mode::ProbeBw => "probe-bw",
        }
    }
}
