//! Per-path state: liveness, sequence numbers, counters and measurements.
//!
//! Measurements follow the usual standards:
//! * RTT: smoothed RTT and RTT variation per RFC 6298 §2 (α = 1/8, β = 1/4),
//!   from probe/echo pairs with the echoer's hold time subtracted (as NTP and
//!   TWAMP, RFC 5357, do);
//! * jitter: interarrival jitter per RFC 3550 §6.4.1 (gain 1/16) over the
//!   one-way transit times of all packets on the path;
//! * loss: receiver side from gaps in the per-path sequence number (extended
//!   to 64 bits like RTP's extended highest sequence number); sender side
//!   from the peer's receiver reports carried in probes and echoes.
//!
//! Liveness, each direction on its own, is in `liveness.rs`.
//!
//! Invariants:
//! * a path is `up` (carries data) only if the peer's latest report, no
//!   older than `dead`, says that it hears us on it, and no send on it
//!   failed hard since it was last heard; what we hear from the peer on it
//!   is tracked apart (`rx_up`);
//! * counters only grow; measurements are `None` until the first sample.

mod liveness;
mod stall;
mod status;

pub use stall::{StallWatch, STALL_MIN_NS};
pub use status::{OwdAboveMin, PathStatus};

use std::net::SocketAddr;

use crate::estimate::{Estimates, PathMeters};
use crate::pace::FEEDBACK_INTERVAL_NS;
use crate::qos::meter::DelayHistogram;
use crate::rtt::SmoothedRtt;
use crate::wire::{ReportBody, QUEUEING_UNKNOWN};
use crate::{Nanos, NANOS_PER_MS};

/// Packets per loss measurement interval (tuning knob).
const LOSS_INTERVAL_PACKETS: u64 = 200;
/// Mean deviations above the lowest round trip a path's start is sized
/// for (tuning knob: a link of 5 ms with 7.8 ms of jitter showed round
/// trips under 2.4 ms and started as a LAN at ten times its rate).
const START_RTT_DEVIATIONS: u64 = 2;
/// Longest loss interval when few packets flow (tuning knob).
const LOSS_INTERVAL_MAX: Nanos = 1_000 * NANOS_PER_MS;
/// Gain of the smoothed loss estimate per interval (tuning knob).
const LOSS_EWMA_GAIN: f64 = 0.25;

/// Static configuration of one path, as the core needs it.
#[derive(Debug, Clone)]
pub struct PathConfig {
    pub name: String,
    /// Which local socket this path uses (index chosen by the I/O layer).
    pub local_key: usize,
    /// Local bind address (for status output only).
    pub local: SocketAddr,
    /// Where the peer listens for this path; `None` for a server that
    /// learns it from authenticated packets.
    pub remote: Option<SocketAddr>,
    /// Relative share of outgoing packets (static-weight scheduling).
    pub weight: u32,
    /// Most this path may carry, bits per second (`rate_mbit`): a cap on
    /// the learned rate for metered or known links.
    pub rate_cap_bps: Option<u64>,
    /// Carries data only while no other path is up (`backup = true`).
    pub backup: bool,
    /// Interval between probes on this path.
    pub keepalive: Nanos,
    /// Silence after which the path is declared down.
    pub dead: Nanos,
}

