//! The status document of one path (`mpt status`, `--json`): what
//! `PathState::status` reports, with the fields the daemon fills in.
//!
//! Invariants: every field has a default, so a document from an older
//! daemon still parses (`#[serde(default)]`); durations are in ms.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::estimate::LossSplit;
use crate::qos::meter::DelayPercentiles;
use crate::PathId;

/// One-way delay above a path's minimum: mean and percentiles.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct OwdAboveMin {
    pub mean_ms: f64,
    #[serde(flatten)]
    pub percentiles: DelayPercentiles,
    pub samples: u64,
}

/// Status of one path, as shown by `mpt status`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PathStatus {
    /// This side's id of the path (the index `mpt` uses internally; ids
    /// of removed paths are not listed).
    pub id: PathId,
    pub name: String,
    pub state: Cow<'static, str>,
    pub local: String,
    pub remote: String,
    pub weight: u32,
    /// Share of `weight` in use after loss adaptation (1 = all of it).
    pub weight_factor: f64,
    /// Carries data only while no other path is up.
    pub backup: bool,
    /// Taken out of use by an operator (`mpt path NAME down`).
    pub admin_down: bool,
    /// The peer's id of this path (its own numbering), once paired by
    /// name or by where its packets arrive.
    pub peer_path_id: Option<u8>,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Smoothed RTT (RFC 6298).
    pub rtt_ms: Option<f64>,
    pub rtt_var_ms: Option<f64>,
    pub rtt_min_ms: Option<f64>,
    pub rtt_latest_ms: Option<f64>,
    /// Latest one-way delay peer → us (needs synchronised clocks).
    pub owd_ms: Option<f64>,
    pub owd_min_ms: Option<f64>,
    /// Distribution of each packet's one-way delay above the path's
    /// minimum so far, since start: independent of the clock offset
    /// between the peers (add `owd_min_ms` for absolute delays when the
    /// clocks agree, as in the lab).
    pub owd_above_min: Option<OwdAboveMin>,
    /// Whether the one-way delays can be taken as absolute: "consistent"
    /// when the minimum lies within 0..RTT_min (true of any synchronised
    /// clocks, as in the lab), "offset" when it does not (the clocks
    /// differ: only `owd_above_min` and the bound RTT/2 hold).
    pub owd_clocks: Option<Cow<'static, str>>,
    /// RFC 3550 interarrival jitter peer → us.
    pub jitter_ms: Option<f64>,
    /// Packets lost peer → us (per-path sequence gaps).
    pub rx_lost: u64,
    /// Fraction lost peer → us.
    pub rx_loss: f64,
    /// Fraction lost us → peer (from the peer's reports), since start.
    pub tx_loss: f64,
    /// Smoothed recent loss us → peer (drives loss-adaptive weights).
    pub tx_loss_recent: f64,
    /// Packets that arrived below the highest per-path sequence.
    pub rx_reordered: u64,
    /// Delivery rate peer → us (the path's capacity while saturated).
    pub rx_rate_mbps: Option<f64>,
    /// Queueing delay peer → us: smoothed one-way delay above its floor
    /// (exact without synchronised clocks).
    pub rx_queueing_ms: Option<f64>,
    /// Packets lost peer → us, by cause (link: no queue stood).
    pub rx_lost_by_cause: LossSplit,
    /// Time since anything was heard on the path.
    pub last_heard_ms: Option<f64>,
    /// We hear the peer on this path (our receive direction is up).
    pub receiving: bool,
    /// The peer's latest report: it hears us on this path.
    pub peer_hears_us: bool,
    /// A new peer address being validated before traffic moves there.
    pub validating: Option<String>,
    pub ups: u64,
    pub downs: u64,
    /// Receiver reports about this path sent on another path, because the
    /// peer did not hear us on it, and reports about it received on
    /// another path, because we did not hear the peer on it (its reverse
    /// direction out: the working direction keeps its rate control).
    pub reports_carried_out: u64,
    pub reports_carried_in: u64,
    /// Data sent on the path has gone uncovered by the peer's reports for
    /// longer than its round trips explain (`path/stall.rs`): what it
    /// carried last was sent again on another path. How often it happened.
    pub stalled: bool,
    pub stalls: u64,
    /// The sender's model of the path (path-aware scheduling only).
    pub sending: Option<crate::pace::SenderStatus>,
    /// Bits and packets per second over the last second (the daemon's
    /// meter fills it in).
    pub rates: Option<crate::rates::Rates>,
}
