//! Path-aware sending, the sender's side of each path: what the path
//! carries (from the receiver's reports), how fast to send on it (a
//! [`RateControl`] policy), and a pacing budget that holds sending to that
//! rate (a token bucket).
//!
//! Feedback: the receiver of a path reports, every [`FEEDBACK_INTERVAL_NS`]
//! while data arrives and in every probe and echo, cumulative bytes and
//! packets received, its queueing delay and its loss by cause
//! ([`crate::wire::ReportBody`]). [`PathSender::on_report`] turns two
//! reports at least [`SAMPLE_MIN_NS`] apart into a [`RateSample`]: the
//! bytes delivered between them over the reporter's own clock (so clock
//! offsets cancel), the queueing delay, the new losses, and whether the
//! pacer (not the application) limited sending meanwhile.
//!
//! Pacing: [`TokenBucket`] at the policy's pacing rate, [`PACING_BURST_NS`]
//! deep. A send may take the bucket below zero (the segments of one
//! super-packet stay together); the path then has no budget until the debt
//! is paid. With no rate known yet the path is not paced. While a path
//! carries real-time packets its bucket is only [`REALTIME_BURST_NS`]
//! deep: what a full bucket lets out at once waits at the path's
//! bottleneck in front of the next real-time packet (16 KiB is 4.4 ms at
//! 30 Mbit/s), and the pieces of a large packet leave as budget allows
//! rather than back to back (`tunnel/fragment.rs`).
//!
//! Invariants:
//! * the bucket never holds more than its depth, and `wait_ns` is the exact
//!   time until a given number of bytes has budget at the current rate;
//! * reports are used only in order of the reporter's timestamps; a
//!   reordered, repeated or restarted report yields no sample;
//! * pure arithmetic on `now`: no clock, no allocation after construction.

mod bbr;
mod bucket;
mod delay;
mod sent_marks;
mod status;
#[cfg(test)]
mod tests;

pub use bbr::ProbeBw;
pub use bucket::TokenBucket;
pub use delay::{TargetDelay, TARGET_NS};
use sent_marks::SentMarks;
pub use status::SenderStatus;

use crate::estimate::Windowed;
use crate::wire::{ReportBody, QUEUEING_UNKNOWN};
use crate::{Nanos, NANOS_PER_MS};

/// How often the receiver of a path reports while data arrives on it
/// (tuning knob: a few reports per smallest round trip of interest).
pub const FEEDBACK_INTERVAL_NS: Nanos = 10 * NANOS_PER_MS;
/// Shortest reporter-clock interval of one rate sample (tuning knob: long
/// enough to average over batching and jitter).
pub const SAMPLE_MIN_NS: Nanos = 30 * NANOS_PER_MS;
/// Depth of the pacing bucket, as time at the pacing rate (tuning knob:
/// covers the event loop's timer granularity of 1 ms with room to spare).
pub const PACING_BURST_NS: Nanos = 4 * NANOS_PER_MS;
/// Smallest pacing bucket depth in bytes (tuning knob: a few full-size
/// packets, so that slow paths still send whole packets).
pub const PACING_BURST_MIN_BYTES: u64 = 16 * 1024;
/// Budget a path gathers before its waiting packets are released, as time
/// at the pacing rate (tuning knob: released packets leave in batches of
/// about this much, one batch send per path, rather than one packet per
/// turn of the event loop).
pub const RELEASE_BATCH_NS: Nanos = NANOS_PER_MS;
/// Reported queueing delay below which a path's bottleneck queue counts
/// as empty for its stall deadline, and the most of it the scheduler
/// takes for the path's own delay variation (tuning knob: above a radio
/// link's jitter and a probe's overshoot).
pub const STANDING_QUEUE_NS: Nanos = 10 * NANOS_PER_MS;
/// How long after its last report a path's bottleneck queue is still
/// taken to drain in [`PathSender::projected_queue_ns`] (tuning knob: two
/// report intervals; reports stop when nothing arrives, as in an outage,
/// and a dead link's queue does not drain).
pub const PROJECT_DRAIN_NS: Nanos = 2 * FEEDBACK_INTERVAL_NS;
/// A path counts as quiet when it was sent less than 1 / this of what its
/// last sample delivered since the reported packets left (tuning knob).
pub const PROJECT_QUIET_DIV: u64 = 2;
/// Times the reported jitter a quiet path's queue never falls below: a
/// FIFO link's own delay under load (tuning knob: two to three
/// deviations, `delay_undrained.rs`).
pub const PROJECT_OWN_JITTERS: u64 = 3;
/// Depth of the pacing bucket of a path that carries real-time packets,
/// as time at the pacing rate (tuning knob: a real-time packet may wait
/// that long behind a burst at the bottleneck; the event loop's timers
/// keep up with a bucket this shallow).
pub const REALTIME_BURST_NS: Nanos = 2 * NANOS_PER_MS;
/// Smallest such depth in bytes (tuning knob: two full-size datagrams).
pub const REALTIME_BURST_MIN_BYTES: u64 = 3_000;
/// How long the highest delivery rate of a path counts
/// ([`PathSender::delivered_peak_bps`]; tuning knob: longer than a rate
/// control's cuts last).
pub const DELIVERED_PEAK_WINDOW_NS: Nanos = 10_000 * NANOS_PER_MS;
/// How long after its last real-time packet a path still counts as
/// carrying real-time traffic (tuning knob: a few of a call's silences).
pub const REALTIME_HOLD_NS: Nanos = 1_000 * NANOS_PER_MS;
/// Longest interval between two reports that still makes a sample (tuning
/// knob: after a silence the bytes say nothing about a rate).
pub const SAMPLE_MAX_NS: Nanos = 1_000 * NANOS_PER_MS;

