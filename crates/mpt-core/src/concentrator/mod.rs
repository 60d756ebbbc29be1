//! A concentrator: one server, many peers, one set of path sockets (see
//! `docs/deploy.md`).
//!
//! Each peer has a [`Tunnel`] of its own (session, paths learned through
//! NAT, reorder buffer, scheduler, counters), made at its first valid
//! handshake ([`peer`]). The concentrator only finds the peer:
//!
//! * a datagram: a handshake initiation by the static key it carries
//!   (after its mac1, which costs one keyed hash, so a flood without our
//!   public key never reaches a Diffie-Hellman, and under load after a
//!   valid cookie, [`guard`]), anything else by the peer
//!   slot in the top bits of the session index it names — O(1) both;
//! * an inner packet from the TUN: by the longest prefix of the peers'
//!   allowed IPs that contains its destination ([`table`]).
//!
//! Inner packets a peer delivers must come from its allowed IPs, as in
//! WireGuard, so that no client can speak with another's addresses.
//!
//! Spread over threads, each thread runs one concentrator as a shard that
//! drives only its own peers and hands the rest off ([`shard`]).
//!
//! The I/O layer drives it like a tunnel, with the peer named in every
//! result: [`Concentrator::recv`], [`Concentrator::send`],
//! [`Concentrator::deliver_ready`], [`Concentrator::poll_transmit`],
//! [`Concentrator::poll_timeout`] / [`Concentrator::handle_timeout`].
//!
//! Invariants:
//! * every datagram or packet not handed to a peer is counted under one
//!   [`DropReason`] (`unknown_peer`, `no_route`, `source_not_allowed`,
//!   `link_local` for a client TUN's own IPv6 link chatter, or the
//!   header's);
//! * an idle peer costs its configuration and its prefixes, nothing else;
//! * work is proportional to the peers that have something to do: peers
//!   with output wait in a work list, deadlines in a heap (stale entries
//!   are skipped), never a scan of all peers;
//! * a peer's packets stay in its own tunnel, in its order.

mod demux;
pub mod guard;
pub mod peer;
pub mod shard;
pub mod table;
pub mod update;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use blake2::{Blake2s256, Digest};

pub use peer::{Peer, PeerConfig, PeerLimits};
pub use shard::{Handoff, HandoffCounts};
pub use table::{AllowedIps, PeerId};
pub use update::PeerChange;

use crate::crypto::cookie::MacKeys;
use crate::crypto::handshake::{initiator_static, INIT_NOISE_LEN};
use crate::crypto::keys::PrivateKey;
use crate::crypto::state::{index_slot, CryptoEvent, INDEX_SLOT_BITS};
use crate::ip::Ip;
use crate::stats::{DropCounters, DropReason};
use crate::tunnel::{Event, Received, Transmit, Tunnel, TunnelConfig};
use crate::wire::{Header, PacketType, HEADER_LEN};
use crate::Nanos;

/// Most peers one concentrator holds: the slots a session index can name.
pub const MAX_PEERS: usize = 1 << INDEX_SLOT_BITS;

/// See the module documentation.
pub struct Concentrator {
    template: TunnelConfig,
    private: PrivateKey,
    /// mac1 of initiations to us (keyed by our public key).
    macs: MacKeys,
    /// Load check and cookies before the peer lookup's Diffie-Hellman.
    guard: guard::Guard,
    peers: Vec<Option<Peer>>,
    free: Vec<PeerId>,
    by_key: HashMap<[u8; 32], PeerId>,
    allowed: AllowedIps,
    /// Peers that may have output (transmits, events, ready packets).
    work: VecDeque<PeerId>,
    timers: BinaryHeap<Reverse<(Nanos, PeerId)>>,
    drops: DropCounters,
    /// Incarnations of peer tunnels made so far (seed derivation).
    made: u64,
    wall_offset: i64,
    events: VecDeque<(Option<PeerId>, Event)>,
    unknown_keys: u64,
    /// Peers due in [`Concentrator::handle_timeout`] (kept for its room).
    due_scratch: Vec<PeerId>,
    /// (index, count): this shard serves the peers `id % count == index`.
    shard: (usize, usize),
    handoffs: VecDeque<Handoff>,
    handoff_counts: HandoffCounts,
}

