//! [`SenderStatus`]: what the sender knows of one path, as `mpt status`
//! shows it (a plain record filled by [`super::PathSender::status`]).
//!
//! Invariants: every rate is in Mbit/s and every delay in ms, as the
//! field names say; `None` where the sender has no measurement yet.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What the sender knows of one path, as shown by `mpt status`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SenderStatus {
    /// The rate controller's state (`startup`, `grow`, `hold`, `drain` for
    /// the default [`super::TargetDelay`]; `probe-bw` for [`super::ProbeBw`]; `off`).
    pub control: Cow<'static, str>,
    /// Estimated capacity us → peer.
    pub bandwidth_mbps: Option<f64>,
    /// Rate the path is paced at (`None`: not paced).
    pub pacing_mbps: Option<f64>,
    /// Configured cap (`rate_mbit`).
    pub cap_mbps: Option<f64>,
    /// Delivery rate of the last sample, as the peer received it.
    pub delivered_mbps: Option<f64>,
    /// What was sent on the path while the packets of the last sample
    /// left (one round trip and the queue before it): above the delivery
    /// rate while a queue grows, the queue is ours.
    pub sent_then_mbps: Option<f64>,
    /// Queueing delay the peer reported.
    pub queueing_ms: Option<f64>,
    /// The standing queue the scheduler expects a packet sent now to meet
    /// at the path's bottleneck (above 10 ms; the report brought forward
    /// if the path went nearly quiet since, see
    /// [`super::PathSender::projected_queue_ns`]).
    pub queue_ahead_ms: Option<f64>,
    /// RFC 3550 jitter the peer reported with the last sample.
    pub jitter_ms: Option<f64>,
    /// The queueing delay the rate control holds the bottleneck to
    /// (`ecf`'s target: 5 ms plus the path's jitter, or a radio link's).
    pub target_ms: Option<f64>,
    /// The queueing delay the link holds whatever our rate (a link that
    /// keeps its packets in order behind late ones: its jitter under
    /// load), learned from cuts that did not drain it; the target counts
    /// above it.
    pub link_queue_ms: Option<f64>,
    /// The link's random loss, percent: its losses with an empty queue
    /// over the packets that met one (`delay_random.rs`).
    pub random_loss_pct: Option<f64>,
    /// Losses the peer counted as congestion that the random loss
    /// explained, so the rate was not cut for them.
    pub losses_excused: u64,
    /// With QoS: how long this path's queue in mpt may grow before what
    /// follows waits in the QoS stage (its delay gap to the slowest usable
    /// path, plus a margin that grows with its jitter).
    pub fill_ms: Option<f64>,
    pub samples: u64,
    /// Cuts of the estimate for a standing queue or congestion loss.
    pub cuts: u64,
}