const NANOS_PER_S: u128 = 1_000_000_000;

/// One delivery-rate sample of a path, from two receiver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes delivered per second over the interval (receiver's clock).
    pub delivered_bps: u64,
    /// Packets delivered over the interval.
    pub delivered_packets: u64,
    pub interval_ns: Nanos,
    /// The receiver's queueing delay at the end of the interval.
    pub queueing_ns: Option<Nanos>,
    /// How much the queueing delay grew over the interval (negative: it
    /// shrank). A queue that grows while we send means the bottleneck is
    /// saturated, so the delivery rate is its capacity.
    pub queue_growth_ns: Option<i64>,
    /// The receiver's RFC 3550 interarrival jitter on the path at the end
    /// of the interval: how much its one-way delay moves from packet to
    /// packet with no queue of ours (a radio link's).
    pub jitter_ns: Option<Nanos>,
    /// Real-time packets (a QoS real-time class) left on the path within
    /// [`REALTIME_HOLD_NS`] before the sample: the policy keeps the
    /// bottleneck's queue near empty while they do (they wait in it behind
    /// everything else, where mpt cannot put them first).
    pub realtime: bool,
    /// Packets lost while a queue stood, new in this interval.
    pub congestion_lost: u64,
    /// Packets lost with no queue, new in this interval.
    pub link_lost: u64,
    /// The pacer held packets back during the interval: the path carried
    /// what it was allowed, so the sample measures the path, not the
    /// application.
    pub limited: bool,
    /// Bits per second sent on the path while the packets this sample
    /// counted left: over an interval as long as the sample's, ending one
    /// round trip (the lowest) and the reported queueing delay before it
    /// (`None`: before the sender's marks reach back that far).
    pub sent_bps: Option<u64>,
}

/// A rate-control policy for one path: samples in, pacing rate out.
pub trait RateControl: Send + std::fmt::Debug {
    /// A new sample; `rtt_min` is the path's lowest round-trip time so far.
    fn on_sample(&mut self, now: Nanos, s: &RateSample, rtt_min: Option<Nanos>);
    /// The rate to pace at, bits per second; `None`: not known, unpaced.
    fn pacing_rate_bps(&self, now: Nanos) -> Option<u64>;
    /// The estimated capacity of the path, bits per second.
    fn bandwidth_bps(&self) -> Option<u64>;
    /// The policy's state, for status output.
    fn state(&self) -> &'static str;
    /// How often the policy cut its estimate for a standing queue or
    /// congestion loss (status output).
    fn cuts(&self) -> u64 {
        0
    }
    /// The round trip the path's start is sized for (its lowest plus two
    /// mean deviations, `Path::start_rtt`), with each report: a policy
    /// may start from a rate that fits it (default: ignored).
    fn on_start_rtt(&mut self, _rtt_ns: Nanos) {}
    /// The queueing delay the policy held the path's bottleneck to at the
    /// last sample, if it aims at one (status output).
    fn target_ns(&self) -> Option<Nanos> {
        None
    }
    /// The queueing delay the policy takes for the link's own, above
    /// which it counts a queue as its making (status output).
    fn link_queue_ns(&self) -> Option<Nanos> {
        None
    }
    /// The link's random loss rate as the policy measured it, and the
    /// congestion losses it took for that rather than cut for (status
    /// output).
    fn random_loss(&self) -> Option<(f64, u64)> {
        None
    }
}