/// Live state of one path.
#[derive(Debug)]
pub struct PathState {
    pub cfg: PathConfig,
    /// The peer's current address on this path (configured or learned).
    pub remote: Option<SocketAddr>,
    /// Usable for sending (see `liveness.rs`).
    pub up: bool,
    /// We hear the peer on this path (receive direction up).
    pub rx_up: bool,
    pub last_rx: Option<Nanos>,
    /// When the peer last reported (on any path) whether it hears us here.
    pub report_at: Option<Nanos>,
    /// The peer's send timestamp of that report (orders reports).
    report_sent: u64,
    /// A new address of the peer waiting for validation (server).
    pub challenge: Option<Challenge>,
    /// The newest authentic packet accepted on this path, as (session
    /// index, counter): what a learning path's next address must be newer
    /// than (`tunnel/address.rs`).
    pub newest_rx: Option<(u32, u64)>,
    /// Token of a path challenge to return (client).
    pub response_due: Option<[u8; crate::wire::PATH_TOKEN_LEN]>,
    pub next_probe_at: Nanos,
    pub probe_due: bool,
    /// When the last data packet left on this path, until a tail report
    /// followed it (see [`crate::tunnel`]'s control timers).
    pub tail_since: Option<Nanos>,
    /// Data out on the path that no report covers yet (`stall.rs`).
    pub stall: StallWatch,
    /// Pending echo: (probe timestamp, probe arrival time).
    pub echo_due: Option<(u32, Nanos)>,
    /// Peer said it hears us (from the latest probe/echo flags).
    pub peer_hears_us: bool,
    /// A send on this path failed hard (network unreachable, link down);
    /// cleared when something is heard on the path again.
    pub send_blocked: bool,
    pub tx_seq: u32,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    rx_first_seq: Option<u64>,
    rx_highest_seq: u64,
    rx_out_of_order: u64,
    /// Round trips, smoothed (RFC 6298).
    rtt: SmoothedRtt,
    rtt_min: Option<Nanos>,
    rtt_latest: Option<Nanos>,
    owd_min: Option<i64>,
    /// One-way delay above the path's minimum, per packet (percentiles
    /// whatever the clock offset between the peers).
    owd_above_min: DelayHistogram,
    /// Sum of those delays, ns (mean = sum / the histogram's total).
    owd_above_min_sum_ns: u128,
    /// Delivery rate, queueing delay and loss by cause, peer → us.
    meters: PathMeters,
    peer_rx_packets: u64,
    peer_rx_seq: u32,
    /// Our path sequence number when the peer last (re)started: its
    /// reports count our packets from about there.
    peer_seq_base: u32,
    /// Report at the start of the current loss interval: (packets, seq, time).
    loss_mark: Option<(u64, u32, Nanos)>,
    /// Smoothed fraction of our packets lost on this path (from reports).
    tx_loss_ewma: f64,
    /// Factor applied to the configured weight by loss adaptation (1 = none).
    pub weight_factor: f64,
    /// A receiver report is due on this path (data arrived on it).
    pub report_due: bool,
    /// Data arrived within [`FEEDBACK_INTERVAL_NS`] of the last report: a
    /// report is due when the interval is over, data or not (the peer's
    /// stall watch, `stall.rs`, waits for it).
    report_owed: bool,
    /// Receiver reports about this path sent on another path (the peer did
    /// not hear us here), and reports about it that came on another path
    /// (we did not hear the peer here): `PacketType::ReportFor`.
    pub reports_carried_out: u64,
    pub reports_carried_in: u64,
    /// When the last receiver report left on this path.
    report_sent_at: Option<Nanos>,
    pub ups: u64,
    pub downs: u64,
}

impl PathState {
    pub fn new(cfg: PathConfig, now: Nanos) -> Self {
        Self {
            remote: cfg.remote,
            cfg,
            up: false,
            rx_up: false,
            last_rx: None,
            report_at: None,
            report_sent: 0,
            challenge: None,
            newest_rx: None,
            response_due: None,
            next_probe_at: now,
            probe_due: true,
            tail_since: None,
            stall: StallWatch::default(),
            echo_due: None,
            peer_hears_us: false,
            send_blocked: false,
            tx_seq: 0,
            tx_packets: 0,
            tx_bytes: 0,
            rx_packets: 0,
            rx_bytes: 0,
            rx_first_seq: None,
            rx_highest_seq: 0,
            rx_out_of_order: 0,
            rtt: SmoothedRtt::default(),
            rtt_min: None,
            rtt_latest: None,
            owd_min: None,
            owd_above_min: DelayHistogram::default(),
            owd_above_min_sum_ns: 0,
            meters: PathMeters::default(),
            peer_rx_packets: 0,
            peer_rx_seq: 0,
            peer_seq_base: 0,
            loss_mark: None,
            tx_loss_ewma: 0.0,
            weight_factor: 1.0,
            report_due: false,
            report_owed: false,
            reports_carried_out: 0,
            reports_carried_in: 0,
            report_sent_at: None,
            ups: 0,
            downs: 0,
        }
    }

