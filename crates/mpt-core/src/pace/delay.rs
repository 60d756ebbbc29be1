//! [`TargetDelay`]: rate control of one path that holds the queue at the
//! path's bottleneck near a small target delay (the default).
//!
//! This is LEDBAT's controller (RFC 6817 §2.4: the queueing delay is the
//! one-way delay above its floor, and the sender moves in proportion to
//! how far that delay is off a target) applied to a pacing rate instead of
//! a window, with the receiver's reports for acknowledgements:
//!
//! * below the target, while the pacer holds packets back (the path could
//!   take more than it is allowed), the rate grows by `step × off_target`
//!   per sample; `step` starts at [`STEP_MIN`] and doubles while the queue
//!   stays under half the target, up to [`STEP_MAX`] (as BBRv2's ProbeBW_UP
//!   doubles its probe, once per round trip: a rise shows in the queue
//!   one feedback delay later), so a path finds a new capacity within a
//!   few hundred milliseconds and approaches a known one gently. Until
//!   the path first shows a queue above the target or a loss, the step is
//!   at least [`STARTUP_STEP`] (BBR's Startup doubles per round trip; the
//!   bound at twice the delivered rate, below, caps the overshoot the
//!   same way), and [`STARTUP_STEP_SHORT`] on a LAN-like path (one that
//!   starts faster than the initial rate, below) once it delivered
//!   [`SHORT_PROVEN`] times its start rate: the rate doubles per sample
//!   there, as a queue it builds shows in the next report, where on a
//!   long path it shows a round trip later, after more growth, and
//!   below the target the rate grows by at least
//!   [`GROW_MIN`] per sample: on a radio link the FIFO's jitter holds the
//!   measured queue near the target whatever the rate;
//! * at or above the capacity measured with a standing queue (below)
//!   within [`KNOWN_FOR_NS`], the rate creeps: at most
//!   [`GROW_ABOVE_KNOWN`] per sample, and the step does not double. A
//!   queue built above a known capacity shows only a feedback delay later, and on a long path with a shallow buffer the
//!   doubling step overflowed it first (20 Mbit/s at 30 ms each way, a
//!   20 ms buffer: paced at 22 within 200 ms, a cut every 600 ms, 50 in
//!   10 s in the lab's sweep). A path that delivers [`KNOWN_EXCEEDED`]
//!   times that capacity has more now, and grows as one not yet measured;
//! * above the target while the pacer held packets back, the bottleneck
//!   is saturated, so the delivery rate
//!   the receiver measured is its capacity: the rate goes to that capacity
//!   less what drains the excess within [`DRAIN_NS`] (at most half at a
//!   time, and once per round trip: the samples of the next round trip
//!   still show the queue that cut is draining). The capacity is the
//!   delivery rate over the last round trip (at least 100 ms) if the
//!   queue grows fast (the capacity fell), over the last 300 ms if it
//!   grows slowly (on a radio link one 30 ms sample reads anything from a
//!   quarter to more than the whole of the link's rate), and only over
//!   samples whose packets left while the pacer held packets back
//!   throughout, a round trip before the report, or into a queue that
//!   stood and grew fast: the others measured the scheduler, not the
//!   path (application-limited, as the delivery rate estimation draft
//!   calls them), and a queue above the target while they arrive is
//!   held, not cut. The cut is a drain, not a new estimate: once the
//!   queue is back under the target, the rate returns to [`RESUME_SHARE`]
//!   of the mean delivery rate measured while the queue stood since the
//!   last cut (BBR's Drain ends at the estimated bandwidth too), and a
//!   congestion loss at a full buffer counts as such a cut;
//! * a path that came back from two dips (its delivery rate fell below
//!   [`DIP_SHARE`] of its rate before a drain, then rose to
//!   [`COMEBACK_SHARE`] of it) within [`COMEBACK_MEMORY_NS`] is a radio
//!   link: a drain ends there at no less than [`RESUME_RADIO_SHARE`] of
//!   its highest recent delivery rate (from the dip's rate, the step took
//!   seconds to climb back on the recorded Verizon trace). A capacity
//!   dropped for good never comes back, and is followed as before;
//! * above the target while the pacer held nothing back and the queue
//!   grew by less than the target over the sample, the queue is not of
//!   our making (another sender's, or a radio link's jitter) and a cut
//!   would not drain it: the rate holds (a queue that grows that fast is
//!   ours even so: the capacity fell below what we send, so it is cut);
//! * the target grows with the path's own delay variation: by
//!   [`JITTER_TARGET_GAIN`] times the RFC 3550 jitter the receiver reports
//!   (up to [`TARGET_MAX_NS`]). On a radio link packets held in FIFO order
//!   behind a late one read, under load, as a queue of about two standard
//!   deviations of the jitter that no rate cut can drain; the consecutive
//!   packets' jitter is a fraction of that deviation under load, hence the
//!   gain. Under load the FIFO bunches packets behind a late one, so the
//!   reported jitter falls as the rate grows while the queue it reads
//!   rises: a target from the current jitter alone held a 149 Mbit/s link
//!   with 3.6 ms of jitter at 30 (the lab's sweep, seed 1, case 12; 39 %
//!   of its four links' capacity in the simulation). So the target is at
//!   least [`JITTER_PEAK_GAIN`] times the highest jitter reported within
//!   [`JITTER_MEMORY_NS`] by a sample with no queue of ours (under the
//!   sample's own target, and moved by less than its jitter over the
//!   sample: a queue that grows reads as jitter too, each packet later
//!   than the last), as at a low rate the jitter shows whole (95 % in the
//!   simulation). A wired path's jitter is microseconds and leaves the
//!   target as it is;
//! * a queue that the cuts did not drain, while the path delivered what
//!   it was paced at, is the link's own (a FIFO link's jitter under load,
//!   `delay_undrained.rs`): the queue is judged above it, and a loss
//!   counts as ours only a whole target above it;
//! * packets lost while a queue stood cut the rate by [`LOSS_BETA`] at most
//!   once per round trip (RFC 6817 halves its window; losses on a path
//!   whose queue is empty are the link's, not ours, and cut nothing; nor
//!   do those a lossy link's random loss explains, `delay_random.rs`),
//!   and so do losses beyond the random ones of [`OVERFLOW_LOSS_SHARE`]
//!   of a sample's packets whatever the queue reads (on a FIFO link
//!   whose jitter was taken for its own queue, that floor and the
//!   jitter's target together can exceed the buffer: paced at twice its
//!   capacity, such a path overflowed for seconds without a cut);
//! * while the path carries real-time packets (a QoS real-time class,
//!   [`super::RateSample::realtime`]), the rate stays below
//!   [`REALTIME_HEADROOM`] × the capacity measured with a standing queue
//!   (smoothed over samples, and the highest since just before they
//!   began: pacing below it, later measurements would pull it down step
//!   by step), so the bottleneck's
//!   queue drains: a real-time packet waits there behind everything
//!   ahead of it, and mpt's priority only orders its own queue. Over
//!   Wi-Fi + LTE with bulk TCP and a UDP flood, a VoIP stream's one-way
//!   delay went from 13 ms to 6.5 ms (5.1 ms on the idle tunnel);
//! * a path starts at [`INITIAL_RATE_BPS`], or faster on a short path:
//!   [`START_WINDOW_BYTES`] per its round trip (the lowest plus two mean
//!   deviations: a jittery link's luckiest is not a LAN's), up to
//!   [`START_RATE_MAX_BPS`], until its pacer first holds packets back (as
//!   BBR's Startup paces its initial window over the round trip). That
//!   rate is a guess: the path's first cut (a congestion loss at a full
//!   buffer, or a standing queue of ours) goes at once to the highest
//!   delivery rate of the last [`BW_WINDOW_NS`], where the bottleneck
//!   was busy (BBR's Startup ends in Drain at the bandwidth it measured),
//!   not to [`LOSS_BETA`] or half of the guess: a 4 Mbit/s path of 30 ms
//!   started at 50 stayed paced above 30 for 0.7 s so, overflowing its
//!   buffer throughout;
//! * the rate never exceeds [`HEADROOM`] × the highest delivery rate of the
//!   last [`BW_WINDOW_NS`] or the rate it started at, whichever is higher
//!   (nor falls below [`MIN_RATE_BPS`]): a path the scheduler barely used
//!   cannot claim a rate it never showed, yet an idle path stays worth
//!   trying. On a path that showed a queue above its target within
//!   [`QUEUE_MEMORY_NS`] the bound is [`HEADROOM_QUEUED`] × the higher of
//!   that delivery rate and the one measured when the queue stood while
//!   the path was saturated (the capacity), with no floor at the initial
//!   rate (before any such measurement, the floor stays). A buffer
//!   shallower than the target (a jittery path's target can exceed it)
//!   never shows such a queue: there an overflow of ours on a path
//!   without random loss ends the floor, and arms the same bound for
//!   [`OVERFLOW_MEMORY_BOUND_NS`] while the path delivered
//!   [`OVERFLOW_STEADY_SHARE`] of its recent highest rate (under the
//!   floor an 8 Mbit/s path grew back to 27 Mbit/s within a second of its
//!   start's overflow; `delay_bound.rs`). Either way it has a bottleneck
//!   with a buffer, and what is paced above its capacity only fills that
//!   buffer, where mpt's scheduler cannot see it (as waiting in mpt's own
//!   queue it is seen, and sends the excess to the next path), and a
//!   shallow buffer overflows within one feedback delay, dropping what
//!   shares the path (a real-time packet) with the excess. A path that
//!   never queues (an unshaped link, limited by the sender's CPU) keeps
//!   the wide bound, as its delivery rate follows the sender's bursts.
//!
//! Why not BBR's gain cycle ([`super::ProbeBw`])? Its probe pushes 25 %
//! above capacity for a phase; our phases last tens of milliseconds, and
//! the queue a probe builds on one path delays every path's packets at the
//! receiver's reorder buffer. Here the standing queue is the target's few
//! milliseconds, and steady.
//!
//! Invariants: `MIN_RATE_BPS <= rate`; the rate changes only through
//! samples; no allocation.

