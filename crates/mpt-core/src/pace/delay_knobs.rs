//! Tuning knobs of [`super::TargetDelay`] (all of them: this controller
//! implements no spec constant), with their units in their names and, in
//! each note, the measurement that set it.
//!
//! Invariants: `MIN_RATE_BPS <= INITIAL_RATE_BPS <= START_RATE_MAX_BPS`;
//! `STEP_MIN <= STARTUP_STEP <= STEP_MAX <= STARTUP_STEP_SHORT`;
//! `SHORT_PROVEN >= 1`; `HEADROOM_QUEUED <= HEADROOM`; `LOSS_BETA`,
//! `RESUME_SHARE` and `REALTIME_HEADROOM` are in (0, 1].

use crate::{Nanos, NANOS_PER_MS};

/// Target queueing delay at the bottleneck (tuning knob; RFC 6817 allows
/// up to 100 ms, a multipath tunnel wants a few ms: the reorder buffer
/// waits for the slowest path's queue).
pub const TARGET_NS: Nanos = 5 * NANOS_PER_MS;
/// Target added per nanosecond of reported jitter, and the largest target
/// (tuning knobs).
pub const JITTER_TARGET_GAIN: u64 = 8;
pub const TARGET_MAX_NS: Nanos = 30 * NANOS_PER_MS;
/// How long the highest jitter a sample with no queue of ours reported
/// sets the target (tuning knob: longer than a transfer's start, when the
/// rate is low and the jitter shows whole, to its steady state).
/// Target added per nanosecond of the highest jitter reported with no
/// queue of ours within [`JITTER_MEMORY_NS`] (tuning knob: at a low rate
/// consecutive packets' delays are nearly independent, and their RFC 3550
/// jitter is about 1.1 standard deviations; a FIFO link under load holds
/// two to three of them; with 8, as for the current jitter, the lab's
/// `lossy` and `wifi-lte` read several points lower).
pub const JITTER_PEAK_GAIN: u64 = 3;
pub const JITTER_MEMORY_NS: Nanos = 10_000 * NANOS_PER_MS;
/// Smallest and largest growth step per sample (tuning knobs).
pub const STEP_MIN: f64 = 0.01;
pub const STEP_MAX: f64 = 0.5;
/// Least growth per sample below the target (tuning knob: on a radio
/// link the FIFO's jitter reads as a queue near the target, `off` is
/// small whatever the rate, and the rate crept back after a cut at 0.2 %
/// per sample, an LTE-like path paced at 11 of its 20 Mbit/s for
/// seconds).
pub const GROW_MIN: f64 = 0.005;
/// Most growth per sample while the rate is above the capacity measured
/// with a standing queue, and the delivery rate above which that capacity
/// is taken as stale (tuning knobs: 0.2 % per 30 ms sample is 7 % per
/// second; growing faster, a 20 Mbit/s path of 30 ms each way reached 22
/// within 200 ms and overflowed its 20 ms buffer before the queue showed).
pub const GROW_ABOVE_KNOWN: f64 = 0.002;
pub const KNOWN_EXCEEDED: f64 = 1.05;
/// How long after the queue last stood above the target its capacity
/// counts as known (tuning knob: a radio link's capacity moves from one
/// second to the next; kept for 10 s, `two-lte` read 2-3 points lower).
pub const KNOWN_FOR_NS: Nanos = 1_000 * NANOS_PER_MS;
/// Least step before the path first showed a queue or a loss (tuning
/// knob: at 1 % doubling per 30 ms sample, eight 100 Mbit/s paths took
/// 250 ms from the initial rate to their capacity, a quarter of a second
/// of a transfer at half its rate; the bound at twice the delivered rate
/// still holds the overshoot).
pub const STARTUP_STEP: f64 = 0.25;
/// The step before the first queue or loss on a LAN-like path (one whose
/// round trip starts it faster than [`INITIAL_RATE_BPS`]) once it
/// delivered [`SHORT_PROVEN`] times its start rate: the rate doubles per
/// sample, as BBR's Startup doubles per round trip (tuning knob: at
/// [`STARTUP_STEP`], 1.5 times per sample at most, one unshaped veth path
/// took 0.6 s to reach 10 Gbit/s, and two 1 Gbit/s paths read 89.5 %
/// against 91.1-91.5 with it; on the longer paths of `three-unequal`,
/// doubling overshot into their shapers, 7-10 drops against 4, hence
/// only on a LAN-like path, whose queue shows in the next report).
pub const STARTUP_STEP_SHORT: f64 = 1.0;
/// How much more than its start rate a short path must have delivered in
/// a sample before its start doubles (tuning knob: doubling from the
/// start, eight 100 Mbit/s links, started at their capacity, overshot
/// into their shapers, one paced at 241 Mbit/s in the first 200 ms, and
/// read 92.7-93.7 % against 92.8-94.1; at 1.1, samples that read bursts
/// still let some double).
pub const SHORT_PROVEN: f64 = 1.5;
/// The share of its capacity (measured with a standing queue before or
/// while real-time packets flow) a path's rate may reach while it carries
/// real-time packets (tuning knob: a real-time packet waits at the
/// bottleneck behind the queue there, where mpt cannot put it first, so
/// the bottleneck must drain, at some cost to bulk traffic on the path).
pub const REALTIME_HEADROOM: f64 = 0.95;
/// Share of the capacity measured with a standing queue that the rate
/// returns to once a drain brought the queue back under the target
/// (tuning knob: that measurement reads bursts as a few percent more than
/// the link carries).
pub const RESUME_SHARE: f64 = 0.95;
/// A radio link's dips (tuning knobs): a delivery rate that fell below
/// `DIP_SHARE` of the highest of the [`BW_WINDOW_NS`] before a drain and
/// came back to `COMEBACK_SHARE` of it is a comeback; after `COMEBACKS_FOR_RADIO` of them within
/// `COMEBACK_MEMORY_NS`, a drain ends at no less than
/// `RESUME_RADIO_SHARE` of that window's highest delivery rate. A wired
/// link whose capacity dropped for good never comes back, and follows the
/// drop as before.
pub const DIP_SHARE: f64 = 0.5;
pub const COMEBACK_SHARE: f64 = 0.7;
pub const COMEBACKS_FOR_RADIO: usize = 2;
pub const COMEBACK_MEMORY_NS: Nanos = 10_000 * NANOS_PER_MS;
pub const RESUME_RADIO_SHARE: f64 = 0.7;
/// Queueing target of a radio link before its buffer was seen to
/// overflow (tuning knob, experiment).
pub const RADIO_TARGET_NS: Nanos = 40 * NANOS_PER_MS;
/// Once a radio link's buffer overflowed: the target is this share of the
/// buffer's depth in bytes (the least of the depths seen within
/// [`OVERFLOW_MEMORY_NS`]) at the path's rate, up to
/// [`RADIO_TARGET_MAX_NS`] (tuning knobs, experiment).
pub const RADIO_DEPTH_SHARE: f64 = 0.7;
pub const RADIO_TARGET_MAX_NS: Nanos = 80 * NANOS_PER_MS;
pub const OVERFLOW_MEMORY_NS: Nanos = 10_000 * NANOS_PER_MS;
/// Time over which a queue above the target is drained (tuning knob).
pub const DRAIN_NS: Nanos = 100 * NANOS_PER_MS;
/// Share of the rate kept after a congestion loss (tuning knob; BBRv2's
/// beta, draft-cardwell-iccrg-bbr-congestion-control-02).
pub const LOSS_BETA: f64 = 0.7;
/// The rate may exceed the highest recent delivery rate by this factor.
pub const HEADROOM: f64 = 2.0;
/// The same bound on a path that showed a queue within [`QUEUE_MEMORY_NS`]
/// (tuning knobs).
pub const HEADROOM_QUEUED: f64 = 1.1;
pub const QUEUE_MEMORY_NS: Nanos = 10_000 * NANOS_PER_MS;
/// How long an overflow of ours below the target bounds the rate as a
/// standing queue does (tuning knob; `delay_bound.rs`): a wired path
/// overflows again each time it grows past its capacity, which renews it.
/// Kept for [`QUEUE_MEMORY_NS`] on every overflow, `two-lte` read 68.3 %
/// against 71.0 (a radio link's losses come where its capacity fell, and
/// it comes back).
pub const OVERFLOW_MEMORY_BOUND_NS: Nanos = 1_000 * NANOS_PER_MS;
/// An overflow arms that bound only while the path delivers at least
/// this share of its highest delivery rate of the last [`BW_WINDOW_NS`]
/// (tuning knob).
pub const OVERFLOW_STEADY_SHARE: f64 = 0.8;
/// ... and only on a path whose random loss reads below this (tuning
/// knob): on a lossy one some random losses count as overflows.
pub const OVERFLOW_CLEAN_LOSS: f64 = 0.003;
/// Window of the delivery-rate maximum and of the queueing floor's
/// refresh (tuning knobs).
pub const BW_WINDOW_NS: Nanos = 2_000 * NANOS_PER_MS;
pub const QUEUE_FLOOR_WINDOW_NS: Nanos = 10_000 * NANOS_PER_MS;
/// Most of the reported queueing delay taken for the path's own jitter
/// (tuning knob: a radio link's).
pub const JITTER_MAX_NS: Nanos = 5 * NANOS_PER_MS;
/// The queue cuts did not drain (`delay_undrained.rs`; tuning knobs): how
/// deep the cuts must have gone (a share of the highest delivery rate
/// when they began), how long after the deepest cut's round trip the
/// queue is watched, the share of the rate paced the path must deliver
/// meanwhile (less: its capacity fell, and the queue is ours), and the
/// most taken for the link's own (a FIFO link's jitter reads as two to
/// three standard deviations under load: 8 ms of jitter, the most the
/// lab's sweep draws, about 20 ms).
pub const UNDRAINED_DEPTH: f64 = 0.7;
pub const UNDRAINED_CHECK_NS: Nanos = 100 * NANOS_PER_MS;
pub const UNDRAINED_KEEPS_UP: f64 = 0.9;
pub const UNDRAINED_MAX_NS: Nanos = 20 * NANOS_PER_MS;
/// The most the queue may fall through the check for the link's own (a
/// queue of ours paced a little below the capacity falls slowly: 35 ms to
/// 17 in 100 ms; a FIFO link's jitter moved the smoothed delay by under
/// 3 ms in the simulation's checks; tuning knob).
pub const UNDRAINED_STILL_NS: Nanos = 4 * NANOS_PER_MS;
/// Rate before the first sample (tuning knob).
pub const INITIAL_RATE_BPS: u64 = 50_000_000;
/// A path starts at this window per its round trip (the lowest plus two
/// RFC 6298 mean deviations, `Path::start_rtt`), if that is
/// faster than [`INITIAL_RATE_BPS`], up to [`START_RATE_MAX_BPS`], until
/// its pacer first holds packets back (tuning knobs: the window is RFC
/// 6928's initial ten segments, so only a LAN-like path of under 2.4 ms
/// starts faster; waiting for its first samples at the initial rate held
/// eight 100 Mbit/s paths of 0.1 ms at half their capacity for 100 ms,
/// 0.7 % of a 4 s transfer, while 64 KiB started a 30 Mbit/s path of
/// 7 ms at 75 and cost Wi-Fi + LTE and three unequal links about 1 %).
/// The cap is one startup doubling: started unpaced (1 Gbit/s), those
/// eight paths fell to a third of their capacity for a second, as the
/// scheduler, which reads the rate as what a path carries, sent
/// everything to the first one.
pub const START_WINDOW_BYTES: u64 = 10 * 1500;
pub const START_RATE_MAX_BPS: u64 = 2 * INITIAL_RATE_BPS;
/// Lowest rate (tuning knob: a path must still carry a probe's worth).
pub const MIN_RATE_BPS: u64 = 1_000_000;
/// Smoothing of the capacity estimate: gain 1 / this per sample (as RFC
/// 6298's SRTT).
pub(super) const SMOOTHING_DIV: i64 = 8;
/// The capacity a drain cuts to is the delivery rate over at least this
/// long (or a round trip), ending with the sample, when the queue grows
/// fast (the capacity fell: follow it), and over the longer span when it
/// grows slowly (we send a little above a capacity that has not moved);
/// at most [`RECENT_SAMPLES`] samples (tuning knobs: a radio link's jitter
/// moves what one 30 ms sample delivers between a quarter and more than
/// the whole of its rate; over consecutive samples only the jitter at the
/// ends counts, ±15 % over 100 ms on the lab's LTE-like link).
pub(super) const CAPACITY_SPAN_NS: Nanos = 100 * NANOS_PER_MS;
pub(super) const CAPACITY_SPAN_SLOW_NS: Nanos = 300 * NANOS_PER_MS;
pub(super) const RECENT_SAMPLES: usize = 12;
/// Shortest interval between two loss cuts (tuning knob, with the RTT).
pub(super) const LOSS_CUT_MIN_NS: Nanos = 40 * NANOS_PER_MS;
/// A link's random loss (`delay_random.rs`; tuning knobs): the packets
/// over which its rate is measured before the sums are halved (about 20 s
/// at 2,000 packets per second), the shortest span whose congestion
/// losses are weighed against it, and how many standard deviations of a
/// Poisson count above the expected random losses still pass as the
/// link's (two: a 20 Mbit/s link with 1.5 % loss sees 2 or more above its
/// mean in a tenth of its round trips, 4 or more in one in two hundred).
pub const RANDOM_WINDOW_PACKETS: u64 = 40_000;
/// Loss-free packets the random loss rate starts from (tuning knob: a
/// prior, so that two losses among the first hundred packets read as
/// 0.5 %, not 2 %; at 1.5 % loss the rate reads 1.0 % after 600 packets,
/// under two seconds at 4 Mbit/s with the queue low half the time).
pub const RANDOM_PRIOR_PACKETS: u64 = 300;
pub const RANDOM_SPAN_MIN_NS: Nanos = 100 * NANOS_PER_MS;
pub const RANDOM_Z: f64 = 2.0;
/// A sample whose packets left at most this share of the highest delivery
/// rate of the window, and arrived at least this share as fast as they
/// left, filled no buffer: its losses all count toward the random rate
/// (tuning knobs: `delay_random.rs`).
pub const RANDOM_BELOW_SHOWN: f64 = 0.8;
pub const RANDOM_DELIVERED_AS_SENT: f64 = 0.9;
/// Such a sample's losses are the link's only while a random loss of this
/// rate would give that many in its packets (with [`RANDOM_Z`] standard
/// deviations above the mean; tuning knob, `delay_random.rs`): the lab's
/// sweep draws up to 3 %, and a burst that overflowed a buffer loses a
/// run of datagrams at once (a GSO send dropped whole by a shaper: about
/// four datagrams per drop among fifty clients of 4 Mbit/s whose daemons
/// woke late on a busy machine, where random loss was learned at 2-4 %
/// on links that lose nothing at random).
pub const RANDOM_SAMPLE_RATE_MAX: f64 = 0.05;
/// Losses beyond the random rate cut at any queue when they are this
/// share of the sample's packets or more (tuning knob: a link that loses
/// a tenth of its packets at random is broken; the lab's sweep draws up
/// to 3 %, and a path paced at twice its capacity loses half).
pub const OVERFLOW_LOSS_SHARE: f64 = 0.1;

// The invariants above, checked when the crate builds.
const _: () = {
    assert!(MIN_RATE_BPS <= INITIAL_RATE_BPS && INITIAL_RATE_BPS <= START_RATE_MAX_BPS);
    assert!(STEP_MIN <= STARTUP_STEP && STARTUP_STEP <= STEP_MAX);
    assert!(STEP_MAX <= STARTUP_STEP_SHORT && SHORT_PROVEN >= 1.0);
    assert!(HEADROOM_QUEUED <= HEADROOM);
    assert!(LOSS_BETA > 0.0 && LOSS_BETA <= 1.0);
    assert!(RESUME_SHARE > 0.0 && RESUME_SHARE <= 1.0);
    assert!(REALTIME_HEADROOM > 0.0 && REALTIME_HEADROOM <= 1.0);
};
