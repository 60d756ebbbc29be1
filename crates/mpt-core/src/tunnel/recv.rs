//! The receive path of the tunnel: validation, authentication, handshake
//! messages, data into the reorder buffer, probes and echoes.
//!
//! Order of checks (cheapest first, nothing before authentication can
//! change state except drop counters and the handshake rate limiter):
//! header → path and socket → source address (every path that does not
//! learn: plaintext, the client, and server paths with a configured
//! `remote`) → session lookup, replay window and AEAD → address learning
//! and validation (`address.rs`) → per-path accounting → data or control.

use std::net::SocketAddr;

use super::address::Freshness;
use super::{Event, OpenTicket, Received, RecvStart, Tunnel};
use crate::reorder::Accept;
use crate::stats::DropReason;
use crate::wire::{
    self, Header, HeaderFields, NackBody, PacketType, ProbeBody, ReportBody, ReportForBody,
    WireError, HEADER_LEN,
};
use crate::{Nanos, PathId};

/// The narrow header fields of an authentic packet, widened against this
/// side's state (`wire` module doc).
struct Widened {
    /// The peer's clock at sending, ns.
    sent_ns: u64,
    /// The tunnel sequence, near the reorder buffer's next.
    tunnel_seq: u64,
}

impl Tunnel {
    pub(super) fn drop_counted(&mut self, r: DropReason) -> Received {
        self.drops.add(r);
        Received::Dropped(r)
    }

    /// A datagram that does not belong to the path it claims: counted, and
    /// told (on the 1st, 2nd, 4th, ... of its reason) for the log.
    pub(super) fn drop_stray(
        &mut self,
        r: DropReason,
        claimed_path: u8,
        local_key: usize,
        from: SocketAddr,
    ) -> Received {
        self.drops.add(r);
        let count = self.drops.get(r);
        if count.is_power_of_two() {
            self.events.push_back(Event::Stray {
                reason: r,
                claimed_path,
                local_key,
                from,
                count,
            });
        }
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
        outer_ecn: u8,
    ) -> RecvStart {
        let (ty, f) = match Header::new_checked(buf) {
            Ok(h) => (h.packet_type(), h.fields()),
            Err(e) => {
                let r = match e {
                    WireError::Truncated => DropReason::Truncated,
                    WireError::BadVersion => DropReason::BadVersion,
                    WireError::BadType => DropReason::BadType,
                    WireError::BadName => DropReason::UnknownPath,
                    WireError::BadFragment => DropReason::BadFragment,
                    WireError::BadRepair => DropReason::BadRepair,
                };
                return RecvStart::Done(self.drop_counted(r));
            }
        };
        let claimed = f.path;
        let Some(pid) = self.local_path(claimed, local_key, from) else {
            let r = self.drop_stray(DropReason::UnknownPath, claimed, local_key, from);
            return RecvStart::Done(r);
        };
        // From here on the header speaks of our own path; the peer's id
        // stays in the datagram's bytes (authenticated as sent).
        let mut f = f;
        f.path = pid;
        let peer_path = claimed;
        if matches!(
            ty,
            PacketType::HandshakeInit
                | PacketType::HandshakeResponse
                | PacketType::CookieReply
                | PacketType::SessionUnknown
        ) {
            let r = self.recv_handshake(now, pid, ty, from, buf);
            if matches!(r, Received::Consumed) {
                self.pairing.guess(peer_path, pid);
            }
            return RecvStart::Done(r);
        }
        // A secure server path without a configured remote learns its
        // peer's address from authentic packets; every other path accepts
        // only its known remote.
        if !self.learns(pid) && self.paths[pid as usize].remote != Some(from) {
            let r = self.drop_stray(DropReason::UnknownSource, pid, local_key, from);
            return RecvStart::Done(r);
        }
        let r = match self.crypto.as_ref() {
            Some(_) if f.session == 0 => DropReason::NoSession,
            Some(c) => match c.precheck(f.session, f.counter, now) {
                Ok(()) => {
                    return RecvStart::Open(OpenTicket {
                        ty,
                        fields: f,
                        peer_path,
                        outer_ecn,
                    })
                }
                Err(DropReason::NoSession) => {
                    self.hint_session_unknown(now, pid, from, &f, buf.len());
                    DropReason::NoSession
                }
                Err(r) => r,
            },
            None if f.session != 0 => DropReason::NoSession,
            None => {
                let n = buf.len() - HEADER_LEN;
                return RecvStart::Done(
                    self.recv_authentic(now, ty, &f, peer_path, from, None, buf, n),
                );
            }
        };
        RecvStart::Done(self.drop_counted(r))
    }

