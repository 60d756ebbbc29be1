//! Changing a configured peer in place (a reload): its name, allowed IPs,
//! pre-shared key and limits, without touching the other peers.
//!
//! Invariants:
//! * the allowed IPs change atomically: either every new prefix is the
//!   peer's and every old one that is not in the new list is gone, or (a
//!   prefix held by another peer) nothing changed;
//! * a new pre-shared key ends the peer's sessions at once (its tunnel
//!   goes, as at a removal, but the peer stays configured): a client
//!   without the new key can no longer send or connect, and one with it
//!   connects again with a new handshake;
//! * a narrowed allowed-IPs list applies to the next packet: a packet from
//!   a removed address is dropped as `source_not_allowed`, and nothing is
//!   routed to it;
//! * the public key is what identifies a peer; a changed key is a removal
//!   and an addition, not an update.

use super::{Concentrator, PeerConfig, PeerError, PeerId};
use crate::Nanos;

/// What an update changed (for the answer and the log).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PeerChange {
    pub name: bool,
    pub allowed_ips: bool,
    /// The pre-shared key changed: the peer's sessions ended.
    pub psk: bool,
    pub limits: bool,
}

impl PeerChange {
    pub fn any(&self) -> bool {
        self.name || self.allowed_ips || self.psk || self.limits
    }

    /// The changed settings, by their configuration keys.
    pub fn keys(&self) -> Vec<&'static str> {
        [
            (self.name, "name"),
            (self.allowed_ips, "allowed_ips"),
            (self.psk, "preshared_key"),
            (self.limits, "limits"),
        ]
        .into_iter()
        .filter_map(|(b, k)| b.then_some(k))
        .collect()
    }
}

impl Concentrator {
    /// What updating peer `id` to `cfg` would change (no state change);
    /// `None` when there is no such peer or `cfg` names another key.
    pub fn peer_change(&self, id: PeerId, cfg: &PeerConfig) -> Option<PeerChange> {
        let p = self.peer(id)?;
        if p.cfg.public_key.0 != cfg.public_key.0 {
            return None;
        }
        let mut old_ips = p.cfg.allowed_ips.clone();
        let mut new_ips = cfg.allowed_ips.clone();
        old_ips.sort();
        new_ips.sort();
        Some(PeerChange {
            name: p.cfg.name != cfg.name,
            allowed_ips: old_ips != new_ips,
            psk: p.cfg.psk.0 != cfg.psk.0,
            limits: p.cfg.limits != cfg.limits,
        })
    }

    /// Update peer `id` to `cfg` (same public key): module documentation.
    /// On an error nothing changed.
    pub fn update_peer(
        &mut self,
        id: PeerId,
        cfg: PeerConfig,
        now: Nanos,
    ) -> Result<PeerChange, PeerError> {
        let Some(change) = self.peer_change(id, &cfg) else {
            return Err(PeerError::NoSuchPeer(id));
        };
        if change.allowed_ips {
            let old = self.peers[id as usize]
                .as_ref()
                .map(|p| p.cfg.allowed_ips.clone())
                .unwrap_or_default();
            for n in &old {
                self.allowed.remove(*n, id);
            }
            for (i, net) in cfg.allowed_ips.iter().enumerate() {
                if let Err(holder) = self.allowed.insert(*net, id) {
                    for n in &cfg.allowed_ips[..i] {
                        self.allowed.remove(*n, id);
                    }
                    for n in &old {
                        let _ = self.allowed.insert(*n, id);
                    }
                    return Err(PeerError::PrefixTaken(*net, holder));
                }
            }
        }
        let limits = cfg.limits.clone();
        let Some(p) = self.peers[id as usize].as_mut() else {
            return Err(PeerError::NoSuchPeer(id));
        };
        if change.psk {
            // Its sessions were made with the old key: they end here.
            p.tunnel = None;
        }
        if change.limits {
            if let Some(t) = p.tunnel.as_mut() {
                limits.apply(t, &self.template, now);
            }
        }
        p.cfg = cfg;
        Ok(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::keys::PresharedKey;
    use crate::testing::{client_peer, TestConfig};

    fn conc() -> (Concentrator, PeerId, PeerId) {
        let mut c = Concentrator::new(TestConfig::new(0, 2).secure().config()).unwrap();
        let a = c.add_peer(client_peer(1)).unwrap();
        let b = c.add_peer(client_peer(2)).unwrap();
        (c, a, b)
    }

    #[test]
    fn allowed_ips_change_at_once_and_atomically() {
        let (mut c, a, b) = conc();
        let mut cfg = c.peer(a).unwrap().cfg.clone();
        let before = cfg.allowed_ips[0];
        let addr = before.addr();
        assert_eq!(c.route(addr), Some(a));
        // Narrowed to another prefix: the old one routes nowhere.
        cfg.allowed_ips = vec!["10.250.0.0/24".parse().unwrap()];
        let ch = c.update_peer(a, cfg.clone(), 0).unwrap();
        assert!(ch.allowed_ips && !ch.psk && !ch.name && !ch.limits);
        assert_eq!(c.route(addr), None);
        assert_eq!(c.route("10.250.0.7".parse().unwrap()), Some(a));
        // A prefix of peer b: refused, and nothing changed.
        let theirs = c.peer(b).unwrap().cfg.allowed_ips[0];
        let mut bad = cfg.clone();
        bad.allowed_ips = vec!["10.251.0.0/24".parse().unwrap(), theirs];
        assert!(matches!(
            c.update_peer(a, bad, 0),
            Err(PeerError::PrefixTaken(_, p)) if p == b
        ));
        assert_eq!(c.route("10.250.0.7".parse().unwrap()), Some(a));
        assert_eq!(c.route("10.251.0.7".parse().unwrap()), None);
        assert_eq!(c.route(theirs.addr()), Some(b));
        // The same again: nothing to change.
        assert!(!c.update_peer(a, cfg, 0).unwrap().any());
    }

    #[test]
    fn a_new_preshared_key_ends_the_sessions_and_a_new_key_is_no_update() {
        let (mut c, a, _) = conc();
        let mut cfg = c.peer(a).unwrap().cfg.clone();
        cfg.psk = PresharedKey([9; 32]);
        let ch = c.update_peer(a, cfg.clone(), 0).unwrap();
        assert!(ch.psk && ch.keys() == vec!["preshared_key"]);
        assert!(c.peer(a).unwrap().tunnel.is_none());
        assert_eq!(c.peer(a).unwrap().cfg.psk.0, [9; 32]);
        cfg.public_key.0[0] ^= 1;
        assert!(c.peer_change(a, &cfg).is_none());
        assert!(matches!(
            c.update_peer(a, cfg, 0),
            Err(PeerError::NoSuchPeer(_))
        ));
    }
}
