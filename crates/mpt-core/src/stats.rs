//! Drop reasons and tunnel-wide counters.
//!
//! Invariant: every packet the tunnel does not deliver or transmit is counted
//! under exactly one [`DropReason`]. The reason list is closed: adding a drop
//! site means adding a variant here, which makes it appear in `mpt status`.

use serde::{Deserialize, Serialize};

/// Why a packet was dropped. The `as_str` names are stable API (status JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Datagram shorter than the header or its body.
    Truncated,
    /// Unknown protocol version.
    BadVersion,
    /// Unknown packet type.
    BadType,
    /// Path id not configured, or not bound to the socket it arrived on.
    UnknownPath,
    /// Source address is not the path's configured remote.
    UnknownSource,
    /// Data body is not an IPv4/IPv6 packet.
    BadInner,
    /// Packet from the TUN is larger than the tunnel MTU.
    TooBig,
    /// No path is up to send on.
    NoPath,
    /// The socket refused the datagram (buffer full, network down).
    SendFailed,
    /// Tunnel sequence already delivered.
    Duplicate,
    /// Tunnel sequence older than the release point (its gap was skipped).
    Late,
    /// The TUN device refused the packet.
    TunWriteFailed,
    /// No session for the packet's session id (or none to send with).
    NoSession,
    /// Authentication failed: the AEAD tag does not match.
    BadTag,
    /// The packet counter was seen before or is older than the window.
    Replay,
    /// A handshake message failed authentication or was replayed.
    HandshakeFailed,
    /// Handshake initiation refused by the per-source or global rate limit.
    HandshakeRateLimited,
    /// A handshake message this side does not expect (wrong role, no
    /// pending initiation).
    HandshakeUnexpected,
    /// A NACK (loss recovery) while recovery is off on this side.
    NackUnexpected,
    /// A handshake message whose mac1 is wrong: not made with our public
    /// key (scans, garbage, another server's peers). No cryptography spent.
    HandshakeBadMac,
    /// An initiation answered with a cookie reply instead of a handshake:
    /// the server is under load and the initiation had no valid mac2.
    HandshakeCookieSent,
    /// A path challenge or response that is malformed, names no challenge
    /// of ours, or comes from another address than the challenged one.
    PathValidationFailed,
    /// An initiation not processed because the handshake answers waiting
    /// to be sent are at their bound (the event loop sends them after every
    /// receive batch, so this means a flood larger than one batch).
    HandshakeQueueFull,
    /// A packet from the TUN that would wait in the send queue longer than
    /// its bound (`queue_ms`): every path is carrying what it can (tail
    /// drop at the input, the inner TCP's congestion signal).
    QueueFull,
    /// A packet of a QoS class beyond the class's maximum rate (`max_mbit`),
    /// dropped at the input.
    ClassRate,
    /// A QoS class at its packet limit: dropped from its fattest flow (the
    /// one sending beyond its share).
    ClassFull,
    /// A QoS flow that does not answer drops, beyond its fair share of its
    /// class: dropped at the input ([`crate::qos::share`]).
    FlowShare,
    /// Dropped by CoDel (RFC 8289) to end a standing queue in the QoS stage.
    Aqm,
    /// A concentrator: a handshake from a static key that is no peer's, or
    /// a datagram whose session index names no peer.
    UnknownPeer,
    /// A concentrator: a packet from the TUN whose destination is in no
    /// peer's allowed IPs.
    NoRoute,
    /// A concentrator: an inner packet from a peer whose source address is
    /// not in that peer's allowed IPs (another peer's, or nobody's).
    SourceNotAllowed,
    /// A concentrator: an inner packet outside the peer's allowed IPs that
    /// only speaks to its link (an IPv6 link-local or unspecified source,
    /// or a link-scope multicast destination: router solicitations, MLD,
    /// neighbour discovery that a client's own TUN sends). Not an attack,
    /// so not counted as `source_not_allowed`.
    LinkLocal,
    /// A fragment (type 11) whose header is malformed: index or count out
    /// of range.
    BadFragment,
    /// A repair packet (forward error correction) whose fields are out
    /// of range.
    BadRepair,
    /// An inner packet that was cut into fragments and lost a piece: what
    /// arrived of it is dropped, counted once per packet (and once per
    /// piece that arrives after its packet was given up). At the sender:
    /// a packet whose later pieces could not leave because the recovery
    /// ring they are cut from let its copy go first.
    FragmentIncomplete,
    /// A data packet whose outer header arrived Congestion Experienced
    /// while the inner packet is not ECN-capable (RFC 6040 §4.2: only a
    /// drop conveys the congestion signal to such a transport).
    EcnCeNotEct,
    /// A session-unknown hint the initiator did not take: it names no
    /// session we seal with, a counter we did not send lately, or a session
    /// younger than a second (see `crypto::exchange`).
    SessionUnknownIgnored,
}