use super::{RateControl, RateSample};
use crate::estimate::Windowed;
use crate::Nanos;
#[path = "delay_bound.rs"]
mod bound;
#[path = "delay_dips.rs"]
mod dips;
#[path = "delay_judge.rs"]
mod judge;
#[path = "delay_knobs.rs"]
mod knobs;
#[path = "delay_random.rs"]
mod random;
#[path = "delay_undrained.rs"]
mod undrained;
use judge::Judgement;
pub use knobs::*;
use knobs::{
    CAPACITY_SPAN_NS, CAPACITY_SPAN_SLOW_NS, LOSS_CUT_MIN_NS, RECENT_SAMPLES, SMOOTHING_DIV,
};

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct TargetDelay {
    rate: u64,
    step: f64,
    /// When the step last doubled: at most once per round trip.
    step_doubled_at: Option<Nanos>,
    /// When the rate was last cut for a queue: at most once per round trip.
    drained_at: Option<Nanos>,
    delivered_max: Windowed<10>,
    queue_floor: Windowed<10>,
    prev_sample: u64,
    loss_cut_at: Option<Nanos>,
    state: &'static str,
    /// No queue above the target and no loss seen yet: the rate grows by
    /// at least [`STARTUP_STEP`] per sample ([`STARTUP_STEP_SHORT`] on a
    /// short path).
    starting: bool,
    /// The path's round trip was LAN-like (it started faster than
    /// [`INITIAL_RATE_BPS`]): its queue shows in the next sample, so the
    /// start may double per sample once it delivered [`SHORT_PROVEN`]
    /// times the rate it started at.
    short: bool,
    cuts: u64,
    /// The least the bound by the delivery rates seen may be: the rate
    /// the path started at ([`INITIAL_RATE_BPS`], or what fits its round
    /// trip, [`START_WINDOW_BYTES`]).
    floor_bps: u64,
    /// A sample found the pacer holding packets back: the start is over.
    limited_seen: bool,
    /// The rate smoothed over samples (status: the capacity estimate).
    smoothed_bps: u64,
    /// When the queue was last above the target, and the delivery rate
    /// measured then (a saturated bottleneck's: its capacity).
    queued_at: Option<Nanos>,
    queued_capacity: u64,
    /// When packets of ours were last lost at a full buffer: the rate is
    /// bounded as after a standing queue for [`OVERFLOW_MEMORY_BOUND_NS`].
    overflowed_at: Option<Nanos>,
    /// The delivery rates measured with a standing queue, smoothed: the
    /// capacity, unbiased (one sample pair over 30 ms reads a burst as
    /// several percent more).
    queued_smoothed: u64,
    /// While real-time packets flow: the highest smoothed capacity since
    /// just before they began (0: none flow).
    realtime_ceiling: u64,
    /// The rate is below the capacity to drain a standing queue: once the
    /// queue is back under the target, it returns to the capacity measured
    /// since the last cut (the mean of the delivery rates while the queue
    /// stood: their sum and count).
    draining: bool,
    drain_sum_bps: u64,
    drain_samples: u64,
    /// A radio link's dips: the highest delivery rate of the last
    /// [`BW_WINDOW_NS`] when the last drain began (0: none pending), and
    /// the times the delivery rate came back to [`COMEBACK_SHARE`] of it
    /// after a drain (the newest last).
    drained_from_bps: u64,
    /// The lowest delivery rate since then.
    dip_bps: u64,
    comebacks: [Option<Nanos>; COMEBACKS_FOR_RADIO],
    /// Since when every sample found the pacer holding packets back (the
    /// start of the first such sample's interval; `None`: the last one
    /// did not).
    limited_since: Option<Nanos>,
    /// The last samples that measured the capacity: when each ended, its
    /// bits and its length (a ring, `recent_next` the oldest).
    recent: [(Nanos, u64, Nanos); RECENT_SAMPLES],
    recent_next: usize,
    /// The bottleneck buffer's depth in bytes when it overflowed (the
    /// queue at a congestion loss times the delivery rate), least within
    /// [`OVERFLOW_MEMORY_NS`].
    overflow_bytes: Windowed<10>,
    /// The target of the last sample (status).
    target_ns: Nanos,
    /// The queue a cut did not drain: the link's own (`delay_undrained.rs`).
    undrained: undrained::Undrained,
    /// The link's random loss (`delay_random.rs`).
    random: random::RandomLoss,
    /// The highest jitter reported within [`JITTER_MEMORY_NS`].
    jitter_peak: Windowed<10>,
}