/// The last report a sample started from.
#[derive(Debug, Clone, Copy)]
struct ReportMark {
    sent_ns: u64,
    queueing_ns: Option<Nanos>,
    rx_bytes: u64,
    rx_packets: u64,
    lost_link: u32,
    lost_congestion: u32,
}

/// When the packets a report measured left, when it came, and what had
/// been sent by then (see [`PathSender::projected_queue_ns`]).
#[derive(Debug, Clone, Copy)]
struct QueueSeen {
    seen: Nanos,
    reported: Nanos,
    sent_by_seen: Option<u64>,
}

/// The sender's model of one path. See the module documentation.
#[derive(Debug)]
pub struct PathSender {
    control: Box<dyn RateControl>,
    bucket: TokenBucket,
    /// Configured cap (`rate_mbit`), bits per second.
    cap_bps: Option<u64>,
    mark: Option<ReportMark>,
    /// The newest report's send timestamp (orders reports).
    newest_report: u64,
    limited: bool,
    /// Bytes sent on the path in all, and marked at each report.
    sent_bytes: u64,
    sent_marks: SentMarks,
    last_sample: Option<RateSample>,
    queueing_ns: Option<Nanos>,
    /// The last report's queue, for [`PathSender::projected_queue_ns`]:
    /// when the packets it measured left (local clock: the report's
    /// arrival less the lowest round trip and the reported delay), when
    /// the report came (the queue drains only while reports keep coming,
    /// [`PROJECT_DRAIN_NS`]), and the bytes sent in all by the first time
    /// (`None` before the marks reach back). Fixed per report, so the
    /// per-packet projection reads them rather than searching the marks.
    queue_seen_at: Option<QueueSeen>,
    /// Until when the path counts as carrying real-time packets.
    realtime_until: Nanos,
    /// The highest delivery rate of the samples of the last
    /// [`DELIVERED_PEAK_WINDOW_NS`].
    delivered_peak: Windowed<4>,
    pub samples: u64,
}

impl PathSender {
    pub fn new(control: Box<dyn RateControl>, cap_bps: Option<u64>) -> Self {
        Self {
            control,
            bucket: TokenBucket::default(),
            cap_bps,
            mark: None,
            newest_report: 0,
            limited: false,
            sent_bytes: 0,
            sent_marks: SentMarks::default(),
            last_sample: None,
            queueing_ns: None,
            queue_seen_at: None,
            realtime_until: 0,
            delivered_peak: Windowed::new(DELIVERED_PEAK_WINDOW_NS, true),
            samples: 0,
        }
    }

    /// A real-time packet leaves on the path now (see
    /// [`RateSample::realtime`]).
    pub fn on_realtime(&mut self, now: Nanos) {
        self.realtime_until = now + REALTIME_HOLD_NS;
    }

    /// Whether a real-time packet left on the path within
    /// [`REALTIME_HOLD_NS`] of `now`.
    pub fn carries_realtime(&self, now: Nanos) -> bool {
        now < self.realtime_until
    }

    /// The highest rate the path delivered in the samples of the last
    /// [`DELIVERED_PEAK_WINDOW_NS`] (`None`: no sample in that time).
    pub fn delivered_peak_bps(&self, now: Nanos) -> Option<u64> {
        self.delivered_peak.get(now).map(|r| r.max(0) as u64)
    }

    /// Change the configured cap (`None`: no cap).
    pub fn set_cap(&mut self, cap_bps: Option<u64>) {
        self.cap_bps = cap_bps;
    }

