//! A datagram to its peer: a handshake initiation by the static key it
//! carries (after its mac1, and under load a valid cookie: `guard.rs`),
//! anything else by the peer slot in the top bits of the session index it
//! names, both in O(1); then the peer's own tunnel takes it.
//!
//! Invariants: a datagram that names no peer, or a peer this shard does not
//! own, is a counted drop or a handoff, never given to another peer's
//! tunnel; an initiation never costs a Diffie-Hellman before its mac1
//! (and, under load, its cookie) checked.

use std::net::SocketAddr;

use super::*;
use crate::tunnel::{OpenTicket, Opener, RecvStart};

impl Concentrator {
    /// A datagram named a session of no peer here: the guard may tell its
    /// sender ([`guard::Guard::hint`]).
    fn hint_unknown(&mut self, now: Nanos, local_key: usize, from: SocketAddr, buf: &[u8]) {
        let path = self.path_at(local_key);
        let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
        let peers = self.peer_count();
        self.guard
            .hint(now, local_key, path, from, buf, peers, wall);
    }

    /// Our path id on socket `local_key` (the first path there).
    fn path_at(&self, local_key: usize) -> u8 {
        self.template
            .paths
            .iter()
            .position(|p| p.local_key == local_key)
            .unwrap_or(0) as u8
    }

    /// Which peer a datagram is for: `Err` is the drop.
    pub(super) fn peer_of(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &[u8],
    ) -> Result<(PeerId, bool), DropReason> {
        let h = Header::new_checked(buf).map_err(|_| DropReason::Truncated)?;
        if h.packet_type() != PacketType::HandshakeInit {
            let id = index_slot(h.session());
            if !self.owns(id) {
                return Ok((id, false));
            }
            let has_tunnel = self
                .peers
                .get(id as usize)
                .and_then(Option::as_ref)
                .is_some_and(|p| p.tunnel.is_some());
            return if has_tunnel {
                Ok((id, false))
            } else {
                Err(DropReason::UnknownPeer)
            };
        }
        let body = buf
            .get(HEADER_LEN..HEADER_LEN + INIT_NOISE_LEN)
            .ok_or(DropReason::Truncated)?;
        if !self.macs.check_mac1(buf) {
            return Err(DropReason::HandshakeBadMac);
        }
        let path = self.path_at(local_key);
        let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
        let peers = self.peer_count();
        self.guard
            .admit(now, local_key, path, from, buf, peers, wall)?;
        let key = initiator_static(&self.private, body).map_err(|_| DropReason::HandshakeFailed)?;
        match self.by_key.get(&key) {
            Some(&id) => Ok((id, true)),
            None => {
                self.unknown_keys += 1;
                if self.unknown_keys.is_power_of_two() {
                    self.events.push_back((
                        None,
                        Event::Security(CryptoEvent::Failed {
                            reason: "initiation from a static key that is no peer's",
                            unknown_key: Some(key),
                        }),
                    ));
                }
                Err(DropReason::UnknownPeer)
            }
        }
    }

    /// A datagram arrived on socket `local_key` from `from`: the peer it
    /// belongs to (if found) and what its tunnel made of it. A delivered
    /// inner packet has a source in that peer's allowed IPs.
    pub fn recv(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
    ) -> (Option<PeerId>, Received) {
        self.recv_ecn(now, local_key, from, buf, 0)
    }

    /// [`Concentrator::recv`] of a datagram whose outer header carried the
    /// ECN bits `outer_ecn` (RFC 6040; a datagram handed to another shard
    /// leaves them behind, as only handshakes are).
    pub fn recv_ecn(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
        outer_ecn: u8,
    ) -> (Option<PeerId>, Received) {
        match self.recv_start(now, local_key, from, buf, outer_ecn) {
            (peer, RecvStart::Done(r)) => (peer, r),
            (Some(id), RecvStart::Open(t)) => {
                let opened = match self.opener(id) {
                    Some(o) => o.open(&t, buf),
                    None => Err(DropReason::UnknownPeer),
                };
                (Some(id), self.recv_finish(now, id, from, buf, &t, opened))
            }
            (None, RecvStart::Open(_)) => (None, Received::Consumed),
        }
    }

