//! One peer of a concentrator: its configuration, and its tunnel, made at
//! its first valid handshake.
//!
//! A peer's tunnel is an ordinary [`Tunnel`] in the responder role, built
//! from the concentrator's template: the server's paths (its sockets, no
//! remote: each peer's addresses are learned through NAT as for a lone
//! server), the peer's public and pre-shared keys, and the peer's slot in
//! the top bits of every session index it hands out, so that a datagram
//! finds its peer in O(1).
//!
//! A peer may have limits of its own ([`PeerLimits`]): a cap on the rate
//! the server sends to it on every path or on named paths (a metered LTE
//! at one site), and traffic classes that replace the server's `[qos]`.
//!
//! Invariants: an idle peer (no handshake yet) holds its configuration and
//! nothing else; a peer's tunnel, once made, keeps its state until the peer
//! is removed (sessions expire inside it as for a lone server); a path's
//! cap toward a peer is the lowest of the server path's own, the peer's
//! cap for that path name, and the peer's cap for every path.

use ipnet::IpNet;

use crate::crypto::keys::{PresharedKey, PublicKey};
use crate::qos::QosConfig;
use crate::tunnel::{Tunnel, TunnelConfig};
use crate::Nanos;

/// Limits of one peer (module documentation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerLimits {
    /// Cap on every path toward the peer, bits per second.
    pub rate_cap_bps: Option<u64>,
    /// Caps on named paths, bits per second (the server's path names).
    pub path_caps_bps: Vec<(String, u64)>,
    /// Traffic classes instead of the server's.
    pub qos: Option<QosConfig>,
}

impl PeerLimits {
    /// The cap of path `name` whose own cap is `own`.
    pub fn cap(&self, name: &str, own: Option<u64>) -> Option<u64> {
        let named = self
            .path_caps_bps
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| *c);
        [own, self.rate_cap_bps, named].into_iter().flatten().min()
    }

    /// Apply to a tunnel made from `template` (a reload changed them).
    pub fn apply(&self, t: &mut Tunnel, template: &TunnelConfig, now: Nanos) {
        for p in &template.paths {
            // The template names every path of the peer's tunnel.
            let _ = t.set_rate_cap(&p.name, self.cap(&p.name, p.rate_cap_bps));
        }
        t.set_qos(self.qos.clone().or_else(|| template.qos.clone()), now);
    }
}

/// What the configuration says about one peer.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// For logs and status (the configuration's name, else its key).
    pub name: String,
    pub public_key: PublicKey,
    pub psk: PresharedKey,
    /// The addresses the peer may send from, and to which packets from the
    /// TUN are sent through it (WireGuard's allowed IPs).
    pub allowed_ips: Vec<IpNet>,
    pub limits: PeerLimits,
}

/// One peer. See the module documentation.
pub struct Peer {
    pub cfg: PeerConfig,
    pub tunnel: Option<Box<Tunnel>>,
    /// Inner packets from this peer with a source outside its allowed IPs.
    pub source_not_allowed: u64,
    /// When the timer heap expects this peer's next deadline (stale heap
    /// entries are recognised by differing from it).
    pub deadline: Option<Nanos>,
    /// Queued in the concentrator's work list (has output to poll).
    pub touched: bool,
}

impl Peer {
    pub fn new(cfg: PeerConfig) -> Self {
        Self {
            cfg,
            tunnel: None,
            source_not_allowed: 0,
            deadline: None,
            touched: false,
        }
    }

    /// The tunnel configuration of this peer in `slot`, from the
    /// concentrator's `template` (whose security names the server's
    /// private key), with its own `seed`.
    pub fn tunnel_config(
        &self,
        template: &TunnelConfig,
        slot: u32,
        seed: [u8; 32],
    ) -> TunnelConfig {
        let mut c = template.clone();
        c.seed = seed;
        for p in &mut c.paths {
            p.remote = None;
            p.rate_cap_bps = self.cfg.limits.cap(&p.name, p.rate_cap_bps);
        }
        if let Some(q) = &self.cfg.limits.qos {
            c.qos = Some(q.clone());
        }
        if let Some(s) = c.security.as_mut() {
            s.identity.peer_public = self.cfg.public_key;
            s.identity.psk = self.cfg.psk.clone();
            s.index_slot = Some(slot);
        }
        c
    }

    /// Make the tunnel if there is none yet.
    pub fn ensure_tunnel(
        &mut self,
        template: &TunnelConfig,
        slot: u32,
        seed: [u8; 32],
        now: Nanos,
    ) {
        if self.tunnel.is_none() {
            let cfg = self.tunnel_config(template, slot, seed);
            let mut t = Tunnel::new(cfg, now);
            t.set_handshake_guarded();
            self.tunnel = Some(Box::new(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{client_peer, TestConfig};

    #[test]
    fn the_lowest_cap_applies_and_the_peer_classes_replace_the_servers() {
        let limits = PeerLimits {
            rate_cap_bps: Some(20_000_000),
            path_caps_bps: vec![("p1".into(), 5_000_000)],
            qos: Some(QosConfig::standard()),
        };
        assert_eq!(limits.cap("p0", None), Some(20_000_000));
        assert_eq!(limits.cap("p0", Some(8_000_000)), Some(8_000_000));
        assert_eq!(limits.cap("p1", None), Some(5_000_000));
        assert_eq!(PeerLimits::default().cap("p1", Some(3)), Some(3));
        let template = TestConfig::new(0, 2).secure().config();
        let mut cfg = client_peer(1);
        cfg.limits = limits;
        let c = Peer::new(cfg).tunnel_config(&template, 1, [7; 32]);
        let caps: Vec<_> = c.paths.iter().map(|p| p.rate_cap_bps).collect();
        assert_eq!(caps, vec![Some(20_000_000), Some(5_000_000)]);
        assert_eq!(c.qos, Some(QosConfig::standard()));
        assert!(c.paths.iter().all(|p| p.remote.is_none()));
    }
}
