//! Handshake messages on the tunnel: initiations (client), responses,
//! cookie replies, and what a completed handshake means for the data path.
//!
//! Invariants:
//! * every handshake datagram leaves with mac1 (and mac2 when a cookie is
//!   held) over its header and body (`crypto::cookie`); none is processed
//!   without a valid mac1;
//! * a path with a configured `remote` takes handshake messages from that
//!   address only;
//! * when the peer announces a new incarnation (it restarted, or this is
//!   the first session), the receive side's sequence state is tied to the
//!   new sequence space at once: the reorder buffer continues at the
//!   peer's announced next sequence number, so no packet of the new session
//!   is dropped as duplicate or late because of the old one.

use std::net::SocketAddr;

use super::{Event, Received, Transmit, Tunnel, HANDSHAKE_OUT_MAX};
use crate::crypto::cookie::{COOKIE_REPLY_BODY_LEN, MACS_LEN};
use crate::crypto::handshake::RESPONSE_NOISE_LEN;
use crate::crypto::state::InitOutcome;
use crate::stats::DropReason;
use crate::wire::{
    self, Header, HeaderFields, PacketType, SessionUnknownBody, HEADER_LEN,
    SESSION_UNKNOWN_BODY_LEN,
};
use crate::{Nanos, PathId};

impl Tunnel {
    /// The next initiation, if one is due: header, body and MACs.
    pub(super) fn poll_initiation(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let wall = self.wall(now);
        let next_seq = self.next_tunnel_seq;
        let c = self.crypto.as_mut()?;
        if !c.wants_initiation(now) {
            return None;
        }
        let (body_len, attempt) = c.poll_initiation(now, wall, next_seq, &mut buf[HEADER_LEN..])?;
        let path = self.initiation_path(now, attempt)?;
        let dst = self.paths[path as usize].remote?;
        let total = HEADER_LEN + body_len;
        let path_seq = self.paths[path as usize].on_transmit(total);
        let f = HeaderFields {
            path,
            path_seq: path_seq as u16,
            timestamp_us: wire::timestamp_us(wall),
            ..Default::default()
        };
        wire::write_header(buf, PacketType::HandshakeInit, &f);
        self.crypto
            .as_mut()?
            .write_macs(now, path as usize, &mut buf[..total]);
        Some(Transmit {
            path,
            local_key: self.paths[path as usize].cfg.local_key,
            dst,
            len: total,
            seal: super::Seal::Done,
            carries: super::Carries::Control,
            tos: 0,
        })
    }

    /// Path on which the `attempt`-th handshake initiation goes: the path
    /// holding the freshest cookie (the server is under load and wants
    /// mac2, which is bound to that path's address), else rotating over the
    /// paths that are up, or over all paths with a known remote.
    fn initiation_path(&self, now: Nanos, attempt: u64) -> Option<PathId> {
        let up: Vec<usize> = (0..self.paths.len())
            .filter(|i| self.paths[*i].up)
            .collect();
        let known: Vec<usize> = (0..self.paths.len())
            .filter(|i| self.paths[*i].remote.is_some())
            .collect();
        let set = if up.is_empty() { known } else { up };
        let cookie = self.crypto.as_ref().and_then(|c| c.cookie_path(now));
        if let Some(p) = cookie.filter(|p| set.contains(p)) {
            return Some(p as PathId);
        }
        set.get((attempt as usize) % set.len().max(1))
            .map(|i| *i as PathId)
    }

    /// Queue a handshake-layer datagram (`out` holds header room and body)
    /// of type `ty` for `dst` on `pid`.
    fn queue_handshake_out(
        &mut self,
        now: Nanos,
        pid: PathId,
        ty: PacketType,
        dst: SocketAddr,
        mut out: Vec<u8>,
    ) {
        self.write_plain_header(now, pid, ty, 0, &mut out);
        // Bounded: initiations are refused before any work while full.
        if self.handshake_out.len() < HANDSHAKE_OUT_MAX {
            self.handshake_out.push_back((pid, dst, out));
        }
    }

    /// Write the header of a datagram sent in the clear (`session`: the
    /// index a session-unknown hint names, else 0), with MACs where its
    /// type has them.
    fn write_plain_header(
        &mut self,
        now: Nanos,
        pid: PathId,
        ty: PacketType,
        session: u32,
        out: &mut [u8],
    ) {
        let path_seq = self.paths[pid as usize].on_transmit(out.len());
        let f = HeaderFields {
            path: pid,
            session,
            path_seq: path_seq as u16,
            timestamp_us: wire::timestamp_us(self.wall(now)),
            ..Default::default()
        };
        wire::write_header(out, ty, &f);
        if ty == PacketType::HandshakeResponse {
            if let Some(c) = self.crypto.as_mut() {
                c.write_macs(now, pid as usize, out);
            }
        }
    }

    /// Responder: a sealed datagram of `len` bytes from `from` on `pid`
    /// named a session we do not hold (we restarted, or it expired): tell
    /// the sender, rate limited, so that it handshakes at once. Never for
    /// a datagram no larger than the hint (no amplification).
    pub(super) fn hint_session_unknown(
        &mut self,
        now: Nanos,
        pid: PathId,
        from: SocketAddr,
        f: &HeaderFields,
        len: usize,
    ) {
        let hint_len = HEADER_LEN + SESSION_UNKNOWN_BODY_LEN;
        if len <= hint_len || self.handshake_out.len() >= HANDSHAKE_OUT_MAX {
            return;
        }
        if !self
            .crypto
            .as_mut()
            .is_some_and(|c| c.take_session_unknown(now))
        {
            return;
        }
        let mut out = vec![0u8; hint_len];
        SessionUnknownBody { counter: f.counter }.write(&mut out[HEADER_LEN..]);
        self.write_plain_header(now, pid, PacketType::SessionUnknown, f.session, &mut out);
        self.handshake_out.push_back((pid, from, out));
    }

