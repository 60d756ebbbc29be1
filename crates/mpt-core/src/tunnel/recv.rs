//! The receive path of the tunnel: validation, authentication, handshake
//! messages, data into the reorder buffer, probes and echoes.
//!
//! Order of checks (cheapest first, nothing before authentication can
//! change state except drop counters and the handshake rate limiter):
//! header → path and socket → source address (plaintext, and the client in
//! secure mode) → session lookup, replay window and AEAD → remote address
//! learning (server) → per-path accounting → data or control processing.

use std::net::SocketAddr;

use super::{Event, Received, RecvStart, Tunnel, HANDSHAKE_OUT_MAX};
use crate::crypto::handshake::RESPONSE_BODY_LEN;
use crate::crypto::state::HandshakeRole;
use crate::reorder::Accept;
use crate::stats::DropReason;
use crate::wire::{
    self, Header, HeaderFields, NackBody, PacketType, ProbeBody, WireError, HEADER_LEN,
    PROBE_FLAG_HEARING,
};
use crate::{Nanos, PathId};

impl Tunnel {
    pub(super) fn drop_counted(&mut self, r: DropReason) -> Received {
        self.drops.add(r);
        Received::Dropped(r)
    }

    /// First half of [`Tunnel::recv`]: everything that needs no key.
    /// Secure datagrams that pass (header, path, source, session, replay
    /// pre-check) come back as [`RecvStart::Open`]; the rest is handled here.
    pub fn recv_start(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &[u8],
    ) -> RecvStart {
        let (ty, f) = match Header::new_checked(buf) {
            Ok(h) => (h.packet_type(), h.fields()),
            Err(e) => {
                let r = match e {
                    WireError::Truncated => DropReason::Truncated,
                    WireError::BadVersion => DropReason::BadVersion,
                    WireError::BadType => DropReason::BadType,
                };
                return RecvStart::Done(self.drop_counted(r));
            }
        };
        let pid = f.path;
        match self.paths.get(pid as usize) {
            Some(p) if p.cfg.local_key == local_key => {}
            _ => return RecvStart::Done(self.drop_counted(DropReason::UnknownPath)),
        }
        if matches!(
            ty,
            PacketType::HandshakeInit | PacketType::HandshakeResponse
        ) {
            return RecvStart::Done(self.recv_handshake(now, pid, ty, from, buf));
        }
        // A secure server learns its peer's address from authentic packets;
        // everyone else accepts only the known remote.
        let learns = self
            .crypto
            .as_ref()
            .is_some_and(|c| c.role() == HandshakeRole::Responder);
        if !learns && self.paths[pid as usize].remote != Some(from) {
            return RecvStart::Done(self.drop_counted(DropReason::UnknownSource));
        }
        let r = match self.crypto.as_ref() {
            Some(_) if f.session == 0 => DropReason::NoSession,
            Some(c) => match c.precheck(f.session, f.counter, now) {
                Ok(()) => return RecvStart::Open,
                Err(r) => r,
            },
            None if f.session != 0 => DropReason::NoSession,
            None => {
                let n = buf.len() - HEADER_LEN;
                return RecvStart::Done(self.recv_authentic(now, ty, &f, from, false, buf, n));
            }
        };
        RecvStart::Done(self.drop_counted(r))
    }

    /// An authentic datagram (opened, or plaintext from the known remote)
    /// whose body is `buf[HEADER_LEN..HEADER_LEN + body_len]`.
    #[allow(clippy::too_many_arguments)] // the header's parts, as parsed
    pub(super) fn recv_authentic(
        &mut self,
        now: Nanos,
        ty: PacketType,
        f: &HeaderFields,
        from: SocketAddr,
        learns: bool,
        buf: &[u8],
        body_len: usize,
    ) -> Received {
        let pid = f.path;
        if learns {
            self.learn_remote(pid, from);
        }
        let body = &buf[HEADER_LEN..HEADER_LEN + body_len];
        if ty == PacketType::Data && wire::inner_ip_version(body).is_none() {
            return self.drop_counted(DropReason::BadInner);
        }
        let transit = (self.wall(now) as i64).wrapping_sub(f.timestamp_ns as i64);
        self.paths[pid as usize].on_receive(now, buf.len(), f.path_seq, transit);
        self.refresh_up(pid, now);
        match ty {
            PacketType::Data => self.recv_data(now, pid, f.tunnel_seq, body),
            PacketType::Nack => self.recv_nack(now, pid, f.tunnel_seq, body),
            _ => {
                self.recv_control(now, pid, ty, f, body);
                Received::Consumed
            }
        }
    }

    fn learn_remote(&mut self, pid: PathId, from: SocketAddr) {
        let p = &mut self.paths[pid as usize];
        if p.remote != Some(from) {
            self.events.push_back(Event::RemoteChanged {
                path: pid,
                from: p.remote,
                to: from,
            });
            p.remote = Some(from);
        }
    }

