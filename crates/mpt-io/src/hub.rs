//! A concentrator shard's loop: the same [`Engine`] as a single tunnel's,
//! driving a [`PeerSet`] (many peers, one TUN queue, one set of path
//! sockets) instead of one [`mpt_core::tunnel::Tunnel`]. [`Hub`] is that engine.
//!
//! The engine reads TUN packets into transmit slots, and the peer set
//! sends each to the peer that holds its destination
//! ([`Concentrator::send_unsealed`]; a TCP/UDP super-packet is cut inside
//! one burst of that peer's tunnel); datagrams go to the peer their
//! session index or handshake names ([`Concentrator::recv_start`]), are
//! opened on the workers with that peer's keys, and what the peer
//! delivers is written to the TUN (coalesced into GRO super-packets with
//! offloads). Each turn then settles every peer with work: its output
//! (handshake answers, probes, queued packets), deliveries, events, and
//! whether it is live (a session and a path up: routes for the driver).
//! Packets and datagrams of another shard's peers are handed over
//! (`shards.rs`) and taken here ([`Hub::take_handoff`]).
//!
//! Invariants:
//! * a turn never blocks; each source gives at most one batch per turn;
//! * every I/O error on a packet is a counted drop in the peer's tunnel
//!   (or the concentrator's own counters), and the loop continues;
//! * work per turn follows the peers that have something to do, not the
//!   number of peers configured.

use std::io;
use std::net::SocketAddr;

use mpt_core::concentrator::{Concentrator, Handoff, PeerId};
use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Burst, OpenTicket, Opener, Received, RecvStart, Sealer, Transmit};
use mpt_core::wire::HEADER_LEN;
use mpt_core::{Nanos, PathId};

use crate::engine::{Engine, Plane};
use crate::events::EventLog;
use crate::flush::{drain_output, meta, Peers};
use crate::seam::{Clock, PathIo, TunDevice};
use crate::workers::Workers;

/// A concentrator shard's loop.
pub type Hub<T, P, C> = Engine<T, P, C, PeerSet>;

/// What a concentrator shard's engine drives: its [`Concentrator`] and
/// which of its peers are live, as last seen.
pub struct PeerSet {
    conc: Concentrator,
    /// Per peer: whether it is live (a session and a path up).
    live: Vec<bool>,
    /// Peers whose liveness changed, for the driver (routes to announce).
    changes: Vec<(PeerId, bool)>,
}

impl PeerSet {
    pub fn new(conc: Concentrator) -> Self {
        Self {
            conc,
            live: Vec::new(),
            changes: Vec::new(),
        }
    }
}

impl Peers for PeerSet {
    fn sealer(&self, peer: PeerId) -> Option<Sealer<'_>> {
        self.conc.sealer(peer)
    }
    fn count_drop(&mut self, peer: PeerId, why: DropReason) {
        Peers::count_drop(&mut self.conc, peer, why);
    }
    fn on_send_error(&mut self, peer: PeerId, path: PathId, hard: bool, now: Nanos) {
        Peers::on_send_error(&mut self.conc, peer, path, hard, now);
    }
    fn on_send_held(&mut self, peer: PeerId, path: PathId) {
        Peers::on_send_held(&mut self.conc, peer, path);
    }
    fn poll_transmit(&mut self, peer: PeerId, now: Nanos, slot: &mut [u8]) -> Option<Transmit> {
        Peers::poll_transmit(&mut self.conc, peer, now, slot)
    }
}

impl Plane for PeerSet {
    const NAMES_PEERS: bool = true;

    fn queued(&self) -> usize {
        let c = &self.conc;
        c.peer_ids()
            .filter(|id| c.owns(*id))
            .filter_map(|id| c.tunnel(id))
            .map(|t| t.queued())
            .sum()
    }

    fn mtu(&self) -> usize {
        self.conc.mtu()
    }
    fn set_wall_offset(&mut self, offset: i64) {
        self.conc.set_wall_offset(offset);
    }
    fn poll_timeout(&mut self) -> Option<Nanos> {
        self.conc.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.conc.handle_timeout(now);
    }
    fn send_batch_max(&self) -> usize {
        self.conc.send_batch_max()
    }
    fn send_unsealed(
        &mut self,
        now: Nanos,
        slot: &mut [u8],
        len: usize,
    ) -> Option<(PeerId, Transmit)> {
        self.conc.send_unsealed(now, slot, len)
    }
    fn burst(
        &mut self,
        now: Nanos,
        pkt: &[u8],
        bytes: usize,
        packets: usize,
    ) -> Option<(PeerId, Burst<'_>)> {
        self.conc.burst(now, pkt, bytes, packets)
    }
    fn count_unowned(&mut self, why: DropReason) {
        self.conc.count_drop(why);
    }
    fn recv_start(
        &mut self,
        now: Nanos,
        socket: usize,
        from: SocketAddr,
        data: &mut [u8],
        outer_ecn: u8,
    ) -> (Option<PeerId>, RecvStart) {
        self.conc.recv_start(now, socket, from, data, outer_ecn)
    }
    fn opener(&self, peer: PeerId) -> Option<Opener<'_>> {
        self.conc.opener(peer)
    }
    fn recv_finish(
        &mut self,
        now: Nanos,
        peer: PeerId,
        from: SocketAddr,
        data: &mut [u8],
        ticket: &OpenTicket,
        opened: Result<usize, DropReason>,
    ) -> Received {
        self.conc.recv_finish(now, peer, from, data, ticket, opened)
    }
    fn deliver(
        &mut self,
        peer: PeerId,
        arrived: Option<(&Received, &[u8])>,
        write: impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize {
        self.conc.deliver(peer, arrived, write)
    }
    fn take_busy(&mut self, into: &mut Vec<PeerId>) {
        while let Some(id) = self.conc.next_busy() {
            into.push(id);
        }
    }
    fn settle_peer(&mut self, id: PeerId, log: &mut EventLog, name: &str) {
        if let Some((cfg, t)) = self.conc.peer_tunnel_mut(id) {
            let peer_name = &cfg.name;
            while let Some(e) = t.poll_event() {
                log.log(&format!("{name}/{peer_name}"), t, e);
            }
            let now_live = t.has_session()
                && (0..t.path_count()).any(|i| t.path(i as u8).is_some_and(|p| p.up));
            if self.live.len() <= id as usize {
                self.live.resize(id as usize + 1, false);
            }
            if self.live[id as usize] != now_live {
                self.live[id as usize] = now_live;
                self.changes.push((id, now_live));
            }
        }
        self.conc.rearm(id);
    }
    fn poll_own(&mut self) -> Option<(usize, SocketAddr, Vec<u8>)> {
        self.conc.poll_transmit()
    }
    fn log_own(&mut self, name: &str) {
        while let Some((_, e)) = self.conc.poll_event() {
            if let mpt_core::tunnel::Event::Security(
                mpt_core::crypto::state::CryptoEvent::Failed {
                    unknown_key: Some(k),
                    ..
                },
            ) = e
            {
                tracing::warn!(
                    tunnel = %name,
                    key = %mpt_core::crypto::keys::encode(&k),
                    "handshake from a static key that is no peer's (add it as a [[peer]] if it is a client)"
                );
            }
        }
    }
    fn peer_label(&self, peer: PeerId) -> String {
        from_peer(&self.conc, Some(peer))
    }
}

