//! The status documents a daemon answers `status` with (`mpt status
//! --json`): typed on both sides, written by the daemons, read by the CLI's
//! views and its metrics. Every struct reads leniently (`#[serde(default)]`):
//! a field a newer or older daemon lacks reads as its default, so that the
//! CLI of one version shows the status of another.
//!
//! The core's part ([`TunnelStatus`], and each path's, class's, queue's)
//! is the core's own type: the daemon serializes it, the CLI reads it back
//! as that type; no field is read by its name as a string.
//!
//! Invariants: the documents hold counters and measurements only, never
//! key material; [`STATUS_SCHEMA`] changes when a field changes meaning or
//! goes away (adding one does not).

use serde::{Deserialize, Serialize};

use mpt_core::rates::Rates;
use mpt_core::tunnel::TunnelStatus;

/// Data-plane I/O counters (batching effectiveness), in `mpt status`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct IoStats {
    pub tun_reads: u64,
    pub udp_recv_calls: u64,
    pub udp_datagrams_received: u64,
    pub udp_send_calls: u64,
    pub udp_datagrams_sent: u64,
    pub max_recv_batch: u64,
    pub max_send_batch: u64,
    /// TUN offloads active (TSO reads, GRO writes).
    pub tun_offload: bool,
    /// UDP segmentation on TUN reads and UDP coalescing on writes (USO).
    pub tun_uso: bool,
    /// UDP segmentation offload on every path socket.
    pub udp_gso: bool,
    /// UDP receive coalescing on every path socket.
    pub udp_gro: bool,
    /// TCP super-packets read and the segments cut from them.
    pub tso_super_packets: u64,
    pub tso_segments: u64,
    /// UDP super-packets read and the datagrams cut from them.
    pub uso_super_packets: u64,
    pub uso_segments: u64,
    /// Super-packets that could not be segmented (dropped).
    pub offload_errors: u64,
    /// Datagrams a path socket refused for now (its send buffer full: the
    /// local interface's queue pushing back) and held until it took them;
    /// bytes held now; datagrams dropped because the hold was full (also
    /// `send_failed` at their peer).
    pub udp_held: u64,
    pub udp_hold_bytes: u64,
    pub udp_hold_drops: u64,
}

/// Counters of the TUN write side, in `mpt status` under `io`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WriteStats {
    pub tun_writes: u64,
    /// TCP super-packets written after coalescing, and the segments merged.
    pub gro_super_packets: u64,
    pub gro_segments: u64,
    /// UDP super-packets written, and the datagrams merged.
    pub udp_gro_super_packets: u64,
    pub udp_gro_segments: u64,
}

/// One worker's counters in `mpt status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Deserialize, Default)]
#[serde(default)]
pub struct WorkerStatus {
    pub id: usize,
    /// Datagrams sealed or opened by this worker.
    pub packets: u64,
    pub bytes: u64,
    /// Pieces of batches it processed, and the datagrams per piece.
    pub jobs: u64,
    pub max_job: u64,
    /// Time spent sealing and opening, in milliseconds.
    pub busy_ms: u64,
}

/// The pool as a whole in `mpt status`.
#[derive(Debug, Clone, Serialize, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct PoolStatus {
    pub workers: usize,
    pub engage: String,
    /// Whether helpers take work now.
    pub engaged: bool,
    /// Spare cores at the last look (idle CPU plus helper work).
    pub spare_cores: f64,
    /// The loop's demand at the last look, in cores (its busy time plus
    /// helper work).
    pub demand_cores: f64,
    pub per_worker: Vec<WorkerStatus>,
}

/// The status document's schema: changes when a field changes meaning or
/// goes away (adding one does not).
pub const STATUS_SCHEMA: u32 = 1;

/// A path socket: where it is bound and the paths that use it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SocketDoc {
    pub local: String,
    pub paths: Vec<String>,
}

/// The data plane's batching and offloads: the engine's I/O counters and
/// its TUN writes, in one object.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IoDoc {
    #[serde(flatten)]
    pub io: IoStats,
    #[serde(flatten)]
    pub writes: WriteStats,
}