    /// The rate in force: the policy's, within the configured cap.
    pub fn pacing_rate_bps(&self, now: Nanos) -> Option<u64> {
        match (self.control.pacing_rate_bps(now), self.cap_bps) {
            (Some(r), Some(c)) => Some(r.min(c)),
            (r, c) => r.or(c),
        }
    }

    /// The path's estimated capacity, bits of datagrams per second, within
    /// the configured cap.
    pub fn bandwidth_bps(&self) -> Option<u64> {
        match (self.control.bandwidth_bps(), self.cap_bps) {
            (Some(b), Some(c)) => Some(b.min(c)),
            (b, c) => b.or(c),
        }
    }

    /// Bring the pacing budget to `now`.
    pub fn refill(&mut self, now: Nanos) {
        let r = self.pacing_rate_bps(now);
        self.bucket.set_shallow(self.carries_realtime(now));
        self.bucket.refill(now, r);
    }

    pub fn has_budget(&self) -> bool {
        self.bucket.has_budget()
    }

    /// `bytes` leave on the path now.
    pub fn on_send(&mut self, bytes: usize) {
        self.sent_bytes = self.sent_bytes.saturating_add(bytes as u64);
        self.bucket.take(bytes);
        if !self.bucket.has_budget() {
            self.limited = true;
        }
    }

    /// A packet had to wait for this path's budget.
    pub fn on_held(&mut self) {
        self.limited = true;
    }

    /// Time until `bytes` more could leave, from the last refill.
    pub fn wait_ns(&self, bytes: usize) -> Nanos {
        self.bucket.wait_ns(bytes)
    }

    pub fn budget_at(&self, now: Nanos) -> Nanos {
        self.bucket.budget_at(now)
    }

    /// Budget left once `bytes` more have left, as time at the pacing
    /// rate, from the last refill (0 when none or not paced).
    pub fn spare_ns(&self, bytes: usize) -> Nanos {
        self.bucket.spare_ns(bytes)
    }

    /// Whether waiting packets (`queued` bytes) may start to leave.
    pub fn release_ready(&self, queued: usize) -> bool {
        self.bucket.release_ready(queued)
    }

    /// When waiting packets (`queued` bytes) may start to leave.
    pub fn release_at(&self, now: Nanos, queued: usize) -> Nanos {
        self.bucket.release_at(now, queued)
    }

    /// The queueing delay the receiver reported last.
    pub fn queueing_ns(&self) -> Option<Nanos> {
        self.queueing_ns
    }

    /// The part of the reported queueing delay that is a standing queue
    /// at the path's bottleneck rather than jitter or a passing probe:
    /// what exceeds [`STANDING_QUEUE_NS`]. A packet sent now is expected
    /// to wait that long there. (The report is up to a feedback interval
    /// plus a one-way delay old, and a queue below the threshold drains
    /// in less than that once the scheduler sends elsewhere.)
    pub fn standing_queue_ns(&self) -> Nanos {
        self.queueing_ns
            .unwrap_or(0)
            .saturating_sub(STANDING_QUEUE_NS)
    }

