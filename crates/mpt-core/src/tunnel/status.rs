//! The tunnel's status document (the core's part of `mpt status --json`).
//!
//! Invariant: the status holds counters and measurements only — never key
//! material (security status shows mode, cipher, session age and counts).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Tunnel;
use crate::crypto::state::SecurityStatus;
use crate::path::PathStatus;
use crate::queue::QueueStats;
use crate::reorder::ReorderStats;
use crate::stats::TunnelCounters;
use crate::{Nanos, PathId};

/// Reorder buffer part of the status.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ReorderStatus {
    pub window: u64,
    pub held_now: usize,
    /// Bytes of packets held now, and the bound on them.
    pub held_bytes: usize,
    pub bytes_max: usize,
    pub next_seq: u64,
    /// The margin a gap is waited for beyond its paths' delays, ms
    /// (`crate::release::LateMargin`).
    pub late_margin_ms: f64,
    /// The longest a packet is held now, ms: `max_delay`, plus with loss
    /// recovery the wait for a resend (`Recovery::hold`).
    pub hold_ms: f64,
    #[serde(flatten)]
    pub stats: ReorderStats,
}

/// Send queue part of the status.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct QueueStatus {
    pub packets_now: usize,
    /// Bytes waiting now, and the cap on them.
    pub bytes_now: usize,
    pub bytes_max: usize,
    /// The bound: longest expected wait admitted, milliseconds.
    pub max_ms: f64,
    #[serde(flatten)]
    pub stats: QueueStats,
}

/// Whole-tunnel status.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct TunnelStatus {
    pub paths: Vec<PathStatus>,
    pub paths_up: usize,
    pub scheduler: Cow<'static, str>,
    pub release_policy: Cow<'static, str>,
    pub mtu: usize,
    pub counters: TunnelCounters,
    /// Inner packets larger than one datagram (`fragment.rs`).
    pub fragments: FragmentStatus,
    pub reorder: ReorderStatus,
    /// `None` when the scheduler does not pace (static weights).
    pub queue: Option<QueueStatus>,
    /// `None` in plaintext mode.
    pub security: Option<SecurityStatus>,
    /// Drop counters by reason.
    pub drops: BTreeMap<Cow<'static, str>, u64>,
    /// Loss recovery counters; `None` when recovery is off.
    pub recovery: Option<super::RecoveryStats>,
    /// Forward error correction counters; `None` when FEC is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fec: Option<super::fec::FecStats>,
    /// Traffic classes, in matching order; `None` with QoS off.
    pub qos: Option<Vec<crate::qos::ClassStatus>>,
    /// The peer's paths whose names match none of ours (`pairing.rs`).
    pub unmatched_peer_paths: Vec<PeerPath>,
    /// ECN carried across the tunnel on receipt (RFC 6040, `ecn.rs`).
    pub ecn: super::ecn::EcnStats,
}

/// Fragmentation: what one datagram carries, pieces sent and received,
/// packets reassembled (in order, and late: completed by a piece that came
/// after its gap was given up), packets parked for late pieces now (those
/// given up are in the drops, as `fragment_incomplete`).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct FragmentStatus {
    pub datagram_body: usize,
    pub tx_pieces: u64,
    pub rx_pieces: u64,
    pub reassembled: u64,
    pub reassembled_late: u64,
    pub parked_now: usize,
    /// Bytes held for reassembly (the packet under way and the parked
    /// pieces), and the bound on them.
    pub held_bytes: usize,
    pub held_bytes_max: usize,
    /// The MSS bound of routed TCP, IPv4 and IPv6 (`None`: no clamp).
    pub mss_clamp: Option<(u16, u16)>,
    /// Routed TCP SYNs whose MSS was lowered.
    pub mss_clamped: u64,
}

/// One of the peer's paths, by its id and name.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PeerPath {
    pub id: u8,
    pub name: String,
}

impl Tunnel {
    /// Snapshot for `mpt status`.
    pub fn status(&self, now: Nanos) -> TunnelStatus {
        TunnelStatus {
            paths: self
                .paths
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.removed)
                .map(|(i, p)| {
                    let (s, admin_down) = (&p.sender, &p.admin_down);
                    let mut st = p.status(now);
                    st.id = i as PathId;
                    st.sending = self.paced.then(|| {
                        let mut ss = s.status(now);
                        ss.fill_ms = self.qos.is_some().then(|| {
                            self.fill_bound(i as PathId) as f64 / crate::NANOS_PER_MS as f64
                        });
                        ss
                    });
                    st.admin_down = *admin_down;
                    st.peer_path_id = self.pairing.peer(i as PathId);
                    st
                })
                .collect(),
            paths_up: self.paths.iter().filter(|p| p.up).count(),
            scheduler: self.sched.name().into(),
            release_policy: self.policy.name().into(),
            mtu: self.mtu,
            counters: self.counters.clone(),
            fragments: self.fragment_status(),
            reorder: ReorderStatus {
                window: self.reorder.capacity(),
                held_now: self.reorder.held(),
                held_bytes: self.reorder.held_bytes(),
                bytes_max: self.reorder.bytes_max(),
                next_seq: self.reorder.next_seq(),
                late_margin_ms: self.late_margin_ms(),
                hold_ms: self.reorder.max_delay() as f64 / crate::NANOS_PER_MS as f64,
                stats: self.reorder.stats().clone(),
            },
            queue: (self.paced || self.queue.stats().staged > 0).then(|| QueueStatus {
                packets_now: self.queue.packets(),
                bytes_now: self.queue.total_bytes(),
                bytes_max: self.queue.max_bytes(),
                max_ms: self.queue_max as f64 / crate::NANOS_PER_MS as f64,
                stats: self.queue.stats().clone(),
            }),
            security: self.crypto.as_ref().map(|c| c.status(now)),
            drops: self.drops.iter().map(|(k, n)| (k.into(), n)).collect(),
            recovery: self.recovery_stats().cloned(),
            fec: self.fec_stats(),
            qos: self
                .qos
                .as_ref()
                .map(|q| q.status(&self.realtime_waiting())),
            unmatched_peer_paths: self
                .unmatched_peer_paths()
                .into_iter()
                .map(|(id, name)| PeerPath { id, name })
                .collect(),
            ecn: self.ecn_in.stats,
        }
    }
}
