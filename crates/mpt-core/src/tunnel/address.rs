//! The peer's address on each path: learning it, and validating a change
//! before traffic follows it (RFC 9000 §8.2 and §9, path validation and
//! migration, applied per path).
//!
//! Only a server path without a configured `remote` learns. Invariants:
//! * a path with a configured `remote` never changes its destination (a
//!   packet from elsewhere is dropped as `unknown_source` before any
//!   cryptography);
//! * a learning path takes an address only from a packet that
//!   authenticated (so passed the replay window: a packet is accepted at
//!   most once) and is newer than every packet accepted so far **on that
//!   path** (its counter above the path's newest in the same session, or
//!   the first of the current session), or from a fresh handshake
//!   initiation. The order is per path, not per session, because a
//!   slower path's packets are rarely the newest of the session: with a
//!   session-wide order a path 20 ms slower than the others was learned
//!   after seconds, or never. So the first authentic packet on a path
//!   teaches its address: within one probe interval plus the path's
//!   one-way delay of the session, whichever path carried the handshake;
//! * a replayed packet (one the server accepted) fails the replay window.
//!   A packet the server never received, or a copy relayed faster than
//!   the original, can teach an attacker's address at most until the real
//!   peer's next packet on that path, which is newer: for a first address
//!   the real peer's next packet then starts a validation of its own
//!   address, and a change is validated anyway;
//! * the first address of a path is taken at once; a change is validated
//!   first: the server sends an encrypted random token to the new address,
//!   and only an authentic answer carrying it, from that address, moves the
//!   path. Until then the old address keeps the traffic;
//! * a challenge is sent at most [`CHALLENGE_SENDS`] times, then dropped.

use std::net::SocketAddr;

use super::{Event, Received, Transmit, Tunnel};
use crate::path::Challenge;
use crate::stats::DropReason;
use crate::wire::{PacketType, HEADER_LEN, PATH_TOKEN_LEN};
use crate::{Nanos, PathId, NANOS_PER_MS};

/// Where an authentic datagram stands in its session, for the per-path
/// order of address learning.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Freshness {
    /// Our index of the session it was sealed in.
    pub session: u32,
    /// Its counter in that session.
    pub counter: u64,
    /// That session is the one that seals now (after this packet's commit).
    pub current: bool,
}

/// Challenges sent for one candidate address before giving up (tuning knob).
pub const CHALLENGE_SENDS: u32 = 3;
/// Shortest wait before a challenge is sent again (tuning knob; otherwise
/// two smoothed RTTs).
const CHALLENGE_RETRY_MIN: Nanos = 100 * NANOS_PER_MS;

impl Tunnel {
    /// Whether path `pid` learns its peer's address from packets.
    pub(super) fn learns(&self, pid: PathId) -> bool {
        self.is_responder() && self.paths[pid as usize].cfg.remote.is_none()
    }

    /// Whether an authentic packet (`f`) is newer than every packet
    /// accepted on path `pid` before; records it as the path's newest if
    /// so. Only learning paths keep the mark.
    pub(super) fn newest_on_path(&mut self, pid: PathId, f: Freshness) -> bool {
        if !self.learns(pid) {
            return false;
        }
        let p = &mut self.paths[pid as usize];
        let newest = match p.newest_rx {
            None => true,
            Some((s, c)) if s == f.session => f.counter > c,
            // Another session: only the current one supersedes it.
            Some(_) => f.current,
        };
        if newest {
            p.newest_rx = Some((f.session, f.counter));
        }
        newest
    }

    /// An authentic packet on a learning path came from `from`; `newest`
    /// says whether it is newer than everything accepted on that path
    /// ([`Tunnel::newest_on_path`]) or a fresh handshake initiation.
    pub(super) fn consider_address(&mut self, pid: PathId, from: SocketAddr, newest: bool) {
        if !self.learns(pid) || !newest {
            return;
        }
        let p = &mut self.paths[pid as usize];
        match p.remote {
            None => {
                p.remote = Some(from);
                self.events.push_back(Event::RemoteChanged {
                    path: pid,
                    from: None,
                    to: from,
                });
            }
            Some(r) if r == from => p.challenge = None,
            Some(_) if p.challenge.is_some_and(|c| c.addr == from) => {}
            Some(_) => {
                let token = self
                    .crypto
                    .as_mut()
                    .map_or([0; PATH_TOKEN_LEN], |c| c.random_token());
                self.paths[pid as usize].challenge = Some(Challenge {
                    addr: from,
                    token,
                    sent_at: None,
                    sends: 0,
                });
            }
        }
    }