    pub(super) fn recv_handshake(
        &mut self,
        now: Nanos,
        pid: PathId,
        ty: PacketType,
        from: SocketAddr,
        buf: &[u8],
    ) -> Received {
        if self.crypto.is_none() {
            return self.drop_counted(DropReason::HandshakeUnexpected);
        }
        let configured = self.paths[pid as usize].cfg.remote;
        if configured.is_some_and(|r| r != from) {
            return self.drop_counted(DropReason::UnknownSource);
        }
        let res = match ty {
            PacketType::HandshakeInit => self.recv_initiation(now, pid, from, buf),
            PacketType::HandshakeResponse => self.recv_response(now, pid, from, buf),
            _ => {
                if self.paths[pid as usize].remote != Some(from) {
                    return self.drop_counted(DropReason::UnknownSource);
                }
                let r = match self.crypto.as_mut() {
                    Some(c) if ty == PacketType::SessionUnknown => match (
                        Header::new_checked(buf),
                        SessionUnknownBody::parse(&buf[HEADER_LEN..]),
                    ) {
                        (Ok(h), Ok(b)) => c.handle_session_unknown(now, h.session(), b.counter),
                        _ => Err(DropReason::Truncated),
                    }
                    .map(|started| {
                        if started {
                            self.events
                                .push_back(Event::SessionUnknown { path: pid, from });
                        }
                    }),
                    Some(c) => c.handle_cookie_reply(now, &buf[HEADER_LEN..]),
                    None => Err(DropReason::HandshakeUnexpected),
                };
                return match r {
                    Ok(()) => Received::Consumed,
                    Err(r) => self.drop_counted(r),
                };
            }
        };
        match res {
            Ok(()) => {
                if let Ok(h) = Header::new_checked(buf) {
                    let (_, transit) = self.peer_time(now, h.timestamp_us());
                    let path_seq = h.path_seq();
                    self.paths[pid as usize].on_receive(now, buf.len(), path_seq, transit);
                }
                self.refresh_up(pid, now);
                Received::Consumed
            }
            Err(r) => {
                if matches!(
                    r,
                    DropReason::HandshakeFailed
                        | DropReason::HandshakeUnexpected
                        | DropReason::HandshakeBadMac
                ) {
                    self.events.push_back(Event::HandshakeRejected {
                        path: pid,
                        from,
                        reason: r,
                    });
                }
                self.drop_counted(r)
            }
        }
    }

    /// Server: an initiation. Answered with a response, or under load
    /// without a valid mac2 with a cookie reply (and counted as such).
    fn recv_initiation(
        &mut self,
        now: Nanos,
        pid: PathId,
        from: SocketAddr,
        buf: &[u8],
    ) -> Result<(), DropReason> {
        if self.handshake_out.len() >= HANDSHAKE_OUT_MAX {
            return Err(DropReason::HandshakeQueueFull);
        }
        let next_seq = self.next_tunnel_seq;
        let room = (RESPONSE_NOISE_LEN + MACS_LEN).max(COOKIE_REPLY_BODY_LEN);
        let mut out = vec![0u8; HEADER_LEN + room];
        let c = self
            .crypto
            .as_mut()
            .ok_or(DropReason::HandshakeUnexpected)?;
        match c.handle_initiation(now, from, buf, next_seq, &mut out[HEADER_LEN..])? {
            InitOutcome::Cookie { len } => {
                out.truncate(HEADER_LEN + len);
                self.queue_handshake_out(now, pid, PacketType::CookieReply, from, out);
                Err(DropReason::HandshakeCookieSent)
            }
            InitOutcome::Response { len, restarted } => {
                out.truncate(HEADER_LEN + len);
                self.queue_handshake_out(now, pid, PacketType::HandshakeResponse, from, out);
                if let Some(seq) = restarted {
                    self.peer_restarted(seq);
                }
                // The initiation is authentic and fresh (its timestamp is
                // newer than any before): a first address is taken at
                // once, a change of address is validated first.
                self.consider_address(pid, from, true);
                Ok(())
            }
        }
    }

    /// Client: a response to our initiation.
    fn recv_response(
        &mut self,
        now: Nanos,
        pid: PathId,
        from: SocketAddr,
        buf: &[u8],
    ) -> Result<(), DropReason> {
        if self.paths[pid as usize].remote != Some(from) {
            return Err(DropReason::UnknownSource);
        }
        let c = self
            .crypto
            .as_mut()
            .ok_or(DropReason::HandshakeUnexpected)?;
        let restarted = c.handle_response(now, buf)?;
        if let Some(seq) = restarted {
            self.peer_restarted(seq);
        }
        // Confirm the new session to the server at once.
        self.paths.iter_mut().for_each(|p| p.probe_due = true);
        Ok(())
    }

    /// The peer is a new incarnation that will send from `next_seq` on:
    /// forget the sequence state of the old one (what it left in the
    /// reorder buffer is delivered first, in order).
    pub(super) fn peer_restarted(&mut self, next_seq: u64) {
        self.reorder.restart_at(next_seq);
        self.pairing.reset();
        self.policy.reset();
        self.recovery_reset();
        self.paths.iter_mut().for_each(|p| p.peer_restarted());
        self.paths
            .iter_mut()
            .for_each(|p| p.sender.peer_restarted());
    }
}