/// A single tunnel's status document: the core's [`TunnelStatus`] and
/// what the daemon knows around it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TunnelDoc {
    pub schema: u32,
    pub name: String,
    /// "client", "server" (a single tunnel), or what a view says it is.
    pub role: String,
    pub version: String,
    pub pid: u32,
    pub uptime_s: f64,
    pub peer_public_key: Option<String>,
    /// When the current session's handshake completed, wall clock.
    pub last_handshake_unix_s: Option<f64>,
    pub addresses: Vec<String>,
    pub control_socket: String,
    pub sockets: Vec<SocketDoc>,
    /// The tunnel's rates over the last second (each path's in its own).
    pub rates: Option<Rates>,
    pub io: Option<IoDoc>,
    pub workers: Option<PoolStatus>,
    #[serde(flatten)]
    pub tunnel: TunnelStatus,
}

/// One peer of a concentrator: who, where, its counters (and, asked for
/// one peer, its tunnel's whole status).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PeerDoc {
    pub id: u32,
    pub shard: usize,
    pub name: String,
    pub public_key: String,
    pub allowed_ips: Vec<String>,
    /// It has a session.
    pub connected: bool,
    pub paths_up: usize,
    pub paths: usize,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Drops of its tunnel, all reasons.
    pub drops: u64,
    /// Inner packets from it with a source outside its allowed IPs.
    pub source_not_allowed: u64,
    /// `mpt status --peer`: its tunnel's status (none before it connected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelStatus>,
}

/// What one shard read for another's peers, and took from them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HandoffDoc {
    pub packets_out: u64,
    pub datagrams_out: u64,
    pub taken: u64,
}

/// One shard (thread) of a concentrator.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardDoc {
    pub shard: usize,
    pub handoffs: HandoffDoc,
    /// Handoffs that could not be queued to another shard.
    pub send_failures: Option<u64>,
    pub io: Option<IoDoc>,
    /// The shard did not answer.
    pub error: Option<String>,
}

/// A concentrator's status document: its peers, one line each, and its
/// shards.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ConcentratorDoc {
    pub schema: u32,
    pub name: String,
    /// "concentrator".
    pub role: String,
    pub addresses: Vec<String>,
    pub control_socket: String,
    pub uptime_s: f64,
    pub peers_configured: usize,
    pub peers_connected: usize,
    pub peers: Vec<PeerDoc>,
    /// Drops before any peer (no route, unknown peer, ...), by reason.
    pub drops: std::collections::BTreeMap<String, u64>,
    pub cookies_sent: u64,
    /// Session-unknown hints sent for datagrams naming no peer's session.
    pub session_unknown_sent: u64,
    /// Such datagrams left without a hint: their source had one within
    /// the last 250 ms.
    pub session_unknown_spaced: u64,
    pub tun_write_failures: u64,
    /// Every shard's I/O, summed.
    pub io: Option<IoDoc>,
    pub shards: Vec<ShardDoc>,
}

/// One shard's part of a concentrator's status: its own peers, drops and
/// I/O (the leader sums them into a [`ConcentratorDoc`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardPart {
    pub shard: usize,
    pub peers: Vec<PeerDoc>,
    pub drops: std::collections::BTreeMap<String, u64>,
    pub cookies_sent: u64,
    /// Session-unknown hints sent for datagrams naming no peer's session.
    pub session_unknown_sent: u64,
    /// Such datagrams left without a hint: their source had one within
    /// the last 250 ms.
    pub session_unknown_spaced: u64,
    pub tun_write_failures: u64,
    pub io: IoDoc,
    pub handoffs: HandoffDoc,
    pub send_failures: Option<u64>,
    /// The shard did not answer.
    pub error: Option<String>,
}