    /// The standing queue (above [`PathSender::scheduler_threshold_ns`]) a
    /// packet sent at `now` is expected to meet, for the scheduler. The
    /// last report is up to a round trip and its own queue old: the
    /// packets it measured left
    /// then. If since then the path was sent less than half of what it
    /// delivered at the last sample (the capacity as last seen: on a
    /// radio link whose capacity fell, lower than any older estimate), the
    /// scheduler had all but stopped sending on it, and the queue is
    /// brought forward as a fluid queue draining at that rate: the
    /// reported delay, plus what was sent since, less the time since
    /// (credited only up to [`PROJECT_DRAIN_NS`] after the last report: a
    /// link whose reports stopped may have stopped delivering), and never
    /// below three times the reported jitter (a link that keeps its
    /// packets in order holds that much whatever is sent). Otherwise, and
    /// before the marks reach back that far, the report stands
    /// (less the threshold): a queue the scheduler keeps
    /// feeding is measured, not modelled. (On `wifi-lte` the LTE-like
    /// path was left idle for a round trip after each time its queue
    /// showed, while the report of the drained queue came back: see
    /// docs/results-notes.md, "A quiet path's queue brought forward".)
    pub fn projected_queue_ns(&self, now: Nanos) -> Nanos {
        let Some(q) = self.queueing_ns else { return 0 };
        let threshold = self.scheduler_threshold_ns();
        let as_reported = q.saturating_sub(threshold);
        let bw = self.last_sample.map(|s| s.delivered_bps);
        let (Some(at), Some(bw)) = (self.queue_seen_at, bw) else {
            return as_reported;
        };
        let (seen, reported) = (at.seen, at.reported);
        let Some(then) = at.sent_by_seen.filter(|_| bw > 0 && now >= seen) else {
            return as_reported;
        };
        let sent = self.sent_bytes.saturating_sub(then);
        let fill_ns = (u128::from(sent) * 8 * NANOS_PER_S / u128::from(bw)) as u64;
        let drained_by = now.min(reported + PROJECT_DRAIN_NS);
        if fill_ns * PROJECT_QUIET_DIV > drained_by.saturating_sub(seen) {
            return as_reported;
        }
        // A FIFO link's own delay under load (two to three deviations of
        // its jitter) does not drain.
        let own = q.min(self.own_jitters_ns());
        (q + fill_ns)
            .saturating_sub(drained_by.saturating_sub(seen))
            .max(own)
            .saturating_sub(threshold)
    }

    /// What of the reported queueing delay the scheduler takes for the
    /// path's own delay variation rather than a queue: [`PROJECT_OWN_JITTERS`]
    /// times its reported jitter, at most [`STANDING_QUEUE_NS`]. A wired
    /// path's jitter is microseconds, so the scheduler sees its queue
    /// whole: on eight 1 Gbit/s paths a fixed 10 ms left queues of 1-5 ms
    /// unseen on two of them, and the tunnel carried 5.6-5.9 Gbit/s
    /// against 6.3-6.6 with this threshold (docs/results-notes.md, "The
    /// scheduler sees a wired path's queue whole").
    pub fn scheduler_threshold_ns(&self) -> Nanos {
        self.own_jitters_ns().min(STANDING_QUEUE_NS)
    }

    /// [`PROJECT_OWN_JITTERS`] times the reported jitter: the delay a FIFO
    /// link holds under load whatever is sent.
    fn own_jitters_ns(&self) -> Nanos {
        PROJECT_OWN_JITTERS * self.jitter_ns().unwrap_or(0)
    }

    /// The round trip the path's start is sized for (`Path::start_rtt`).
    pub fn on_start_rtt(&mut self, rtt_ns: Nanos) {
        self.control.on_start_rtt(rtt_ns);
    }

    /// A receiver report about this path, sent at `sent_ns` by the
    /// reporter's clock. Returns the sample it completed, if any.
    pub fn on_report(
        &mut self,
        now: Nanos,
        sent_ns: u64,
        r: &ReportBody,
        rtt_min: Option<Nanos>,
    ) -> Option<RateSample> {
        if sent_ns <= self.newest_report && self.mark.is_some() {
            return None;
        }
        self.newest_report = sent_ns;
        self.sent_marks.push(now, self.sent_bytes);
        self.queueing_ns =
            (r.queueing_us != QUEUEING_UNKNOWN).then(|| u64::from(r.queueing_us) * 1_000);
        self.queue_seen_at = rtt_min.map(|rtt| {
            let seen = now.saturating_sub(rtt + self.queueing_ns.unwrap_or(0));
            QueueSeen {
                seen,
                reported: now,
                sent_by_seen: self.sent_marks.at(seen),
            }
        });
        let here = ReportMark {
            sent_ns,
            queueing_ns: self.queueing_ns,
            rx_bytes: r.rx_bytes,
            rx_packets: r.rx_packets,
            lost_link: r.lost_link,
            lost_congestion: r.lost_congestion,
        };
        let Some(m) = self.mark else {
            self.mark = Some(here);
            return None;
        };
        let dt = sent_ns - m.sent_ns;
        if dt < SAMPLE_MIN_NS {
            return None;
        }
        self.mark = Some(here);
        let bytes = r.rx_bytes.wrapping_sub(m.rx_bytes);
        if dt > SAMPLE_MAX_NS || bytes > 1 << 40 {
            // A silence, or the peer restarted: start over from here.
            self.limited = false;
            return None;
        }
        // The delivered packets left one round trip and the queue they
        // waited in before this report.
        let lag = rtt_min.unwrap_or(0) + self.queueing_ns.unwrap_or(0);
        let left_by = now.saturating_sub(lag);
        let s = RateSample {
            sent_bps: self
                .sent_marks
                .rate_bps(left_by.saturating_sub(dt), left_by),
            delivered_bps: (u128::from(bytes) * 8 * NANOS_PER_S / u128::from(dt)) as u64,
            delivered_packets: r.rx_packets.wrapping_sub(m.rx_packets).min(1 << 40),
            interval_ns: dt,
            queueing_ns: self.queueing_ns,
            queue_growth_ns: self
                .queueing_ns
                .zip(m.queueing_ns)
                .map(|(b, a)| b as i64 - a as i64),
            jitter_ns: (r.jitter_us != QUEUEING_UNKNOWN).then(|| u64::from(r.jitter_us) * 1_000),
            congestion_lost: u64::from(r.lost_congestion.wrapping_sub(m.lost_congestion)),
            link_lost: u64::from(r.lost_link.wrapping_sub(m.lost_link)),
            limited: std::mem::take(&mut self.limited),
            realtime: now < self.realtime_until,
        };
        self.control.on_sample(now, &s, rtt_min);
        self.samples += 1;
        self.last_sample = Some(s);
        self.delivered_peak.update(now, s.delivered_bps as i64);
        Some(s)
    }

