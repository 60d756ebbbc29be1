//! What an [`super::Engine`] drives: the data plane of one peer (a
//! [`Tunnel`]) or of many (a concentrator's shard, `crate::hub::PeerSet`).
//! The engine does the I/O (batch reads and sends, offloads, the workers,
//! capture); the plane says which peer a packet or a datagram belongs to
//! and does the protocol. Every transmit and every delivery carries its
//! peer ([`PeerId`]; a single tunnel is peer 0), as wireguard-go's Device
//! carries its Peers.
//!
//! Invariants an implementation keeps:
//! * `send_unsealed`, `burst` and `recv_*` either hand the packet to the
//!   peer they name, hand it to another shard, or count it as a drop;
//! * after at most [`Plane::send_batch_max`] packets to a peer, the
//!   engine drains that peer's output ([`Peers::poll_transmit`]);
//! * [`Plane::take_busy`] names every peer that may have output,
//!   deliveries or events since the last call (a single tunnel: always).

use std::net::SocketAddr;

use mpt_core::concentrator::PeerId;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Burst, OpenTicket, Opener, Received, RecvStart, Transmit, Tunnel};
use mpt_core::Nanos;

use crate::events::EventLog;
use crate::flush::Peers;

/// See the module documentation.
pub trait Plane: Peers {
    /// Whether a capture names each inner packet's peer (several peers:
    /// shown as read from the TUN and as delivered, with the peer's name)
    /// rather than its path (one tunnel: shown as sent and received).
    const NAMES_PEERS: bool;

    /// The tunnel MTU (transmit slots hold one such packet and headers).
    fn mtu(&self) -> usize;
    fn set_wall_offset(&mut self, offset: i64);
    fn poll_timeout(&mut self) -> Option<Nanos>;
    fn handle_timeout(&mut self, now: Nanos);

    /// Packets a peer takes before its output must be drained.
    fn send_batch_max(&self) -> usize;
    /// The inner packet at `slot[HEADER_LEN..HEADER_LEN + len]` to its
    /// peer, encapsulated in place (sealing is the caller's, by ticket).
    fn send_unsealed(
        &mut self,
        now: Nanos,
        slot: &mut [u8],
        len: usize,
    ) -> Option<(PeerId, Transmit)>;
    /// A burst of `packets` segments of the inner packet `pkt` on its
    /// peer's tunnel (`None`: no such peer here; send them one by one).
    fn burst(
        &mut self,
        now: Nanos,
        pkt: &[u8],
        bytes: usize,
        packets: usize,
    ) -> Option<(PeerId, Burst<'_>)>;
    /// A drop that belongs to no peer.
    fn count_unowned(&mut self, why: DropReason);

    /// First half of a datagram's receive: its peer, and whether it wants
    /// opening.
    fn recv_start(
        &mut self,
        now: Nanos,
        socket: usize,
        from: SocketAddr,
        data: &mut [u8],
        outer_ecn: u8,
    ) -> (Option<PeerId>, RecvStart);
    fn opener(&self, peer: PeerId) -> Option<Opener<'_>>;
    #[allow(clippy::too_many_arguments)] // the datagram, its peer and ticket
    fn recv_finish(
        &mut self,
        now: Nanos,
        peer: PeerId,
        from: SocketAddr,
        data: &mut [u8],
        ticket: &OpenTicket,
        opened: Result<usize, DropReason>,
    ) -> Received;
    /// What `peer` delivers: the packet its datagram carried (`arrived`),
    /// then what its reorder buffer releases ([`Tunnel::deliver`]).
    fn deliver(
        &mut self,
        peer: PeerId,
        arrived: Option<(&Received, &[u8])>,
        write: impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize;

    /// The peers that may have work since the last call, into `into`.
    fn take_busy(&mut self, into: &mut Vec<PeerId>);
    /// After the engine drained `peer`'s output and deliveries: its events
    /// logged, its own bookkeeping done.
    fn settle_peer(&mut self, peer: PeerId, log: &mut EventLog, name: &str);
    /// A datagram of the plane's own, not of a peer: (socket, to, bytes).
    fn poll_own(&mut self) -> Option<(usize, SocketAddr, Vec<u8>)> {
        None
    }
    /// Log what happened that belongs to no peer.
    fn log_own(&mut self, _name: &str) {}
    /// How a capture names `peer`'s delivered packets.
    fn peer_label(&self, _peer: PeerId) -> String {
        String::new()
    }
    /// Packets waiting to leave, over every peer (a stop drains them).
    fn queued(&self) -> usize;
}

/// One peer: the single tunnel (its peer id is 0).
impl Plane for Tunnel {
    const NAMES_PEERS: bool = false;

    fn queued(&self) -> usize {
        Tunnel::queued(self)
    }

    fn mtu(&self) -> usize {
        Tunnel::mtu(self)
    }
    fn set_wall_offset(&mut self, offset: i64) {
        Tunnel::set_wall_offset(self, offset);
    }
    fn poll_timeout(&mut self) -> Option<Nanos> {
        Tunnel::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Nanos) {
        Tunnel::handle_timeout(self, now);
    }
    fn send_batch_max(&self) -> usize {
        Tunnel::send_batch_max(self)
    }
    fn send_unsealed(
        &mut self,
        now: Nanos,
        slot: &mut [u8],
        len: usize,
    ) -> Option<(PeerId, Transmit)> {
        Tunnel::send_unsealed(self, now, slot, len).map(|t| (0, t))
    }
    fn burst(
        &mut self,
        now: Nanos,
        _pkt: &[u8],
        bytes: usize,
        packets: usize,
    ) -> Option<(PeerId, Burst<'_>)> {
        Some((0, Tunnel::burst(self, now, bytes, packets)))
    }
    fn count_unowned(&mut self, why: DropReason) {
        Tunnel::count_drop(self, why);
    }
    fn recv_start(
        &mut self,
        now: Nanos,
        socket: usize,
        from: SocketAddr,
        data: &mut [u8],
        outer_ecn: u8,
    ) -> (Option<PeerId>, RecvStart) {
        (
            Some(0),
            Tunnel::recv_start(self, now, socket, from, data, outer_ecn),
        )
    }
    fn opener(&self, _: PeerId) -> Option<Opener<'_>> {
        Some(Tunnel::opener(self))
    }
    fn recv_finish(
        &mut self,
        now: Nanos,
        _: PeerId,
        from: SocketAddr,
        data: &mut [u8],
        ticket: &OpenTicket,
        opened: Result<usize, DropReason>,
    ) -> Received {
        Tunnel::recv_finish(self, now, from, data, ticket, opened)
    }
    fn deliver(
        &mut self,
        _: PeerId,
        arrived: Option<(&Received, &[u8])>,
        write: impl FnMut(&[u8]) -> Result<(), DropReason>,
    ) -> usize {
        Tunnel::deliver(self, arrived, write)
    }
    fn take_busy(&mut self, into: &mut Vec<PeerId>) {
        into.push(0);
    }
    fn settle_peer(&mut self, _: PeerId, log: &mut EventLog, name: &str) {
        while let Some(e) = self.poll_event() {
            log.log(name, self, e);
        }
    }
}
