//! Per-path estimators, measured where the packets arrive: delivery rate,
//! one-way delay with its floor and the queueing delay on top of it, and
//! loss told apart as link loss or congestion loss.
//!
//! * Delivery rate: bytes that arrived per interval of
//!   [`RATE_INTERVAL_NS`], max-filtered over [`RATE_WINDOW_NS`] (the
//!   delivery-rate sample and windowed-max filter of BBR,
//!   draft-cardwell-iccrg-bbr-congestion-control §4.5). While the path is
//!   saturated the bottleneck paces the arrivals, so the estimate is its
//!   capacity; otherwise it is what was sent, a lower bound.
//! * One-way delay: the difference of the receive clock and the sender's
//!   timestamp. The clocks need not agree: the unknown offset is the same in
//!   every sample, so the floor (minimum over [`DELAY_FLOOR_WINDOW_NS`],
//!   as BBR's min-RTT filter, §4.6) and the smoothed value (gain 1/8, as
//!   RFC 6298's SRTT) share it and their difference is exact.
//! * Queueing delay: the smoothed one-way delay above the lowest smoothed
//!   value of the same window (its *base*), not above the lowest single
//!   sample. On a link with jitter the lowest sample of ten seconds lies
//!   several standard deviations below the typical delay (three and a half
//!   for a normal jitter over thousands of packets: 17 ms for an LTE-like
//!   link with 5 ms of jitter), so a path with an empty queue would read as
//!   queued and its sender would slow it to nothing; the smoothed value
//!   averages the jitter out first (LEDBAT's noise filtering, RFC 6817
//!   §3.4.2, applied to both ends of the difference).
//! * Peak one-way delay: the maximum over [`DELAY_PEAK_WINDOW_NS`], for
//!   the receiver's reorder release ([`crate::release`]): how late a
//!   packet on this path may still come, jitter and queue included.
//! * Jitter: RFC 3550 §6.4.1 interarrival jitter, the mean change of
//!   transit from one packet to the next (gain 1/16); the receiver reports
//!   it so that the sender can tell a radio link's own delay variation
//!   from a queue of its making.
//! * Loss: a gap in the path's sequence numbers is link loss while the
//!   queueing delay is below [`LINK_LOSS_QUEUE_NS`] (the queue is empty, so
//!   nothing overflowed; a radio dropped the packet), congestion loss
//!   otherwise.
//!
//! Invariants: pure arithmetic on `now` and the packets' fields, no
//! allocation after construction; every estimate is `None` until its first
//! sample; estimates follow a step change of the path within one window.

use serde::{Deserialize, Serialize};

use crate::{Nanos, NANOS_PER_MS};

/// Interval over which arrivals are summed into one rate sample (tuning
/// knob: long enough to hold several packets at 1 Mbit/s... short enough
/// to follow a radio link).
pub const RATE_INTERVAL_NS: Nanos = 25 * NANOS_PER_MS;
/// Window of the delivery-rate max filter (tuning knob: a step down is
/// followed after at most this long).
pub const RATE_WINDOW_NS: Nanos = 500 * NANOS_PER_MS;
/// Buckets of the rate window (its resolution).
const RATE_BUCKETS: usize = (RATE_WINDOW_NS / RATE_INTERVAL_NS) as usize;
/// Window of the one-way-delay floor (tuning knob; BBR uses 10 s for its
/// min RTT).
pub const DELAY_FLOOR_WINDOW_NS: Nanos = 10_000 * NANOS_PER_MS;
/// Buckets of the floor window.
const DELAY_BUCKETS: usize = 10;
/// Window of the one-way-delay peak (tuning knob: long enough to hold a
/// radio link's jitter tail, short enough to forget a queue that drained).
pub const DELAY_PEAK_WINDOW_NS: Nanos = 2_000 * NANOS_PER_MS;
/// Smoothing gain of the one-way delay, as a shift (1/8: RFC 6298 §2.3).
const DELAY_GAIN_SHIFT: u32 = 3;
/// A change of one-way delay larger than this is a clock step, not a
/// queue: the delay meter starts over (tuning knob).
pub const CLOCK_STEP_NS: u64 = 10_000 * NANOS_PER_MS;
/// Queueing delay below which a loss counts as link loss (tuning knob:
/// twice the sender's target queueing delay, [`crate::pace::TARGET_NS`],
/// which holds a few milliseconds of queue at every busy bottleneck on
/// purpose; a buffer overflows only well above that).
pub const LINK_LOSS_QUEUE_NS: Nanos = 10 * NANOS_PER_MS;

/// A maximum (or minimum) over a sliding window of time, kept in buckets.
#[derive(Debug, Clone)]
pub(crate) struct Windowed<const N: usize> {
    bucket_ns: Nanos,
    /// (bucket start, extreme in it), oldest first in ring order.
    slots: [Option<(Nanos, i64)>; N],
    max: bool,
}