/// The concentrator shard's side of the engine.
impl<T: TunDevice, P: PathIo, C: Clock> Engine<T, P, C, PeerSet> {
    /// A shard's loop over `conc` (its own thread alone seals and opens
    /// until [`Engine::with_workers`]).
    pub fn for_concentrator(tun: T, paths: P, clock: C, conc: Concentrator, name: &str) -> Self {
        Engine::new(
            tun,
            paths,
            clock,
            PeerSet::new(conc),
            name,
            Workers::inline(),
        )
    }

    pub fn concentrator(&self) -> &Concentrator {
        &self.plane().conc
    }
    pub fn concentrator_mut(&mut self) -> &mut Concentrator {
        &mut self.plane_mut().conc
    }

    /// Peers that became live (a session and a path up: the client is
    /// here) or stopped being live since the last call.
    pub fn take_changes(&mut self) -> Vec<(PeerId, bool)> {
        std::mem::take(&mut self.plane_mut().changes)
    }

    /// Forget a removed peer's liveness (its slot may be reused); whether
    /// it was live.
    pub fn forget(&mut self, id: PeerId) -> bool {
        self.plane_mut()
            .live
            .get_mut(id as usize)
            .is_some_and(|l| std::mem::replace(l, false))
    }

    /// Wait in `poll` for readiness, or until the next deadline (not at
    /// all while `busy`: a source still has input; never past the end of
    /// a stop's `drain`). `false`: interrupted by a signal, wait again.
    pub(crate) fn wait(
        &mut self,
        poll: &mut mio::Poll,
        events: &mut mio::Events,
        busy: bool,
        drain: &crate::stop::Drain,
    ) -> io::Result<bool> {
        let now = self.clock.now();
        let timeout = if busy {
            Some(std::time::Duration::ZERO)
        } else {
            self.poll_timeout()
                .map(|t| std::time::Duration::from_nanos(t.saturating_sub(now)))
        };
        let timeout = drain.wait_cap(now, timeout);
        let waiting = std::time::Instant::now();
        let polled = poll.poll(events, timeout);
        self.add_idle(waiting.elapsed());
        match polled {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Take what another shard read for one of this shard's peers (then
    /// [`Hub::settle`] once for all of them).
    pub fn take_handoff(&mut self, h: Handoff) {
        let now = self.clock.now();
        match h {
            Handoff::Packet { bytes, .. } => {
                let len = bytes.len();
                if self.tx.is_full() {
                    self.flush_tx(now);
                }
                let Some(slot) = self.tx.slot() else {
                    return;
                };
                if HEADER_LEN + len + TAG_LEN > slot.len() {
                    self.tx.skip();
                    return; // cannot be: the other shard read it into the same room
                }
                slot[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&bytes);
                match self.plane.conc.send_handed_unsealed(now, slot, len) {
                    Some((peer, t)) => {
                        self.tx.commit(meta(peer, &t));
                        let (mut flush, plane) = self.flush_parts();
                        drain_output(&mut flush, plane, peer, now);
                    }
                    None => self.tx.skip(),
                }
            }
            Handoff::Datagram {
                local_key,
                from,
                peer,
                mut bytes,
                ..
            } => {
                let (peer, r) = self
                    .plane
                    .conc
                    .recv_handed(now, local_key, from, peer, &mut bytes);
                if let Some(peer) = peer {
                    self.deliver(peer, Some((&r, &bytes)), now);
                }
            }
        }
    }

    /// Settle every peer with work (after handoffs were taken).
    pub fn settle(&mut self) {
        let now = self.clock.now();
        self.settle_peers(now);
    }
}

/// How a capture names the peer of a delivered packet.
fn from_peer(conc: &Concentrator, peer: Option<PeerId>) -> String {
    match peer.and_then(|p| conc.peer(p)) {
        Some(p) => format!("from peer {}", p.cfg.name),
        None => "from an unknown peer".into(),
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