impl DropReason {
    pub const ALL: [DropReason; 37] = [
        Self::Truncated,
        Self::BadVersion,
        Self::BadType,
        Self::UnknownPath,
        Self::UnknownSource,
        Self::BadInner,
        Self::TooBig,
        Self::NoPath,
        Self::SendFailed,
        Self::Duplicate,
        Self::Late,
        Self::TunWriteFailed,
        Self::NoSession,
        Self::BadTag,
        Self::Replay,
        Self::HandshakeFailed,
        Self::HandshakeRateLimited,
        Self::HandshakeUnexpected,
        Self::NackUnexpected,
        Self::HandshakeBadMac,
        Self::HandshakeCookieSent,
        Self::PathValidationFailed,
        Self::HandshakeQueueFull,
        Self::QueueFull,
        Self::ClassRate,
        Self::ClassFull,
        Self::FlowShare,
        Self::Aqm,
        Self::UnknownPeer,
        Self::NoRoute,
        Self::SourceNotAllowed,
        Self::LinkLocal,
        Self::BadFragment,
        Self::BadRepair,
        Self::FragmentIncomplete,
        Self::EcnCeNotEct,
        Self::SessionUnknownIgnored,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::BadVersion => "bad_version",
            Self::BadType => "bad_type",
            Self::UnknownPath => "unknown_path",
            Self::UnknownSource => "unknown_source",
            Self::BadInner => "bad_inner",
            Self::TooBig => "too_big",
            Self::NoPath => "no_path",
            Self::SendFailed => "send_failed",
            Self::Duplicate => "duplicate",
            Self::Late => "late",
            Self::TunWriteFailed => "tun_write_failed",
            Self::NoSession => "no_session",
            Self::BadTag => "bad_tag",
            Self::Replay => "replay",
            Self::HandshakeFailed => "handshake_failed",
            Self::HandshakeRateLimited => "handshake_rate_limited",
            Self::HandshakeUnexpected => "handshake_unexpected",
            Self::NackUnexpected => "nack_unexpected",
            Self::HandshakeBadMac => "handshake_bad_mac",
            Self::HandshakeCookieSent => "handshake_cookie_sent",
            Self::PathValidationFailed => "path_validation_failed",
            Self::HandshakeQueueFull => "handshake_queue_full",
            Self::QueueFull => "queue_full",
            Self::ClassRate => "class_rate",
            Self::ClassFull => "class_full",
            Self::FlowShare => "flow_share",
            Self::Aqm => "aqm",
            Self::UnknownPeer => "unknown_peer",
            Self::NoRoute => "no_route",
            Self::SourceNotAllowed => "source_not_allowed",
            Self::LinkLocal => "link_local",
            Self::BadFragment => "bad_fragment",
            Self::BadRepair => "bad_repair",
            Self::FragmentIncomplete => "fragment_incomplete",
            Self::EcnCeNotEct => "ecn_ce_not_ect",
            Self::SessionUnknownIgnored => "session_unknown_ignored",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Counters for every drop reason.
#[derive(Debug, Clone)]
pub struct DropCounters {
    counts: [u64; DropReason::ALL.len()],
}

impl Default for DropCounters {
    fn default() -> Self {
        Self {
            counts: [0; DropReason::ALL.len()],
        }
    }
}

impl DropCounters {
    pub fn add(&mut self, reason: DropReason) {
        self.counts[reason.index()] += 1;
    }
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()]
    }
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    /// (name, count) for every reason, in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL.iter().map(|r| (r.as_str(), self.get(*r)))
    }
}

/// Tunnel-wide packet counters (both directions).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TunnelCounters {
    /// Inner packets taken from the TUN and sent on a path.
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Inner packets handed to the TUN.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Of those, real-time packets delivered on arrival (no reordering).
    pub rx_unordered: u64,
    /// Datagrams a local socket refused for now and the I/O layer held
    /// until it took them (`Tunnel::on_send_held`; not drops).
    pub send_held: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_counter() {
        let mut c = DropCounters::default();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            for _ in 0..=i {
                c.add(*r);
            }
        }
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(c.get(*r), i as u64 + 1, "{}", r.as_str());
        }
        let names: std::collections::HashSet<_> = c.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), DropReason::ALL.len());
    }
}