    /// [`Concentrator::recv`] once the datagram's peer is known (and owned).
    #[allow(clippy::too_many_arguments)] // the datagram and where it came from
    pub(super) fn recv_for(
        &mut self,
        now: Nanos,
        id: PeerId,
        init: bool,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
        outer_ecn: u8,
    ) -> (Option<PeerId>, Received) {
        if init {
            self.make_tunnel(id, now);
        }
        let Some(t) = self.tunnel_mut(id) else {
            self.drops.add(DropReason::UnknownPeer);
            self.hint_unknown(now, local_key, from, buf);
            return (None, Received::Dropped(DropReason::UnknownPeer));
        };
        let r = t.recv_ecn(now, local_key, from, buf, outer_ecn);
        let r = self.check_source(id, r, buf);
        self.touch(id);
        (Some(id), r)
    }

    /// The first half of [`Concentrator::recv_ecn`], split around the AEAD
    /// work as [`Tunnel::recv_start`] is: the datagram's peer, and whether
    /// its tunnel is done with it or wants it opened (with
    /// [`Concentrator::opener`], then [`Concentrator::recv_finish`]).
    pub fn recv_start(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        buf: &mut [u8],
        outer_ecn: u8,
    ) -> (Option<PeerId>, RecvStart) {
        let (id, init) = match self.peer_of(now, local_key, from, buf) {
            Ok(x) => x,
            Err(r) => {
                self.drops.add(r);
                if r == DropReason::UnknownPeer {
                    self.hint_unknown(now, local_key, from, buf);
                }
                return (None, RecvStart::Done(Received::Dropped(r)));
            }
        };
        if !self.owns(id) {
            self.hand_off_datagram(id, init, local_key, from, buf);
            return (None, RecvStart::Done(Received::Consumed));
        }
        if init {
            self.make_tunnel(id, now);
        }
        let Some(t) = self.tunnel_mut(id) else {
            self.drops.add(DropReason::UnknownPeer);
            return (
                None,
                RecvStart::Done(Received::Dropped(DropReason::UnknownPeer)),
            );
        };
        let r = match t.recv_start(now, local_key, from, buf, outer_ecn) {
            RecvStart::Done(r) => RecvStart::Done(self.check_source(id, r, buf)),
            open => open,
        };
        self.touch(id);
        (Some(id), r)
    }

    /// Peer `id`'s opener, for a datagram [`Concentrator::recv_start`]
    /// passed on (`None`: the peer is gone).
    pub fn opener(&self, id: PeerId) -> Option<Opener<'_>> {
        self.tunnel(id).map(Tunnel::opener)
    }

    /// The second half of [`Concentrator::recv_ecn`] for a datagram of
    /// peer `id` that [`Concentrator::recv_start`] passed on, with what the
    /// opener said. A delivered inner packet has a source in the peer's
    /// allowed IPs.
    pub fn recv_finish(
        &mut self,
        now: Nanos,
        id: PeerId,
        from: SocketAddr,
        buf: &mut [u8],
        ticket: &OpenTicket,
        opened: Result<usize, DropReason>,
    ) -> Received {
        let Some(t) = self.tunnel_mut(id) else {
            self.drops.add(DropReason::UnknownPeer);
            return Received::Dropped(DropReason::UnknownPeer);
        };
        let r = t.recv_finish(now, from, buf, ticket, opened);
        let r = self.check_source(id, r, buf);
        self.touch(id);
        r
    }

    /// Make peer `id`'s tunnel at its first handshake.
    fn make_tunnel(&mut self, id: PeerId, now: Nanos) {
        let seed = self.seed_for(id);
        let (template, offset) = (&self.template, self.wall_offset);
        if let Some(p) = self.peers[id as usize].as_mut() {
            if p.tunnel.is_none() {
                p.ensure_tunnel(template, id, seed, now);
                if let Some(t) = p.tunnel.as_mut() {
                    t.set_wall_offset(offset);
                }
            }
        }
    }

    /// A packet peer `id`'s tunnel delivers must come from the peer's
    /// allowed IPs: otherwise it is dropped and counted (at the peer).
    fn check_source(&mut self, id: PeerId, r: Received, buf: &[u8]) -> Received {
        let Received::Deliver { offset, len } = r else {
            return r;
        };
        let pkt = &buf[offset..offset + len];
        let src = src_addr(pkt);
        if src.is_some_and(|a| self.allowed.allows(id, a)) {
            return r;
        }
        let why = if link_scoped(src, dst_addr(pkt)) {
            DropReason::LinkLocal
        } else {
            DropReason::SourceNotAllowed
        };
        if let Some(p) = self.peers[id as usize].as_mut() {
            if why == DropReason::SourceNotAllowed {
                p.source_not_allowed += 1;
            }
            if let Some(t) = p.tunnel.as_mut() {
                t.count_drop(why);
            }
        }
        Received::Dropped(why)
    }
}