/// Why a peer could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerError {
    /// Another peer has this public key.
    DuplicateKey(PeerId),
    /// Another peer holds this prefix.
    PrefixTaken(ipnet::IpNet, PeerId),
    Full,
    /// No peer with this id (or it holds another key).
    NoSuchPeer(PeerId),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DuplicateKey(p) => write!(f, "peer {p} has the same public key"),
            Self::PrefixTaken(n, p) => write!(f, "allowed IP {n} belongs to peer {p} already"),
            Self::Full => write!(f, "{MAX_PEERS} peers are configured; at most {MAX_PEERS}"),
            Self::NoSuchPeer(p) => write!(f, "no peer {p} with this public key"),
        }
    }
}

fn src_addr(pkt: &[u8]) -> Option<IpAddr> {
    addr_at(pkt, true)
}

fn dst_addr(pkt: &[u8]) -> Option<IpAddr> {
    addr_at(pkt, false)
}

/// An IPv6 packet that only speaks to its link: from a link-local or the
/// unspecified address, or to a link-scope multicast group (ff02::/16).
fn link_scoped(src: Option<IpAddr>, dst: Option<IpAddr>) -> bool {
    let link_local = |a: &std::net::Ipv6Addr| a.segments()[0] & 0xffc0 == 0xfe80;
    match (src, dst) {
        (Some(IpAddr::V6(s)), Some(IpAddr::V6(d))) => {
            link_local(&s) || s.is_unspecified() || d.segments()[0] == 0xff02
        }
        _ => false,
    }
}

fn addr_at(pkt: &[u8], src: bool) -> Option<IpAddr> {
    let ip = Ip::parse(pkt)?;
    let (s, d) = ip.addresses(pkt);
    let b = if src { s } else { d };
    Some(match b.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
        _ => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
    })
}

impl Concentrator {
    /// A concentrator whose peers' tunnels follow `template` (paths are
    /// the server's sockets; security names the server's private key and
    /// is required: sessions are how datagrams find their peer).
    pub fn new(template: TunnelConfig) -> Result<Self, String> {
        let sec = template
            .security
            .as_ref()
            .ok_or("a concentrator needs security: session indices name the peers")?;
        let private = sec.identity.private.clone();
        let macs = MacKeys::new(&private.public());
        let mut gseed = [0u8; 32];
        gseed.copy_from_slice(&Blake2s256::digest([&template.seed[..], b"guard"].concat()));
        let guard = guard::Guard::new(&private.public(), gseed);
        Ok(Self {
            template,
            private,
            macs,
            guard,
            peers: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            allowed: AllowedIps::new(),
            work: VecDeque::new(),
            timers: BinaryHeap::new(),
            drops: DropCounters::default(),
            made: 0,
            wall_offset: 0,
            events: VecDeque::new(),
            unknown_keys: 0,
            due_scratch: Vec::new(),
            shard: (0, 1),
            handoffs: VecDeque::new(),
            handoff_counts: HandoffCounts::default(),
        })
    }

    /// Wire timestamps are `now + offset` (see [`Tunnel::set_wall_offset`]).
    pub fn set_wall_offset(&mut self, offset: i64) {
        self.wall_offset = offset;
        for t in self
            .peers
            .iter_mut()
            .flatten()
            .filter_map(|p| p.tunnel.as_mut())
        {
            t.set_wall_offset(offset);
        }
    }

    /// Add a peer; its prefixes take effect at once.
    pub fn add_peer(&mut self, cfg: PeerConfig) -> Result<PeerId, PeerError> {
        if let Some(&p) = self.by_key.get(&cfg.public_key.0) {
            return Err(PeerError::DuplicateKey(p));
        }
        let id = match self.free.last() {
            Some(&id) => id,
            None if self.peers.len() < MAX_PEERS => self.peers.len() as PeerId,
            None => return Err(PeerError::Full),
        };
        for (i, net) in cfg.allowed_ips.iter().enumerate() {
            if let Err(holder) = self.allowed.insert(*net, id) {
                for n in &cfg.allowed_ips[..i] {
                    self.allowed.remove(*n, id);
                }
                return Err(PeerError::PrefixTaken(*net, holder));
            }
        }
        if self.free.last() == Some(&id) {
            self.free.pop();
        } else {
            self.peers.push(None);
        }
        self.by_key.insert(cfg.public_key.0, id);
        self.peers[id as usize] = Some(Peer::new(cfg));
        Ok(id)
    }