impl Default for TargetDelay {
    fn default() -> Self {
        Self {
            rate: INITIAL_RATE_BPS,
            step: STEP_MIN,
            step_doubled_at: None,
            drained_at: None,
            delivered_max: Windowed::new(BW_WINDOW_NS, true),
            queue_floor: Windowed::new(QUEUE_FLOOR_WINDOW_NS, false),
            prev_sample: 0,
            loss_cut_at: None,
            state: "startup",
            starting: true,
            short: false,
            cuts: 0,
            floor_bps: INITIAL_RATE_BPS,
            limited_seen: false,
            smoothed_bps: INITIAL_RATE_BPS,
            queued_at: None,
            queued_capacity: 0,
            overflowed_at: None,
            queued_smoothed: 0,
            realtime_ceiling: 0,
            draining: false,
            drain_sum_bps: 0,
            drain_samples: 0,
            drained_from_bps: 0,
            dip_bps: 0,
            comebacks: [None; COMEBACKS_FOR_RADIO],
            limited_since: None,
            recent: [(0, 0, 0); RECENT_SAMPLES],
            recent_next: 0,
            overflow_bytes: Windowed::new(OVERFLOW_MEMORY_NS, false),
            target_ns: TARGET_NS,
            undrained: undrained::Undrained::default(),
            random: random::RandomLoss::default(),
            jitter_peak: Windowed::new(JITTER_MEMORY_NS, true),
        }
    }
}