    /// An authentic datagram (opened, or plaintext from the known remote)
    /// whose body is `buf[HEADER_LEN..HEADER_LEN + body_len]`; `fresh`:
    /// where it stands in its session (None: plaintext, which never
    /// teaches an address).
    #[allow(clippy::too_many_arguments)] // the header's parts, as parsed
    pub(super) fn recv_authentic(
        &mut self,
        now: Nanos,
        ty: PacketType,
        f: &HeaderFields,
        peer_path: u8,
        from: SocketAddr,
        fresh: Option<Freshness>,
        buf: &[u8],
        body_len: usize,
    ) -> Received {
        let mut pid = f.path;
        let body = &buf[HEADER_LEN..HEADER_LEN + body_len];
        let mut probe = None;
        if matches!(ty, PacketType::Probe | PacketType::Echo) {
            let b = match ProbeBody::parse(body) {
                Ok(b) => b,
                // Authentic but malformed: the peer's bug, counted all the same.
                Err(WireError::BadName) => return self.drop_counted(DropReason::UnknownPath),
                Err(_) => return self.drop_counted(DropReason::Truncated),
            };
            match self.pair_by_name(peer_path, pid, b.name, from) {
                Some(l) => pid = l,
                None => return self.drop_counted(DropReason::UnknownPath),
            }
            probe = Some(b);
        } else {
            self.pairing.guess(peer_path, pid);
        }
        if ty == PacketType::PathResponse {
            return self.recv_path_response(pid, from, body);
        }
        let newest = fresh.is_some_and(|f| self.newest_on_path(pid, f));
        self.consider_address(pid, from, newest);
        if ty == PacketType::Data && wire::inner_ip_version(body).is_none() {
            return self.drop_counted(DropReason::BadInner);
        }
        if ty == PacketType::Fragment
            && (f.class & wire::CLASS_UNORDERED != 0 || wire::Fragment::parse(body).is_err())
        {
            return self.drop_counted(DropReason::BadFragment);
        }
        let (sent_ns, transit) = self.peer_time(now, f.timestamp_us);
        let lost = self.paths[pid as usize].on_receive(now, buf.len(), f.path_seq, transit);
        if let Some((first, count)) = lost {
            self.recovery_on_path_loss(now, peer_path, pid, first, count);
        }
        self.refresh_up(pid, now);
        let w = Widened {
            sent_ns,
            tunnel_seq: wire::widen_u32(f.tunnel_seq, self.reorder.next_seq()),
        };
        match ty {
            PacketType::Data if f.class & wire::CLASS_UNORDERED != 0 => {
                self.paths[pid as usize].on_data(now);
                self.recv_unordered(f.tunnel_seq, body)
            }
            PacketType::Data | PacketType::Fragment => {
                self.paths[pid as usize].on_data(now);
                self.fec_on_received(now, pid, f.path_seq, &buf[..HEADER_LEN + body_len]);
                self.recv_data(now, pid, w.tunnel_seq, body)
            }
            PacketType::Repair => self.recv_repair(now, pid, body),
            PacketType::Report => self.recv_report(now, pid, &w, body),
            PacketType::ReportFor => self.recv_report_for(now, pid, &w, body),
            PacketType::Nack => self.recv_nack(now, pid, w.tunnel_seq, body),
            PacketType::PathChallenge => self.recv_path_challenge(pid, body),
            _ => match probe {
                Some(b) => self.recv_control(now, pid, ty, f, &w, &b),
                None => Received::Consumed,
            },
        }
    }