    /// The peer restarted: its counters start again.
    pub fn peer_restarted(&mut self) {
        self.mark = None;
        self.newest_report = 0;
    }

    /// The path's random loss rate as its rate control measured it (a
    /// fraction; 0 if it does not tell links' losses from its own).
    pub fn random_loss_rate(&self) -> f64 {
        self.control.random_loss().map_or(0.0, |(p, _)| p)
    }

    /// The RFC 3550 jitter the receiver reported with the last sample.
    pub fn jitter_ns(&self) -> Option<Nanos> {
        self.last_sample.and_then(|s| s.jitter_ns)
    }

    /// Snapshot for status output.
    pub fn status(&self, now: Nanos) -> SenderStatus {
        let mbps = |b: u64| b as f64 / 1e6;
        let random_loss = self.control.random_loss();
        SenderStatus {
            control: self.control.state().into(),
            bandwidth_mbps: self.control.bandwidth_bps().map(mbps),
            pacing_mbps: self.pacing_rate_bps(now).map(mbps),
            cap_mbps: self.cap_bps.map(mbps),
            delivered_mbps: self.last_sample.map(|s| mbps(s.delivered_bps)),
            sent_then_mbps: self.last_sample.and_then(|s| s.sent_bps).map(mbps),
            queueing_ms: self.queueing_ns.map(|q| q as f64 / NANOS_PER_MS as f64),
            queue_ahead_ms: self
                .queueing_ns
                .map(|_| self.projected_queue_ns(now) as f64 / NANOS_PER_MS as f64),
            jitter_ms: self.jitter_ns().map(|j| j as f64 / NANOS_PER_MS as f64),
            target_ms: self
                .control
                .target_ns()
                .map(|t| t as f64 / NANOS_PER_MS as f64),
            link_queue_ms: self
                .control
                .link_queue_ns()
                .map(|t| t as f64 / NANOS_PER_MS as f64),
            random_loss_pct: random_loss.map(|(p, _)| 100.0 * p),
            losses_excused: random_loss.map_or(0, |(_, n)| n),
            samples: self.samples,
            cuts: self.control.cuts(),
            fill_ms: None,
        }
    }
}

/// A policy that never paces (static-weight scheduling).
#[derive(Debug, Default)]
pub struct Unpaced;

impl RateControl for Unpaced {
    fn on_sample(&mut self, _: Nanos, _: &RateSample, _: Option<Nanos>) {}
    fn pacing_rate_bps(&self, _: Nanos) -> Option<u64> {
        None
    }
    fn bandwidth_bps(&self) -> Option<u64> {
        None
    }
    fn state(&self) -> &'static str {
        "off"
    }
}