impl TargetDelay {
    /// The rate was just cut: the check of whether the queue drains
    /// (`delay_undrained.rs`) starts from the window's highest delivery.
    fn note_cut(&mut self, now: Nanos) {
        let from = self.delivered_max.get(now).unwrap_or(0) as u64;
        self.undrained.on_cut(now, self.rate, from);
    }

    /// A cut to drain a standing queue: the capacity is measured afresh
    /// from it on (the samples before the last cut may predate a drop of
    /// the capacity: 100 → 10 Mbit/s resumed at twice the new one).
    fn start_drain(&mut self, now: Nanos) {
        self.draining = true;
        self.drain_sum_bps = 0;
        self.drain_samples = 0;
        if self.drained_from_bps == 0 {
            self.drained_from_bps = self.delivered_max.get(now).unwrap_or(0) as u64;
            self.dip_bps = u64::MAX;
        }
    }
}

impl RateControl for TargetDelay {
    fn on_sample(&mut self, now: Nanos, s: &RateSample, rtt_min: Option<Nanos>) {
        let q = self.excess(now, s);
        // Congestion losses beyond what the link's random loss explains.
        let shown = self.delivered_max.get(now).unwrap_or(0) as u64;
        let lost_ours = self.random.on_sample(now, s, rtt_min, shown);
        if lost_ours && q > 0 {
            let bytes = u128::from(q) * u128::from(s.delivered_bps) / 8_000_000_000;
            self.overflow_bytes.update(now, bytes as i64);
        }
        let mut target = self.target(now, s);
        if !s.realtime && self.dips_come_back(now) {
            target = target.max(self.radio_target(now));
        }
        self.target_ns = target;
        let rtt = rtt_min.unwrap_or(0);
        let (delivered, interval) = (s.delivered_bps, s.interval_ns);
        let u = &mut self.undrained;
        u.on_sample(
            now,
            s.queueing_ns,
            delivered,
            self.rate,
            interval,
            rtt,
            target,
        );
        self.limited_seen |= s.limited;
        let sample = s.delivered_bps.max(MIN_RATE_BPS);
        let capacity = sample.max(self.prev_sample);
        self.prev_sample = sample;
        self.delivered_max.update(now, sample as i64);
        self.note_comeback(now, sample, s);
        let loss_gap = rtt_min.unwrap_or(0).max(LOSS_CUT_MIN_NS);
        let Judgement {
            ours,
            measures,
            fast,
        } = self.judge(now, s, q, rtt_min, target);
        if measures {
            self.remember(now, s);
        }
        // No cut yet: the rate is still the guess the path started at
        // (or grew from it), not a measurement.
        let first_cut = self.cuts == 0;
        if q > target || lost_ours {
            self.starting = false;
        }
        // On a link that holds a queue of its own, the delay moves by its
        // jitter around that floor: half a target above it is noise.
        let loss_queue = if self.undrained.floor_ns() > 0 {
            target
        } else {
            target / 2
        };
        // Or, whatever the queue reads, the path lost a share of the
        // sample's packets that no random loss explains: a buffer
        // overflows (on a FIFO link whose jitter was taken for its own
        // queue, floor and target together can exceed the buffer, which
        // then overflowed for seconds at twice its rate).
        let lost = s.congestion_lost + s.link_lost;
        let overflowing =
            lost as f64 >= (s.delivered_packets + lost) as f64 * OVERFLOW_LOSS_SHARE && lost > 1;
        if lost_ours
            && (q >= loss_queue || overflowing)
            && self.loss_cut_at.is_none_or(|t| now >= t + loss_gap)
        {
            self.rate = (self.rate as f64 * LOSS_BETA) as u64;
            if first_cut {
                // The start overflowed the buffer: the bottleneck was busy,
                // so what it delivered is its capacity, and the rate goes
                // there at once, less what drains the queue (BBR's Startup
                // ends in Drain at the bandwidth it measured). Cut by
                // LOSS_BETA per round trip instead, a 4 Mbit/s path of
                // 30 ms started at 50 stayed paced above 30 for 0.7 s,
                // and its buffer overflowed throughout.
                self.rate = self.rate.min(self.start_exit(now));
            }
            self.loss_cut_at = Some(now);
            self.note_overflow(now, q, target, capacity, overflowing);
            self.note_cut(now);
            // Losses at a full buffer: the cut drains it, and ends with it.
            if q > target {
                self.start_drain(now);
            }
            self.step = STEP_MIN;
            self.cuts += 1;
            self.state = "drain";
        } else if q > target && !ours {
            // A queue while we send less than our rate and it does not
            // grow fast: not of our making (on a radio link, jitter), and
            // cutting would not drain it. Or we do, but only since less
            // than a round trip: what the receiver measured left while we
            // did not, and its rate is not the capacity to cut to.
            self.state = "hold";
        } else if q > target {
            // One cut per round trip: the samples of the next round trip
            // still show the queue the cut is draining (cutting on each
            // of them took a 40 ms path from 20 Mbit/s to 9).
            let rtt = rtt_min.unwrap_or(0);
            let drain = ((q - target) as f64 / DRAIN_NS as f64).min(0.5);
            let span = if fast {
                rtt.max(CAPACITY_SPAN_NS)
            } else {
                CAPACITY_SPAN_SLOW_NS
            };
            let capacity = self
                .span_capacity(now, span)
                .unwrap_or(capacity)
                .max(MIN_RATE_BPS);
            let to = (capacity as f64 * (1.0 - drain)) as u64;
            if to < self.rate && self.drained_at.is_none_or(|t| now >= t + rtt) {
                // At most half at a time, except when the start ends: the
                // rate it began at was a guess, not a measurement.
                self.rate = if first_cut {
                    to.max(self.start_exit(now).min(self.rate / 2))
                } else {
                    to.max(self.rate / 2)
                };
                self.cuts += 1;
                self.drained_at = Some(now);
                self.note_cut(now);
                self.start_drain(now);
            }
            self.step = STEP_MIN;
            self.state = "drain";
        } else if s.limited {
            if std::mem::take(&mut self.draining) {
                // The queue a cut drained is gone: back to the capacity
                // (as BBR's Drain ends in ProbeBW at the estimated
                // bandwidth), not up again from where the cut left the
                // rate (on a 40 ms path whose jitter holds the measured
                // queue near the target, that took seconds).
                if let Some(mean) = self.drain_sum_bps.checked_div(self.drain_samples) {
                    self.rate = self.rate.max((mean as f64 * RESUME_SHARE) as u64);
                }
                // On a radio link the capacity comes back after a dip: from
                // the floor a dip drove the rate to, the normal step took
                // seconds to climb back while the link offered three times
                // the rate (the recorded Verizon trace).
                if self.dips_come_back(now) {
                    let shown = self.delivered_max.get(now).unwrap_or(0) as f64;
                    self.rate = self.rate.max((shown * RESUME_RADIO_SHARE) as u64);
                }
            }
            let off = (target - q) as f64 / target as f64;
            // A short path doubles once it delivered clearly more than it
            // started at: one that started at its capacity (eight 100
            // Mbit/s links) overshoots by a quarter at most, as before.
            let proven = sample as f64 > self.floor_bps as f64 * SHORT_PROVEN;
            let step = if self.starting && self.short && proven {
                self.step.max(STARTUP_STEP_SHORT)
            } else if self.starting {
                self.step.max(STARTUP_STEP)
            } else {
                self.step
            };
            let above = self.above_known(now, sample);
            let grow = if above {
                (step * off).min(GROW_ABOVE_KNOWN)
            } else {
                (step * off).max(GROW_MIN)
            };
            self.rate += (self.rate as f64 * grow) as u64;
            // The step doubles at most once per round trip: a rise shows
            // in the queue one feedback delay later, and doubling on every
            // sample before that overshoots a long path (an LTE-like 40 ms
            // each way: 30 Mbit/s paced into 20, then a drain to 9).
            let rtt = rtt_min.unwrap_or(0);
            if q >= target / 2 || above {
                self.step = STEP_MIN;
            } else if self.step_doubled_at.is_none_or(|t| now >= t + rtt) {
                self.step = (self.step * 2.0).min(STEP_MAX);
                self.step_doubled_at = Some(now);
            }
            self.state = if self.starting { "startup" } else { "grow" };
        } else {
            self.state = "hold";
        }
        if q > target {
            self.queued_at = Some(now);
            // Saturated (the pacer held packets back, or the queue grows
            // fast): the delivery rate is the capacity. A queue that is
            // not ours says nothing about it (an idle path, a path taken
            // out of use, delivers little whatever its capacity).
            if measures {
                self.queued_capacity = capacity;
                if self.draining {
                    self.drain_sum_bps = self.drain_sum_bps.saturating_add(sample);
                    self.drain_samples += 1;
                }
                // Each sample, not the better of two: that one reads a
                // burst as capacity, several percent above the link's,
                // and 0.95 of it paced a 100 Mbit/s Wi-Fi link at 101 %
                // beside a VoIP stream (its queue never drained: 10.5 ms
                // one-way against 6.9).
                self.queued_smoothed = match self.queued_smoothed {
                    0 => sample,
                    m => (m as i64 + (sample as i64 - m as i64) / SMOOTHING_DIV) as u64,
                };
            }
        }
        let bound = self.bound_bps(now, s.realtime);
        self.rate = self.rate.min(bound).max(MIN_RATE_BPS);
        self.smoothed_bps = (self.smoothed_bps as i64
            + (self.rate as i64 - self.smoothed_bps as i64) / SMOOTHING_DIV)
            as u64;
    }