    fn recv_handshake(
        &mut self,
        now: Nanos,
        pid: PathId,
        ty: PacketType,
        from: SocketAddr,
        buf: &[u8],
    ) -> Received {
        let Some(c) = self.crypto.as_mut() else {
            return self.drop_counted(DropReason::HandshakeUnexpected);
        };
        let body = &buf[HEADER_LEN..];
        let res = match ty {
            PacketType::HandshakeInit => {
                let mut out = vec![0u8; HEADER_LEN + RESPONSE_BODY_LEN];
                match c.handle_initiation(now, from.ip(), body, &mut out[HEADER_LEN..]) {
                    Ok(n) => {
                        out.truncate(HEADER_LEN + n);
                        let path_seq = self.paths[pid as usize].on_transmit(out.len());
                        let f = HeaderFields {
                            path: pid,
                            path_seq,
                            timestamp_ns: self.wall(now),
                            ..Default::default()
                        };
                        wire::write_header(&mut out, PacketType::HandshakeResponse, &f);
                        if self.handshake_out.len() < HANDSHAKE_OUT_MAX {
                            self.handshake_out.push_back((pid, from, out));
                        }
                        // The initiation is authentic and fresh (timestamp).
                        self.learn_remote(pid, from);
                        Ok(())
                    }
                    Err(r) => Err(r),
                }
            }
            _ => {
                if self.paths[pid as usize].remote != Some(from) {
                    return self.drop_counted(DropReason::UnknownSource);
                }
                let r = c.handle_response(now, body);
                if r.is_ok() {
                    // Confirm the new session to the server at once.
                    self.paths.iter_mut().for_each(|p| p.probe_due = true);
                }
                r
            }
        };
        match res {
            Ok(()) => {
                let transit = (self.wall(now) as i64)
                    .wrapping_sub(Header::new_checked(buf).map_or(0, |h| h.timestamp_ns()) as i64);
                let path_seq = Header::new_checked(buf).map_or(0, |h| h.path_seq());
                self.paths[pid as usize].on_receive(now, buf.len(), path_seq, transit);
                self.refresh_up(pid, now);
                Received::Consumed
            }
            Err(r) => {
                if matches!(
                    r,
                    DropReason::HandshakeFailed | DropReason::HandshakeUnexpected
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

    fn recv_data(&mut self, now: Nanos, pid: PathId, seq: u64, body: &[u8]) -> Received {
        let resyncs = self.reorder.stats().resyncs;
        let accept = self.reorder.insert(seq, body, now);
        if self.reorder.stats().resyncs != resyncs {
            self.policy.reset();
            self.recovery_reset();
        }
        self.policy.on_data(pid, seq);
        self.recovery_on_data(seq);
        let r = match accept {
            Accept::DeliverNow => {
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += body.len() as u64;
                Received::Deliver {
                    offset: HEADER_LEN,
                    len: body.len(),
                }
            }
            Accept::Held => Received::Consumed,
            Accept::Duplicate => return self.drop_counted(DropReason::Duplicate),
            Accept::Late => return self.drop_counted(DropReason::Late),
        };
        self.apply_policy(now);
        r
    }

    /// Release gaps the policy proved lost, except those loss recovery
    /// still waits for.
    pub(super) fn apply_policy(&mut self, now: Nanos) {
        if self.reorder.held() > 0 {
            let floor = self.policy.lost_below(&self.up);
            let floor = self.recovery_floor(now, floor);
            self.reorder.release_below(floor);
        }
    }

    /// A NACK: the peer asks for data packets again (loss recovery). A
    /// malformed body, or any NACK while recovery is off, is a counted drop.
    fn recv_nack(&mut self, now: Nanos, pid: PathId, next_seq: u64, body: &[u8]) -> Received {
        let nack = match NackBody::parse(body) {
            Ok(b) => b,
            Err(WireError::Truncated) => return self.drop_counted(DropReason::Truncated),
            Err(_) => return self.drop_counted(DropReason::BadType),
        };
        let Some(r) = self.recovery.as_mut() else {
            return self.drop_counted(DropReason::NackUnexpected);
        };
        r.on_nack(&nack);
        self.policy.on_frontier(pid, next_seq);
        self.apply_policy(now);
        Received::Consumed
    }

    fn recv_control(
        &mut self,
        now: Nanos,
        pid: PathId,
        ty: PacketType,
        f: &HeaderFields,
        body: &[u8],
    ) {
        let Ok(b) = ProbeBody::parse(body) else {
            return;
        };
        let hearing = b.flags & PROBE_FLAG_HEARING != 0;
        let wall_now = self.wall(now);
        let mut adapt = false;
        let p = &mut self.paths[pid as usize];
        match ty {
            PacketType::Probe => {
                p.echo_due = Some((f.timestamp_ns, now));
                if p.on_peer_report(now, b.rx_packets, b.rx_path_seq, hearing) {
                    adapt = true;
                }
            }
            PacketType::Echo => {
                // The echo answers our probe: the peer hears us by definition.
                if p.on_peer_report(now, b.rx_packets, b.rx_path_seq, true) {
                    adapt = true;
                }
                let rtt = wall_now
                    .wrapping_sub(b.echo_timestamp_ns)
                    .saturating_sub(b.hold_ns);
                // Ignore absurd samples (clock steps, forged echoes): > 60 s.
                if rtt < 60_000 * crate::NANOS_PER_MS {
                    p.on_rtt_sample(rtt);
                }
            }
            _ => {}
        }
        if adapt {
            self.adapt_weights();
        }
        self.policy.on_frontier(pid, f.tunnel_seq);
        self.refresh_up(pid, now);
        self.apply_policy(now);
    }
}