    /// Take the next per-path sequence number and count a transmission.
    pub fn on_transmit(&mut self, len: usize) -> u32 {
        let s = self.tx_seq;
        self.tx_seq = self.tx_seq.wrapping_add(1);
        self.tx_packets += 1;
        self.tx_bytes += len as u64;
        s
    }

    /// Account an authentic packet that arrived at `now`, with its per-path
    /// sequence number and the one-way transit time (arrival wall time minus
    /// send timestamp; may be negative between unsynchronised clocks).
    /// Returns the path sequence numbers this arrival shows lost (a path
    /// is FIFO): the first (widened) and how many.
    pub fn on_receive(
        &mut self,
        now: Nanos,
        len: usize,
        path_seq: u16,
        transit_ns: i64,
    ) -> Option<(u64, u64)> {
        self.last_rx = Some(now);
        self.send_blocked = false;
        self.rx_packets += 1;
        self.rx_bytes += len as u64;
        // Extend the 16-bit sequence around the highest seen (RFC 3550 §A.1).
        let ext = match self.rx_first_seq {
            None => {
                self.rx_first_seq = Some(u64::from(path_seq));
                self.rx_highest_seq = u64::from(path_seq);
                u64::from(path_seq)
            }
            Some(_) => crate::wire::widen_u16(path_seq, self.rx_highest_seq),
        };
        let mut lost = 0;
        if ext > self.rx_highest_seq {
            lost = ext - self.rx_highest_seq - 1;
            self.rx_highest_seq = ext;
        } else if self.rx_packets > 1 && ext < self.rx_highest_seq {
            self.rx_out_of_order += 1;
        }
        let min = self.owd_min.map_or(transit_ns, |m| m.min(transit_ns));
        self.owd_min = Some(min);
        let above = transit_ns.saturating_sub(min).max(0) as Nanos;
        self.owd_above_min.record(above);
        self.owd_above_min_sum_ns += u128::from(above);
        self.meters.on_packet(now, len, transit_ns, lost);
        (lost > 0).then(|| (ext - lost, lost))
    }

    /// A data packet arrived at `now`: a receiver report is due once
    /// [`FEEDBACK_INTERVAL_NS`] has passed since the last.
    pub fn on_data(&mut self, now: Nanos) {
        if self
            .report_sent_at
            .is_none_or(|t| now >= t + FEEDBACK_INTERVAL_NS)
        {
            self.report_due = true;
        } else {
            self.report_owed = true;
        }
    }

    /// When a report owed for data that arrived too soon after the last
    /// one falls due (`None`: none is owed).
    pub fn report_owed_at(&self) -> Option<Nanos> {
        let t = self.report_sent_at?;
        (self.report_owed && !self.report_due).then_some(t + FEEDBACK_INTERVAL_NS)
    }

    /// Make an owed report due if its time has come.
    pub fn owe_report(&mut self, now: Nanos) {
        if self.report_owed_at().is_some_and(|t| now >= t) {
            self.report_owed = false;
            self.report_due = true;
        }
    }

    /// The receiver report to send on this path now (counts as sent).
    pub fn report_body(&mut self, now: Nanos, hearing_mask: u32) -> ReportBody {
        self.report_due = false;
        self.report_owed = false;
        self.report_sent_at = Some(now);
        let est = self.meters.estimates(now);
        let (rx_packets, rx_path_seq) = self.report();
        ReportBody {
            rx_bytes: self.rx_bytes,
            rx_packets,
            rx_path_seq,
            hearing_mask,
            queueing_us: est.queueing_ns.map_or(QUEUEING_UNKNOWN, |q| {
                (q / 1_000).min(u64::from(QUEUEING_UNKNOWN - 1)) as u32
            }),
            lost_link: est.loss.link as u32,
            lost_congestion: est.loss.congestion as u32,
            jitter_us: est.jitter_ns.map_or(QUEUEING_UNKNOWN, |j| {
                (j / 1_000).min(u64::from(QUEUEING_UNKNOWN - 1)) as u32
            }),
        }
    }

    /// Lowest RTT measured on the path.
    pub fn rtt_min(&self) -> Option<Nanos> {
        self.rtt_min
    }