    fn pacing_rate_bps(&self, _now: Nanos) -> Option<u64> {
        Some(self.rate)
    }

    /// The pacing rate smoothed over samples: the controller's rate
    /// swings a few percent around the capacity on purpose.
    fn bandwidth_bps(&self) -> Option<u64> {
        Some(self.smoothed_bps)
    }

    fn state(&self) -> &'static str {
        self.state
    }

    fn cuts(&self) -> u64 {
        self.cuts
    }

    fn target_ns(&self) -> Option<Nanos> {
        Some(self.target_ns)
    }

    fn link_queue_ns(&self) -> Option<Nanos> {
        Some(self.undrained.floor_ns())
    }

    fn random_loss(&self) -> Option<(f64, u64)> {
        Some((self.random.rate(), self.random.excused()))
    }

    fn on_start_rtt(&mut self, rtt_ns: Nanos) {
        if !self.starting || self.limited_seen || rtt_ns == 0 {
            return;
        }
        let fit = u128::from(START_WINDOW_BYTES) * 8 * 1_000_000_000 / u128::from(rtt_ns);
        let start = (fit.min(u128::from(START_RATE_MAX_BPS)) as u64).max(INITIAL_RATE_BPS);
        // The round trip given may grow with the start's own queue: what
        // a path showed once it keeps until its start ends.
        self.short |= fit > u128::from(INITIAL_RATE_BPS);
        self.floor_bps = self.floor_bps.max(start);
        if self.rate < start {
            self.rate = start;
            self.smoothed_bps = start;
        }
    }
}

#[cfg(test)]
#[path = "delay_tests.rs"]
pub(super) mod tests;