    /// Remove a peer: its prefixes, its tunnel and its sessions go; the
    /// other peers are not touched. Its slot is reused later (a datagram
    /// still naming it then fails to authenticate, a counted drop).
    pub fn remove_peer(&mut self, id: PeerId) -> Option<PeerConfig> {
        let peer = self.peers.get_mut(id as usize)?.take()?;
        for n in &peer.cfg.allowed_ips {
            self.allowed.remove(*n, id);
        }
        self.by_key.remove(&peer.cfg.public_key.0);
        self.free.push(id);
        Some(peer.cfg)
    }

    /// Change a peer's limits (a reload); a tunnel already made follows at
    /// once. `false` when there is no such peer.
    pub fn set_limits(&mut self, id: PeerId, limits: PeerLimits, now: Nanos) -> bool {
        let Some(p) = self.peers.get_mut(id as usize).and_then(Option::as_mut) else {
            return false;
        };
        if let Some(t) = p.tunnel.as_mut() {
            limits.apply(t, &self.template, now);
        }
        p.cfg.limits = limits;
        true
    }

    pub fn peer(&self, id: PeerId) -> Option<&Peer> {
        self.peers.get(id as usize)?.as_ref()
    }

    /// Ids of the configured peers, ascending.
    pub fn peer_ids(&self) -> impl Iterator<Item = PeerId> + '_ {
        (0..self.peers.len() as PeerId).filter(|i| self.peers[*i as usize].is_some())
    }

    /// The server's own paths (its sockets; every peer's tunnel has
    /// them).
    pub fn server_paths(&self) -> &[crate::path::PathConfig] {
        &self.template.paths
    }

    pub fn peer_count(&self) -> usize {
        self.peers.len() - self.free.len()
    }

    /// The peer whose allowed IPs hold `addr`.
    pub fn route(&self, addr: IpAddr) -> Option<PeerId> {
        self.allowed.lookup(addr)
    }

    /// Drops that belong to no peer.
    pub fn drops(&self) -> &DropCounters {
        &self.drops
    }

    /// The tunnel MTU every peer's tunnel has (the template's).
    pub fn mtu(&self) -> usize {
        self.template.mtu
    }

    /// Count a drop that belongs to no peer (a packet too large for any).
    pub fn count_drop(&mut self, why: DropReason) {
        self.drops.add(why);
    }

    /// Queue a peer in the work list. Its timer is re-armed once, after the
    /// caller drained it ([`Concentrator::rearm`]), not on every packet.
    fn touch(&mut self, id: PeerId) {
        if let Some(p) = self.peers.get_mut(id as usize).and_then(Option::as_mut) {
            if !p.touched {
                p.touched = true;
                self.work.push_back(id);
            }
        }
    }

    fn seed_for(&mut self, id: PeerId) -> [u8; 32] {
        self.made += 1;
        let mut h = Blake2s256::new();
        h.update(b"mpt concentrator peer seed");
        h.update(self.template.seed);
        h.update(id.to_be_bytes());
        h.update(self.made.to_be_bytes());
        h.finalize().into()
    }

    /// Send the inner packet at `buf[HEADER_LEN..HEADER_LEN + len]` to the
    /// peer that holds its destination (see [`Tunnel::send`]).
    pub fn send(&mut self, now: Nanos, buf: &mut [u8], len: usize) -> Option<(PeerId, Transmit)> {
        let id = self.route_packet(buf, len)?;
        let t = self.peers[id as usize].as_mut()?.tunnel.as_mut()?;
        let tx = t.send(now, buf, len);
        self.touch(id);
        tx.map(|tx| (id, tx))
    }

    /// [`Concentrator::send`] without the seal: the caller seals the
    /// datagram with its peer's sealer ([`Concentrator::sealer`]) by the
    /// ticket in the transmit (see [`Tunnel::send_unsealed`]), a batch of
    /// them at a time, on workers.
    pub fn send_unsealed(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        len: usize,
    ) -> Option<(PeerId, Transmit)> {
        let id = self.route_packet(buf, len)?;
        let t = self.peers[id as usize].as_mut()?.tunnel.as_mut()?;
        let tx = t.send_unsealed(now, buf, len);
        self.touch(id);
        tx.map(|tx| (id, tx))
    }

    /// The peer with a tunnel, owned here, that the inner packet at
    /// `buf[HEADER_LEN..HEADER_LEN + len]` goes to; otherwise the packet
    /// is handed off to its shard or counted as a drop.
    fn route_packet(&mut self, buf: &[u8], len: usize) -> Option<PeerId> {
        let dst = buf.get(HEADER_LEN..HEADER_LEN + len).and_then(dst_addr);
        let Some(id) = dst.and_then(|a| self.allowed.lookup(a)) else {
            self.drops.add(DropReason::NoRoute);
            return None;
        };
        if !self.owns(id) {
            self.hand_off_packet(id, buf, len);
            return None;
        }
        let has_tunnel = self.peers[id as usize]
            .as_ref()
            .is_some_and(|p| p.tunnel.is_some());
        if !has_tunnel {
            // The peer has never connected: nowhere to send.
            self.drops.add(DropReason::NoSession);
            return None;
        }
        Some(id)
    }

    /// A burst ([`Tunnel::burst`]) on the tunnel of the peer that holds the
    /// destination of `pkt` (an inner packet to be cut into `packets`
    /// segments of `bytes` in all), if this shard owns that peer and it
    /// has a tunnel; `None` otherwise (send the segments one by one with
    /// [`Concentrator::send_unsealed`], which hands them off or counts
    /// them).
    pub fn burst(
        &mut self,
        now: Nanos,
        pkt: &[u8],
        bytes: usize,
        packets: usize,
    ) -> Option<(PeerId, crate::tunnel::Burst<'_>)> {
        let id = dst_addr(pkt).and_then(|a| self.allowed.lookup(a))?;
        let ready = self.owns(id)
            && self.peers[id as usize]
                .as_ref()
                .is_some_and(|p| p.tunnel.is_some());
        if !ready {
            return None;
        }
        self.touch(id);
        let t = self.peers[id as usize].as_mut()?.tunnel.as_mut()?;
        Some((id, t.burst(now, bytes, packets)))
    }

    /// How many packets [`Concentrator::send_unsealed`] may take before the
    /// caller drains the output of the peers it sent to: as
    /// [`Tunnel::send_batch_max`], the same for every peer (their tunnels
    /// share the template's MTU and datagram size).
    pub fn send_batch_max(&self) -> usize {
        let c = &self.template;
        if c.datagram_body.unwrap_or(c.mtu) >= c.mtu {
            usize::MAX
        } else {
            1
        }
    }

    /// Peer `id`'s sealer, for datagrams made by
    /// [`Concentrator::send_unsealed`] (`None`: no such peer, or it has no
    /// tunnel).
    pub fn sealer(&self, id: PeerId) -> Option<crate::tunnel::Sealer<'_>> {
        self.tunnel(id).map(Tunnel::sealer)
    }

    /// [`Tunnel::deliver`] for peer `id`: the packet its datagram carried
    /// in place (its source checked by `recv_*`), then what its reorder
    /// buffer releases; sources outside the peer's allowed IPs are dropped
    /// and counted.
    pub fn deliver(
        &mut self,
        id: PeerId,
        arrived: Option<(&Received, &[u8])>,
        mut write: impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize {
        let mut n = 0;
        if let Some((&Received::Deliver { offset, len }, datagram)) = arrived {
            let r = datagram.get(offset..offset + len).map(&mut write);
            match (r, self.tunnel_mut(id)) {
                (Some(Ok(())), _) => n += 1,
                (Some(Err(why)), Some(t)) => t.count_drop(why),
                (None, Some(t)) => t.count_drop(DropReason::Truncated),
                (_, None) => self.drops.add(DropReason::UnknownPeer),
            }
        }
        n + self.deliver_ready(id, write)
    }

    /// Hand every inner packet that a peer's reorder buffer releases to
    /// `write`, with its peer; sources outside the peer's allowed IPs are
    /// dropped and counted.
    pub fn deliver_ready(
        &mut self,
        id: PeerId,
        mut write: impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize {
        let allowed = &self.allowed;
        let Some(p) = self.peers.get_mut(id as usize).and_then(Option::as_mut) else {
            return 0;
        };
        let Some(t) = p.tunnel.as_mut() else {
            return 0;
        };
        let mut refused = 0;
        let n = t.deliver_ready(|pkt| {
            let src = src_addr(pkt);
            if src.is_some_and(|a| allowed.allows(id, a)) {
                write(pkt)
            } else if link_scoped(src, dst_addr(pkt)) {
                Err(DropReason::LinkLocal)
            } else {
                refused += 1;
                Err(DropReason::SourceNotAllowed)
            }
        });
        p.source_not_allowed += refused;
        n
    }

    /// The next peer that may have output, to drain with
    /// [`Concentrator::tunnel_mut`] (`poll_transmit`,
    /// `deliver_ready`, `poll_event`) and then [`Concentrator::rearm`];
    /// `None` when no peer has any.
    pub fn next_busy(&mut self) -> Option<PeerId> {
        while let Some(id) = self.work.pop_front() {
            if let Some(p) = self.peers.get_mut(id as usize).and_then(Option::as_mut) {
                p.touched = false;
                return Some(id);
            }
        }
        None
    }

    /// A peer's tunnel (made at its first handshake).
    pub fn tunnel_mut(&mut self, id: PeerId) -> Option<&mut Tunnel> {
        self.peers
            .get_mut(id as usize)?
            .as_mut()?
            .tunnel
            .as_deref_mut()
    }

    /// A peer's configuration and its tunnel together (names for logs while
    /// the tunnel is driven).
    pub fn peer_tunnel_mut(&mut self, id: PeerId) -> Option<(&PeerConfig, &mut Tunnel)> {
        let p = self.peers.get_mut(id as usize)?.as_mut()?;
        Some((&p.cfg, p.tunnel.as_deref_mut()?))
    }

    pub fn tunnel(&self, id: PeerId) -> Option<&Tunnel> {
        self.peers.get(id as usize)?.as_ref()?.tunnel.as_deref()
    }

    /// A datagram of the concentrator's own (a cookie reply under load, a
    /// session-unknown hint):
    /// (socket, destination, bytes).
    pub fn poll_transmit(&mut self) -> Option<(usize, SocketAddr, Vec<u8>)> {
        self.guard.poll_transmit()
    }

    /// Cookie replies sent under load (status).
    pub fn cookies_sent(&self) -> u64 {
        self.guard.cookies_sent
    }

    /// Session-unknown hints sent for datagrams that named no peer's
    /// session (status; a peer's own tunnel counts its own).
    pub fn session_unknown_sent(&self) -> u64 {
        self.guard.hints_sent
    }

    /// Datagrams of no peer's session left without a hint because their
    /// source had one within `guard::HINT_SOURCE_SPACING_NS` (status).
    pub fn session_unknown_spaced(&self) -> u64 {
        self.guard.hints_spaced
    }

    /// Events that belong to no peer (an unknown key called).
    pub fn poll_event(&mut self) -> Option<(Option<PeerId>, Event)> {
        self.events.pop_front()
    }

    /// Earliest deadline of any peer.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            let live = self
                .peers
                .get(id as usize)
                .and_then(Option::as_ref)
                .is_some_and(|p| p.deadline == Some(t));
            if live {
                return Some(t);
            }
            self.timers.pop();
        }
        None
    }

    /// Run the timers of every peer due at `now`, each once; those peers
    /// join the work list. (A peer's next deadline may already be due —
    /// queued packets wait for `poll_transmit`, not for a timer — so the due
    /// peers are collected first: re-armed ones wait for the next call.)
    pub fn handle_timeout(&mut self, now: Nanos) {
        let mut due = std::mem::take(&mut self.due_scratch);
        due.clear();
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let live = self
                .peers
                .get(id as usize)
                .and_then(Option::as_ref)
                .is_some_and(|p| p.deadline == Some(t));
            if live {
                due.push(id);
            }
        }
        for &id in &due {
            let Some(p) = self.peers.get_mut(id as usize).and_then(Option::as_mut) else {
                continue;
            };
            p.deadline = None;
            if let Some(tun) = p.tunnel.as_mut() {
                tun.handle_timeout(now);
            }
            self.touch(id);
        }
        self.due_scratch = due;
    }

    /// Re-arm a peer's timer after driving its tunnel (also after polling
    /// it through [`Concentrator::tunnel_mut`]).
    pub fn rearm(&mut self, id: PeerId) {
        if let Some(p) = self.peers.get_mut(id as usize).and_then(Option::as_mut) {
            let d = p.tunnel.as_mut().and_then(|t| t.poll_timeout());
            if let Some(t) = d.filter(|_| d != p.deadline) {
                self.timers.push(Reverse((t, id)));
            }
            p.deadline = d;
        }
    }
}