    /// The peer's send time, in ns of its clock, of a packet stamped
    /// `ts_us`, and the packet's transit (our clock at arrival minus that;
    /// any sign, as the clocks need not agree). The stamp is widened near
    /// our clock minus the last transit, so that any constant clock offset
    /// reads the same on every packet.
    pub(super) fn peer_time(&mut self, now: Nanos, ts_us: u32) -> (u64, i64) {
        let wall = self.wall(now);
        let near = wall.saturating_add_signed(self.last_transit_ns.saturating_neg());
        let sent = wire::widen_timestamp_ns(ts_us, near);
        let transit = (wall as i64).wrapping_sub(sent as i64);
        self.last_transit_ns = transit;
        (sent, transit)
    }

    pub(super) fn recv_data(&mut self, now: Nanos, pid: PathId, seq: u64, body: &[u8]) -> Received {
        let resyncs = self.reorder.stats().resyncs;
        let accept = self.reorder.insert(seq, body, now);
        if self.reorder.stats().resyncs != resyncs {
            self.policy.reset();
            self.recovery_reset();
        }
        self.policy.on_data(pid, seq, now);
        self.recovery_on_data(now, seq, body.len());
        let r = match accept {
            Accept::DeliverNow => self.deliver_now(seq, body, false),
            Accept::DeliverLate => {
                // The gap was given up too early: the margin learns it,
                // unless recovery asked for it (its wait, not the
                // margin, was short).
                if !self.recovery_asked(seq) {
                    self.late_margin.on_spurious(now);
                }
                self.deliver_now(seq, body, true)
            }
            Accept::Held => Received::Consumed,
            // Both arrive after their gap was given up (or resent).
            Accept::Duplicate => return self.drop_given_up(now, seq, DropReason::Duplicate),
            Accept::Late => return self.drop_given_up(now, seq, DropReason::Late),
        };
        self.apply_policy(now);
        r
    }

    /// A NACK: the peer asks for data packets again (loss recovery). A
    /// malformed body, or any NACK while recovery is off, is a counted drop.
    fn recv_nack(&mut self, now: Nanos, pid: PathId, next_seq: u64, body: &[u8]) -> Received {
        let nack = match NackBody::parse(body) {
            Ok(b) => b,
            Err(WireError::Truncated) => return self.drop_counted(DropReason::Truncated),
            Err(_) => return self.drop_counted(DropReason::BadType),
        };
        if self.recovery.is_none() {
            return self.drop_counted(DropReason::NackUnexpected);
        }
        // A resend's request and its answer: a round trip of the path
        // answers go on, and its variation.
        let in_flight = self
            .recovery_path()
            .and_then(|p| self.paths[usize::from(p)].rtt_timeout())
            .unwrap_or(0);
        let Some(r) = self.recovery.as_mut() else {
            return self.drop_counted(DropReason::NackUnexpected);
        };
        let paths = &self.paths;
        let last_sent = |p: PathId| {
            let p = paths.get(usize::from(p))?;
            (p.tx_packets > 0).then(|| p.tx_seq.wrapping_sub(1))
        };
        r.on_nack(now, in_flight, &nack, body, self.frag.body_max, last_sent);
        self.policy.on_frontier(pid, next_seq);
        self.apply_policy(now);
        Received::Consumed
    }

    /// A receiver report alone.
    fn recv_report(&mut self, now: Nanos, pid: PathId, w: &Widened, body: &[u8]) -> Received {
        let Ok(r) = ReportBody::parse(body) else {
            return self.drop_counted(DropReason::Truncated);
        };
        self.on_report(now, pid, w, &r, false);
        Received::Consumed
    }