impl<const N: usize> Windowed<N> {
    pub(crate) fn new(window_ns: Nanos, max: bool) -> Self {
        Self {
            bucket_ns: (window_ns / N as Nanos).max(1),
            slots: [None; N],
            max,
        }
    }

    fn better(&self, a: i64, b: i64) -> i64 {
        if self.max {
            a.max(b)
        } else {
            a.min(b)
        }
    }

    pub(crate) fn update(&mut self, now: Nanos, v: i64) {
        let start = now - now % self.bucket_ns;
        let i = (now / self.bucket_ns) as usize % N;
        self.slots[i] = match self.slots[i] {
            Some((s, x)) if s == start => Some((s, self.better(x, v))),
            _ => Some((start, v)),
        };
    }

    /// Forget every sample and start again from `v`.
    pub(crate) fn reset(&mut self, now: Nanos, v: i64) {
        self.slots = [None; N];
        self.update(now, v);
    }

    /// The extreme over the buckets younger than the window.
    pub(crate) fn get(&self, now: Nanos) -> Option<i64> {
        let window = self.bucket_ns * N as Nanos;
        let fresh = |s: Nanos| now < s.saturating_add(window);
        self.slots
            .iter()
            .flatten()
            .filter(|(s, _)| fresh(*s))
            .map(|(_, v)| *v)
            .reduce(|a, b| self.better(a, b))
    }
}

/// Delivery rate from arrivals. See the module documentation.
#[derive(Debug, Clone)]
pub struct RateMeter {
    interval_start: Option<Nanos>,
    interval_bytes: u64,
    max: Windowed<RATE_BUCKETS>,
    latest: Option<u64>,
}

impl Default for RateMeter {
    fn default() -> Self {
        Self {
            interval_start: None,
            interval_bytes: 0,
            max: Windowed::new(RATE_WINDOW_NS, true),
            latest: None,
        }
    }
}

impl RateMeter {
    /// `bytes` arrived at `now`.
    pub fn on_arrival(&mut self, now: Nanos, bytes: usize) {
        let start = *self.interval_start.get_or_insert(now);
        if now >= start + RATE_INTERVAL_NS {
            self.close_interval(now);
        }
        self.interval_bytes += bytes as u64;
    }

    fn close_interval(&mut self, now: Nanos) {
        let Some(start) = self.interval_start else {
            return;
        };
        let elapsed = now.saturating_sub(start).max(1);
        // Bits per second over the interval that just ended; an interval
        // longer than two lengths was idle in part and says less.
        let bps = self.interval_bytes * 8 * 1_000_000_000 / elapsed;
        if elapsed <= 2 * RATE_INTERVAL_NS {
            self.max.update(now, bps as i64);
        }
        self.latest = Some(bps);
        self.interval_start = Some(now);
        self.interval_bytes = 0;
    }

    /// The delivery rate in bits per second: the largest sample of the last
    /// window.
    pub fn rate_bps(&self, now: Nanos) -> Option<u64> {
        self.max.get(now).map(|v| v as u64)
    }

    /// The rate of the last complete interval.
    pub fn latest_bps(&self) -> Option<u64> {
        self.latest
    }
}

/// One-way delay, its floor and the queueing delay. See the module
/// documentation.
#[derive(Debug, Clone)]
pub struct DelayMeter {
    floor: Windowed<DELAY_BUCKETS>,
    base: Windowed<DELAY_BUCKETS>,
    peak: Windowed<DELAY_BUCKETS>,
    smoothed: Option<i64>,
}

impl Default for DelayMeter {
    fn default() -> Self {
        Self {
            floor: Windowed::new(DELAY_FLOOR_WINDOW_NS, false),
            base: Windowed::new(DELAY_FLOOR_WINDOW_NS, false),
            peak: Windowed::new(DELAY_PEAK_WINDOW_NS, true),
            smoothed: None,
        }
    }
}

impl DelayMeter {
    /// A packet that was sent `transit_ns` before `now` by the sender's
    /// clock (including the unknown clock offset).
    pub fn on_sample(&mut self, now: Nanos, transit_ns: i64) {
        if self
            .smoothed
            .is_some_and(|s| s.abs_diff(transit_ns) > CLOCK_STEP_NS)
        {
            // A clock stepped (or a timestamp came before the sender set
            // its wall clock): the old samples share no offset with the
            // new ones, start over.
            self.floor.reset(now, transit_ns);
            self.base.reset(now, transit_ns);
            self.peak.reset(now, transit_ns);
            self.smoothed = Some(transit_ns);
            return;
        }
        self.floor.update(now, transit_ns);
        self.peak.update(now, transit_ns);
        let smoothed = match self.smoothed {
            None => transit_ns,
            Some(s) => s.saturating_add(transit_ns.saturating_sub(s) >> DELAY_GAIN_SHIFT),
        };
        self.smoothed = Some(smoothed);
        self.base.update(now, smoothed);
    }

