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
//! Invariants: an idle peer (no handshake yet) holds its configuration and
//! nothing else; a peer's tunnel, once made, keeps its state until the peer
//! is removed (sessions expire inside it as for a lone server).

use ipnet::IpNet;

use crate::crypto::keys::{PresharedKey, PublicKey};
use crate::tunnel::{Tunnel, TunnelConfig};
use crate::Nanos;

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