    /// Client: a path challenge from the server; answer it on this path.
    pub(super) fn recv_path_challenge(&mut self, pid: PathId, body: &[u8]) -> Received {
        let Some(token) = body.get(..PATH_TOKEN_LEN) else {
            return self.drop_counted(DropReason::Truncated);
        };
        let mut t = [0u8; PATH_TOKEN_LEN];
        t.copy_from_slice(token);
        self.paths[pid as usize].response_due = Some(t);
        Received::Consumed
    }

    /// Server: the answer to a challenge. Moves the path if it carries the
    /// token and comes from the challenged address.
    pub(super) fn recv_path_response(
        &mut self,
        pid: PathId,
        from: SocketAddr,
        body: &[u8],
    ) -> Received {
        let p = &mut self.paths[pid as usize];
        let ok = match (p.challenge, body.get(..PATH_TOKEN_LEN)) {
            (Some(c), Some(token)) => c.addr == from && c.token == token,
            _ => false,
        };
        if !ok {
            return self.drop_counted(DropReason::PathValidationFailed);
        }
        let old = p.remote.replace(from);
        p.challenge = None;
        self.events.push_back(Event::RemoteChanged {
            path: pid,
            from: old,
            to: from,
        });
        Received::Consumed
    }

    /// The next path challenge (server) or response (client) due, written
    /// into `buf`.
    pub(super) fn poll_validation(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        for i in 0..self.paths.len() {
            let pid = i as PathId;
            if let Some(token) = self.paths[i].response_due.take() {
                buf[HEADER_LEN..HEADER_LEN + PATH_TOKEN_LEN].copy_from_slice(&token);
                let dst = self.paths[i].remote?;
                let t = PacketType::PathResponse;
                if let Some(tx) = self.control_transmit_to(
                    now,
                    pid,
                    t,
                    0,
                    self.next_tunnel_seq,
                    dst,
                    buf,
                    PATH_TOKEN_LEN,
                ) {
                    return Some(tx);
                }
            }
            let Some(c) = self.paths[i].challenge else {
                continue;
            };
            let wait = self.paths[i]
                .srtt()
                .map_or(CHALLENGE_RETRY_MIN, |s| (2 * s).max(CHALLENGE_RETRY_MIN));
            if c.sent_at.is_some_and(|t| now < t.saturating_add(wait)) {
                continue;
            }
            if c.sends >= CHALLENGE_SENDS {
                self.paths[i].challenge = None;
                self.events.push_back(Event::ValidationFailed {
                    path: pid,
                    addr: c.addr,
                });
                continue;
            }
            self.paths[i].challenge = Some(Challenge {
                sent_at: Some(now),
                sends: c.sends + 1,
                ..c
            });
            buf[HEADER_LEN..HEADER_LEN + PATH_TOKEN_LEN].copy_from_slice(&c.token);
            let t = PacketType::PathChallenge;
            if let Some(tx) = self.control_transmit_to(
                now,
                pid,
                t,
                0,
                self.next_tunnel_seq,
                c.addr,
                buf,
                PATH_TOKEN_LEN,
            ) {
                return Some(tx);
            }
        }
        None
    }

    /// When a challenge is next due (for timers).
    pub(super) fn validation_deadline(&self) -> Option<Nanos> {
        self.paths
            .iter()
            .filter_map(|p| {
                let c = p.challenge?;
                let wait = p
                    .srtt()
                    .map_or(CHALLENGE_RETRY_MIN, |s| (2 * s).max(CHALLENGE_RETRY_MIN));
                // An unsent challenge goes with the next poll_transmit.
                c.sent_at.map(|t| t.saturating_add(wait))
            })
            .min()
    }
}