    /// The lowest one-way delay of the window (with the clock offset).
    pub fn floor_ns(&self, now: Nanos) -> Option<i64> {
        self.floor.get(now)
    }

    /// The highest one-way delay of the last [`DELAY_PEAK_WINDOW_NS`]
    /// (with the clock offset): how late a packet on the path may come.
    pub fn peak_ns(&self, now: Nanos) -> Option<i64> {
        self.peak.get(now)
    }

    /// The smoothed one-way delay (with the clock offset).
    pub fn smoothed_ns(&self) -> Option<i64> {
        self.smoothed
    }

    /// Queueing delay: smoothed one-way delay above its base (the lowest
    /// smoothed value of the window).
    pub fn queueing_ns(&self, now: Nanos) -> Option<Nanos> {
        let q = self.smoothed?.saturating_sub(self.base.get(now)?);
        Some(q.max(0) as Nanos)
    }
}

/// RFC 3550 §6.4.1 interarrival jitter: `J += (|D| - J) / 16`, where `D`
/// is the change of transit between consecutive packets, in integer ns.
#[derive(Debug, Clone, Copy, Default)]
pub struct Jitter {
    last_transit: Option<i64>,
    jitter_ns: u64,
}

/// RFC 3550 §6.4.1 jitter gain, as a shift (1/16; spec constant).
const JITTER_GAIN_SHIFT: u32 = 4;

impl Jitter {
    pub fn on_sample(&mut self, transit_ns: i64) {
        if let Some(prev) = self.last_transit {
            // i128: the timestamps come from the network and may be anything.
            let d = (i128::from(transit_ns) - i128::from(prev)).abs();
            let j = i128::from(self.jitter_ns);
            let j = j + ((d - j) >> JITTER_GAIN_SHIFT);
            self.jitter_ns = j.clamp(0, i128::from(u64::MAX)) as u64;
        }
        self.last_transit = Some(transit_ns);
    }

    /// The jitter, once a transit has been seen.
    pub fn jitter_ns(&self) -> Option<Nanos> {
        self.last_transit.map(|_| self.jitter_ns)
    }

    /// The last transit seen (with the clock offset).
    pub fn last_transit_ns(&self) -> Option<i64> {
        self.last_transit
    }
}

/// Loss counted by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LossSplit {
    /// Lost while the path's queue was empty: the link dropped them.
    pub link: u64,
    /// Lost while a queue stood: the bottleneck overflowed.
    pub congestion: u64,
}

impl LossSplit {
    /// `lost` packets went missing while the queueing delay was
    /// `queueing_ns` (None: not yet known, counted as link loss).
    pub fn on_loss(&mut self, lost: u64, queueing_ns: Option<Nanos>) {
        if queueing_ns.is_some_and(|q| q >= LINK_LOSS_QUEUE_NS) {
            self.congestion += lost;
        } else {
            self.link += lost;
        }
    }
}

/// What a path's receiver knows about it, for status and for the sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Estimates {
    /// Delivery rate (capacity while saturated), bits per second.
    pub rate_bps: Option<u64>,
    /// Queueing delay above the floor, nanoseconds.
    pub queueing_ns: Option<Nanos>,
    pub loss: LossSplit,
    /// RFC 3550 interarrival jitter, nanoseconds.
    pub jitter_ns: Option<Nanos>,
}

/// The receiver-side estimators of one path.
#[derive(Debug, Clone, Default)]
pub struct PathMeters {
    pub rate: RateMeter,
    pub delay: DelayMeter,
    pub loss: LossSplit,
    pub jitter: Jitter,
}

impl PathMeters {
    /// A packet of `bytes` arrived at `now` with one-way transit
    /// `transit_ns`; `lost` packets were skipped before it (a gap in the
    /// path's sequence numbers).
    pub fn on_packet(&mut self, now: Nanos, bytes: usize, transit_ns: i64, lost: u64) {
        self.rate.on_arrival(now, bytes);
        self.delay.on_sample(now, transit_ns);
        self.jitter.on_sample(transit_ns);
        if lost > 0 {
            let q = self.delay.queueing_ns(now);
            self.loss.on_loss(lost, q);
        }
    }

    pub fn estimates(&self, now: Nanos) -> Estimates {
        Estimates {
            rate_bps: self.rate.rate_bps(now),
            queueing_ns: self.delay.queueing_ns(now),
            loss: self.loss,
            jitter_ns: self.jitter.jitter_ns(),
        }
    }
}

#[cfg(test)]
#[path = "estimate_tests.rs"]
mod tests;