    /// A receiver report about another of our paths than the one it came
    /// on (its own reports do not reach us: our side of it does not hear
    /// the peer). The peer names the path by its own id; a path of the
    /// peer's we have none of is a counted drop (`unknown_path`), one not
    /// paired yet is ignored.
    fn recv_report_for(&mut self, now: Nanos, pid: PathId, w: &Widened, body: &[u8]) -> Received {
        let Ok(b) = ReportForBody::parse(body) else {
            return self.drop_counted(DropReason::Truncated);
        };
        let about = match self.pairing.local(b.about) {
            Some(Ok(l)) if usize::from(l) < self.paths.len() => l,
            // Not paired yet (its probes have not reached us): an early
            // report, not a bad one; the next ones will do.
            None => return Received::Consumed,
            _ => return self.drop_counted(DropReason::UnknownPath),
        };
        self.paths[usize::from(about)].reports_carried_in += 1;
        self.apply_report(now, about, pid, w, &b.report, false);
        Received::Consumed
    }

    /// The peer's report about our sending on `pid`: loss (for weights),
    /// the rate model's sample, the hearing mask, the path's frontier.
    fn on_report(&mut self, now: Nanos, pid: PathId, w: &Widened, r: &ReportBody, echo: bool) {
        self.apply_report(now, pid, pid, w, r, echo);
    }

    /// A report about our sending on `about` that came on `carrier`: the
    /// sample and loss are `about`'s, the hearing mask is news for every
    /// path, the frontier is `carrier`'s (the sequence in the header is
    /// the peer's next on the path it was sent on).
    fn apply_report(
        &mut self,
        now: Nanos,
        about: PathId,
        carrier: PathId,
        w: &Widened,
        r: &ReportBody,
        echo: bool,
    ) {
        let p = &mut self.paths[about as usize];
        if p.on_covered(now, r.rx_path_seq) {
            self.events.push_back(super::Event::Stalled {
                path: about,
                stalled: false,
            });
        }
        let p = &mut self.paths[about as usize];
        let adapt = p.on_peer_report(now, r.rx_packets, r.rx_path_seq);
        let (rtt_min, start_rtt) = (p.rtt_min(), p.start_rtt());
        let sender = &mut self.paths[about as usize].sender;
        if let Some(rtt) = start_rtt {
            sender.on_start_rtt(rtt);
        }
        sender.on_report(now, w.sent_ns, r, rtt_min);
        self.size_recovery_ring(now);
        if adapt {
            self.adapt_weights();
        }
        self.on_hearing_mask(now, carrier, w.sent_ns, r.hearing_mask, echo);
        self.policy.on_frontier(carrier, w.tunnel_seq);
        self.apply_policy(now);
    }

    /// A probe or echo: echo due, RTT, and its receiver report.
    fn recv_control(
        &mut self,
        now: Nanos,
        pid: PathId,
        ty: PacketType,
        f: &HeaderFields,
        w: &Widened,
        b: &ProbeBody,
    ) -> Received {
        let wall_now = self.wall(now);
        let p = &mut self.paths[pid as usize];
        match ty {
            PacketType::Probe => {
                p.echo_due = Some((f.timestamp_us, now));
                // Our echo on this path may not reach the peer (we are not
                // heard here, or it stalled): a report on another path
                // tells it what arrived (`path/stall.rs`).
                if !p.up || p.stall.stalled {
                    p.report_due = true;
                }
            }
            PacketType::Echo => {
                // Our own stamp, widened against our own clock: exact.
                let rtt = wall_now
                    .wrapping_sub(wire::widen_timestamp_ns(b.echo_timestamp_us, wall_now))
                    .saturating_sub(u64::from(b.hold_ns));
                // Ignore absurd samples (clock steps, forged echoes): > 60 s.
                if rtt < 60_000 * crate::NANOS_PER_MS {
                    p.on_rtt_sample(rtt);
                }
            }
            _ => {}
        }
        self.on_report(now, pid, w, &b.report, ty == PacketType::Echo);
        Received::Consumed
    }
}