impl IoDoc {
    /// Add another loop's counters (a concentrator's shards): sums, the
    /// larger of the largest batches, and an offload on if on in both.
    pub fn add(&mut self, o: &IoDoc) {
        let (a, b) = (&mut self.io, &o.io);
        for (x, y) in [
            (&mut a.tun_reads, b.tun_reads),
            (&mut a.udp_recv_calls, b.udp_recv_calls),
            (&mut a.udp_datagrams_received, b.udp_datagrams_received),
            (&mut a.udp_send_calls, b.udp_send_calls),
            (&mut a.udp_datagrams_sent, b.udp_datagrams_sent),
            (&mut a.tso_super_packets, b.tso_super_packets),
            (&mut a.tso_segments, b.tso_segments),
            (&mut a.uso_super_packets, b.uso_super_packets),
            (&mut a.uso_segments, b.uso_segments),
            (&mut a.offload_errors, b.offload_errors),
        ] {
            *x += y;
        }
        a.max_recv_batch = a.max_recv_batch.max(b.max_recv_batch);
        a.max_send_batch = a.max_send_batch.max(b.max_send_batch);
        a.tun_offload &= b.tun_offload;
        a.tun_uso &= b.tun_uso;
        a.udp_gso &= b.udp_gso;
        a.udp_gro &= b.udp_gro;
        let (w, v) = (&mut self.writes, &o.writes);
        for (x, y) in [
            (&mut w.tun_writes, v.tun_writes),
            (&mut w.gro_super_packets, v.gro_super_packets),
            (&mut w.gro_segments, v.gro_segments),
            (&mut w.udp_gro_super_packets, v.udp_gro_super_packets),
            (&mut w.udp_gro_segments, v.udp_gro_segments),
        ] {
            *x += y;
        }
    }
}

/// A daemon's status document: a single tunnel's or a concentrator's
/// (told apart by its `role`).
#[derive(Debug, Clone)]
pub enum Document {
    Tunnel(Box<TunnelDoc>),
    Concentrator(Box<ConcentratorDoc>),
}

impl Document {
    /// The document in `v`, read leniently (see the module documentation;
    /// a document that does not read at all reads as an empty tunnel's).
    pub fn read(v: &serde_json::Value) -> Self {
        #[derive(Deserialize)]
        struct Role {
            #[serde(default)]
            role: String,
        }
        let concentrator = Role::deserialize(v).is_ok_and(|r| r.role == "concentrator");
        if concentrator {
            Document::Concentrator(Box::new(
                ConcentratorDoc::deserialize(v).unwrap_or_default(),
            ))
        } else {
            Document::Tunnel(Box::new(TunnelDoc::deserialize(v).unwrap_or_default()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_reads_back_as_what_it_was_and_missing_fields_default() {
        let mut d = TunnelDoc {
            schema: STATUS_SCHEMA,
            name: "mpt0".into(),
            role: "client".into(),
            ..TunnelDoc::default()
        };
        d.tunnel.mtu = 1400;
        d.tunnel.drops.insert("replay".into(), 3);
        let v = serde_json::to_value(&d).unwrap();
        // The core's fields sit at the top level, beside the daemon's.
        assert_eq!(
            (v["mtu"].as_u64(), v["name"].as_str()),
            (Some(1400), Some("mpt0"))
        );
        let Document::Tunnel(back) = Document::read(&v) else {
            panic!("a tunnel's document");
        };
        assert_eq!((back.tunnel.mtu, back.tunnel.drops["replay"]), (1400, 3));
        // An older daemon's document (fields missing) and a newer one's
        // (fields unknown here) both read.
        let Document::Tunnel(old) = Document::read(&json!({"name": "x", "new_field": [1]})) else {
            panic!("a tunnel's document");
        };
        assert_eq!((old.name.as_str(), old.tunnel.paths.len()), ("x", 0));
        let c = json!({"role": "concentrator", "peers": [{"name": "a", "connected": true}]});
        let Document::Concentrator(c) = Document::read(&c) else {
            panic!("a concentrator's document");
        };
        assert!(c.peers[0].connected && c.peers[0].tunnel.is_none());
        assert_eq!(
            crate::refusal(&json!({"error": "no such peer"})).as_deref(),
            Some("no such peer")
        );
        assert_eq!(crate::refusal(&v), None);
    }
}