    /// The round trip a path's start is sized for: the lowest plus
    /// `START_RTT_DEVIATIONS` (two) RFC 6298 mean deviations, not its luckiest.
    pub fn start_rtt(&self) -> Option<Nanos> {
        let dev = self.rtt.var().saturating_mul(START_RTT_DEVIATIONS);
        self.rtt_min.map(|m| m.saturating_add(dev))
    }

    /// What this side measures of the path's receive direction.
    pub fn rx_estimates(&self, now: Nanos) -> Estimates {
        self.meters.estimates(now)
    }

    /// The peer-to-us one-way delay's floor and recent peak, ns. Both hold
    /// the unknown offset of the peer's clock, the same on every path of
    /// one peer, so only differences between paths mean anything
    /// ([`crate::release`]).
    pub fn rx_delay_range(&self, now: Nanos) -> Option<(i64, i64)> {
        let d = &self.meters.delay;
        Some((d.floor_ns(now)?, d.peak_ns(now)?))
    }

    /// An RTT sample from an echo (RFC 6298 §2.2–2.3).
    pub fn on_rtt_sample(&mut self, rtt: Nanos) {
        self.rtt_latest = Some(rtt);
        self.rtt_min = Some(self.rtt_min.map_or(rtt, |m| m.min(rtt)));
        self.rtt.on_sample(rtt);
    }

    /// The peer's receiver report about our packets on this path.
    /// Returns whether the smoothed loss estimate changed. An interval
    /// ends after `LOSS_INTERVAL_PACKETS` packets, or after
    /// `LOSS_INTERVAL_MAX` with at least a few, so that a path carrying
    /// little traffic still gets fresh estimates.
    pub fn on_peer_report(&mut self, now: Nanos, rx_packets: u64, rx_path_seq: u32) -> bool {
        self.peer_rx_packets = rx_packets;
        self.peer_rx_seq = rx_path_seq;
        let Some((p0, s0, t0)) = self.loss_mark else {
            self.loss_mark = Some((rx_packets, rx_path_seq, now));
            return false;
        };
        let expected = u64::from(rx_path_seq.wrapping_sub(s0));
        if expected > u64::from(u32::MAX / 2) {
            // The peer restarted or reports went backwards: start over.
            self.loss_mark = Some((rx_packets, rx_path_seq, now));
            return false;
        }
        let long = now.saturating_sub(t0) >= LOSS_INTERVAL_MAX && expected >= 5;
        if expected < LOSS_INTERVAL_PACKETS && !long {
            return false;
        }
        let received = rx_packets.saturating_sub(p0).min(expected);
        let interval = 1.0 - received as f64 / expected as f64;
        self.tx_loss_ewma += LOSS_EWMA_GAIN * (interval - self.tx_loss_ewma);
        self.loss_mark = Some((rx_packets, rx_path_seq, now));
        true
    }

    /// The peer restarted: its per-path sequence numbers start again.
    pub fn peer_restarted(&mut self) {
        self.rx_first_seq = None;
        self.rx_highest_seq = 0;
        self.peer_rx_packets = 0;
        self.peer_rx_seq = 0;
        self.peer_seq_base = self.tx_seq;
        self.reset_loss();
    }

    /// Forget the loss history (the path just came back up: what was lost
    /// while it was down says nothing about it now).
    pub fn reset_loss(&mut self) {
        self.tx_loss_ewma = 0.0;
        self.loss_mark = None;
    }

    /// Smoothed round-trip time (RFC 6298), once measured.
    pub fn srtt(&self) -> Option<Nanos> {
        self.rtt.smoothed()
    }

    /// RFC 6298's retransmission timeout of the round trips (SRTT + 4
    /// RTTVAR), once measured.
    pub fn rtt_timeout(&self) -> Option<Nanos> {
        self.rtt.timeout()
    }

    /// Smoothed loss of our packets on this path (0..1).
    pub fn tx_loss_recent(&self) -> f64 {
        self.tx_loss_ewma
    }

    /// Receiver report for the peer: (packets received, highest path seq).
    pub fn report(&self) -> (u64, u32) {
        (self.rx_packets, self.rx_highest_seq as u32)
    }

    /// Packets the peer sent us on this path that never arrived.
    pub fn rx_lost(&self) -> u64 {
        match self.rx_first_seq {
            None => 0,
            Some(first) => self
                .rx_highest_seq
                .saturating_sub(first)
                .saturating_add(1)
                .saturating_sub(self.rx_packets),
        }
    }

