//! Logging of tunnel events, naming the tunnel, the path and the peer.
//!
//! Invariant: events that an attacker can trigger at will (rejected
//! handshakes) are logged at most once per [`NOISY_LOG_INTERVAL`] per kind,
//! with the number suppressed in between, so a flood cannot flood the log.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mpt_core::crypto::state::CryptoEvent;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Event, Tunnel};
use tracing::{debug, info, warn};

/// Shortest interval between two log lines of one noisy kind.
pub const NOISY_LOG_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct EventLog {
    last: HashMap<&'static str, (Instant, u64)>,
}

impl EventLog {
    /// Whether a noisy event of `kind` may be logged now; returns how many
    /// were suppressed since the last one.
    fn allow(&mut self, kind: &'static str) -> Option<u64> {
        let now = Instant::now();
        let e = self
            .last
            .entry(kind)
            .or_insert((now - NOISY_LOG_INTERVAL, 0));
        if now.duration_since(e.0) >= NOISY_LOG_INTERVAL {
            let suppressed = e.1;
            *e = (now, 0);
            Some(suppressed)
        } else {
            e.1 += 1;
            None
        }
    }

    pub fn log(&mut self, tunnel_name: &str, t: &Tunnel, e: Event) {
        let name = |p: u8| t.path(p).map(|s| s.cfg.name.clone()).unwrap_or_default();
        let peer = |p: u8| {
            t.path(p)
                .and_then(|s| s.remote)
                .map_or_else(|| "(not yet known)".to_string(), |r| r.to_string())
        };
        match e {
            Event::PathUp { path } => {
                info!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), "path up")
            }
            Event::PathDown { path, reason } => {
                warn!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), reason, "path down")
            }
            Event::AllPathsDown => {
                warn!(tunnel = %tunnel_name, "all paths down: packets are dropped until one returns")
            }
            Event::Receiving { path, up: true } => {
                info!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), "hearing the peer on this path again")
            }
            Event::Receiving { path, up: false } => {
                warn!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), "no longer hearing the peer on this path (sending on it continues while the peer hears us)")
            }
            Event::Stalled {
                path,
                stalled: true,
            } => {
                // A radio link may stall many times a minute: one line a
                // second at most (the path's `stalls` counter has them all).
                if let Some(suppressed) = self.allow("path-stalled") {
                    info!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), suppressed, "path stalled: data sent on it went unreported past its round trips; what it carried last is sent again on another path")
                }
            }
            Event::Stalled {
                path,
                stalled: false,
            } => {
                debug!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), "path no longer stalled: a report covered what it carried")
            }
            Event::ValidationFailed { path, addr } => {
                if let Some(suppressed) = self.allow("validation-failed") {
                    warn!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), candidate = %addr, suppressed, "new peer address did not answer its path challenge; staying with the old one")
                }
            }
            Event::RemoteChanged { path, from, to } => {
                let from = from.map_or_else(|| "(none)".to_string(), |f| f.to_string());
                info!(tunnel = %tunnel_name, path = %name(path), from = %from, to = %to, "peer address changed (authenticated and validated)")
            }
            Event::Security(CryptoEvent::Established { cipher, rekey }) => {
                // Who: the peer's key (the credential the handshake proved)
                // and where it is reached on each path.
                let key = t.peer_key_text().unwrap_or_default();
                let at: Vec<String> = (0..t.path_count() as u8)
                    .map(|p| format!("{}={}", name(p), peer(p)))
                    .collect();
                info!(tunnel = %tunnel_name, cipher, rekey, peer_key = %key, peer = %at.join(","), "session established with the peer holding this key")
            }
            Event::Security(CryptoEvent::Failed {
                reason,
                unknown_key: Some(key),
            }) => {
                if let Some(suppressed) = self.allow("handshake-failed") {
                    let key = mpt_core::crypto::keys::encode(&key);
                    warn!(tunnel = %tunnel_name, reason, peer_key = %key, suppressed, "handshake failed: the sender's public key {key} is not this tunnel's peer_public_key")
                }
            }
            Event::Security(CryptoEvent::Failed { reason, .. }) => {
                if let Some(suppressed) = self.allow("handshake-failed") {
                    warn!(tunnel = %tunnel_name, reason, suppressed, "handshake failed")
                }
            }
            Event::Security(CryptoEvent::Unanswered {
                attempts,
                under_load: false,
            }) => {
                warn!(tunnel = %tunnel_name, attempts, "no handshake response yet (peer down or unreachable, or it does not accept our key?)")
            }
            Event::Security(CryptoEvent::Unanswered {
                attempts,
                under_load: true,
            }) => {
                warn!(tunnel = %tunnel_name, attempts, "handshake not complete yet: the peer answers with cookie replies (it is under load, maybe a handshake flood); retrying at its pace")
            }
            Event::Security(CryptoEvent::Unconfirmed) => {
                if let Some(suppressed) = self.allow("handshake-unconfirmed") {
                    let key = t.peer_key_text().unwrap_or_default();
                    warn!(tunnel = %tunnel_name, peer_key = %key, suppressed, "handshake failed: the peer holding this key sent a new initiation without using the session we answered, so that handshake made no session (a wrong pre-shared key on one side, or our response was lost or slower than the peer's retry; its new initiation is answered as usual)")
                }
            }
            Event::Security(CryptoEvent::Expired) => {
                warn!(tunnel = %tunnel_name, "session expired without rekey; waiting for a new handshake")
            }
            Event::Stray {
                reason: DropReason::UnknownPath,
                claimed_path,
                local_key,
                from,
                count,
            } => {
                let here: Vec<String> = (0..t.path_count())
                    .filter_map(|i| Some((i, t.path(i as u8)?)))
                    .filter(|(_, p)| p.cfg.local_key == local_key)
                    .map(|(i, p)| format!("{} = id {i}", p.cfg.name))
                    .collect();
                warn!(tunnel = %tunnel_name, from = %from, path_id = claimed_path, count, "datagram for the peer's path id {claimed_path}, which no path on this socket serves ({}): paths are paired by name; check that both peers have a path of the same name and that its remote is this socket's address", here.join(", "))
            }
            Event::PathPaired { path, peer_path } => {
                info!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), peer_path_id = peer_path, "path paired with the peer's path of the same name")
            }
            Event::PathPairedBySocket {
                path,
                peer_path,
                name: theirs,
            } => {
                info!(tunnel = %tunnel_name, path = %name(path), peer = %peer(path), peer_path_id = peer_path, peer_path = %theirs, "path paired with the peer's path '{theirs}' by the socket and address it arrives at (no path here has that name)")
            }
            Event::PathMismatch {
                peer_path,
                name: theirs,
                from,
                ours: None,
            } => {
                let here: Vec<String> = (0..t.path_count() as u8).map(name).collect();
                warn!(tunnel = %tunnel_name, from = %from, peer_path_id = peer_path, peer_path = %theirs, "the peer has a path named '{theirs}' and this side has none of that name (ours: {}), nor one path that the socket and address it arrives at can mean (its packets are dropped as unknown_path). Give both peers the same path names, or this side one path per socket", here.join(", "))
            }
            Event::PathMismatch {
                peer_path,
                name: theirs,
                from,
                ours: Some(local),
            } => {
                let at = t
                    .path(local)
                    .map(|p| p.cfg.local.to_string())
                    .unwrap_or_default();
                warn!(tunnel = %tunnel_name, from = %from, peer_path_id = peer_path, path = %theirs, "the peer sends its path '{theirs}' to the address of another of our paths; ours of that name listens on {at}: set that path's remote to {at} on the peer")
            }
            Event::Stray {
                claimed_path,
                from,
                count,
                ..
            } => {
                warn!(tunnel = %tunnel_name, path = %name(claimed_path), from = %from, expected = %peer(claimed_path), count, "datagram from an address that is not the path's remote (dropped as unknown_source)")
            }
            Event::SessionUnknown { path, from } => {
                warn!(tunnel = %tunnel_name, path = %name(path), from = %from, "the peer no longer holds our session (it restarted?): handshaking now")
            }
            Event::HandshakeRejected { path, from, reason } => {
                if let Some(suppressed) = self.allow("handshake-rejected") {
                    let why = if reason == mpt_core::stats::DropReason::HandshakeBadMac {
                        "handshake message not addressed to our public key (the sender's peer_public_key is not ours, or a scan)"
                    } else {
                        "handshake message rejected"
                    };
                    warn!(tunnel = %tunnel_name, path = %name(path), from = %from, reason = reason.as_str(), suppressed, "{why}")
                }
            }
        }
    }
}