    /// Snapshot for status output.
    pub fn status(&self, now: Nanos) -> PathStatus {
        let ms = |n: Nanos| n as f64 / NANOS_PER_MS as f64;
        let rx_expected = self.rx_packets.saturating_add(self.rx_lost());
        // What the peer could have received since it (re)started; a report
        // about an earlier packet (one it counted before we heard of its
        // restart) reads as no loss.
        let since_base = self.peer_rx_seq.wrapping_sub(self.peer_seq_base);
        let peer_expected = if since_base > u32::MAX / 2 {
            self.peer_rx_packets
        } else {
            u64::from(since_base) + 1
        };
        let est = self.meters.estimates(now);
        PathStatus {
            name: self.cfg.name.clone(),
            state: if self.up { "up" } else { "down" }.into(),
            local: self.cfg.local.to_string(),
            remote: self
                .remote
                .map_or_else(|| "(learning)".to_string(), |r| r.to_string()),
            weight: self.cfg.weight,
            weight_factor: self.weight_factor,
            backup: self.cfg.backup,
            admin_down: false,
            peer_path_id: None,
            id: 0,
            tx_packets: self.tx_packets,
            tx_bytes: self.tx_bytes,
            rx_packets: self.rx_packets,
            rx_bytes: self.rx_bytes,
            rtt_ms: self.rtt.smoothed().map(ms),
            rtt_var_ms: self.rtt.smoothed().map(|_| ms(self.rtt.var())),
            rtt_min_ms: self.rtt_min.map(ms),
            rtt_latest_ms: self.rtt_latest.map(ms),
            owd_ms: (self.meters.jitter.last_transit_ns()).map(|o| o as f64 / NANOS_PER_MS as f64),
            owd_min_ms: self.owd_min.map(|o| o as f64 / NANOS_PER_MS as f64),
            owd_above_min: (self.owd_above_min.total() > 0).then(|| OwdAboveMin {
                mean_ms: self.owd_above_min_sum_ns as f64
                    / self.owd_above_min.total() as f64
                    / NANOS_PER_MS as f64,
                percentiles: self.owd_above_min.percentiles(),
                samples: self.owd_above_min.total(),
            }),
            owd_clocks: match (self.owd_min, self.rtt_min) {
                (Some(o), Some(r)) => Some(if (0..=r as i64).contains(&o) {
                    "consistent".into()
                } else {
                    "offset".into()
                }),
                _ => None,
            },
            jitter_ms: self.meters.jitter.jitter_ns().map(ms),
            rx_lost: self.rx_lost(),
            rx_loss: if rx_expected > 0 {
                self.rx_lost() as f64 / rx_expected as f64
            } else {
                0.0
            },
            tx_loss: if self.peer_rx_packets > 0 {
                peer_expected.saturating_sub(self.peer_rx_packets) as f64 / peer_expected as f64
            } else {
                0.0
            },
            tx_loss_recent: self.tx_loss_ewma,
            rx_reordered: self.rx_out_of_order,
            rx_rate_mbps: est.rate_bps.map(|b| b as f64 / 1e6),
            rx_queueing_ms: est.queueing_ns.map(ms),
            rx_lost_by_cause: est.loss,
            last_heard_ms: self.last_rx.map(|t| ms(now.saturating_sub(t))),
            receiving: self.rx_up,
            peer_hears_us: self.peer_hears_us,
            validating: self.challenge.map(|c| c.addr.to_string()),
            ups: self.ups,
            downs: self.downs,
            reports_carried_out: self.reports_carried_out,
            reports_carried_in: self.reports_carried_in,
            stalled: self.stall.stalled,
            stalls: self.stall.stalls,
            sending: None,
            rates: None,
        }
    }
}

/// A path challenge in flight: the peer's candidate address and the token
/// it must return from there (RFC 9000 §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    pub addr: SocketAddr,
    pub token: [u8; crate::wire::PATH_TOKEN_LEN],
    /// When the challenge was last sent (`None`: due now).
    pub sent_at: Option<Nanos>,
    pub sends: u32,
}

#[cfg(test)]
mod tests;
