//! A concentrator spread over threads: one [`Concentrator`] per shard,
//! each serving the peers whose id is its index modulo the shard count.
//!
//! Every shard holds every peer's configuration and prefixes (so each can
//! find any peer, and the control plane applies the same additions and
//! removals in the same order to all, which gives every peer the same id
//! everywhere), but only the owner makes its tunnel and drives it. What a
//! shard reads but does not own is handed off, as bytes, to the owner:
//!
//! * an inner packet from the TUN whose destination is another shard's
//!   peer ([`Handoff::Packet`]): the owner sends it as if it had read it;
//! * a datagram naming another shard's peer in its session index, or a
//!   handshake initiation whose static key is another shard's peer
//!   ([`Handoff::Datagram`], with the peer found): the owner takes it as
//!   if it had arrived on its own socket, without a second lookup (the
//!   initiation was already admitted and its key already found).
//!
//! A shard is a thread in the daemon (`mpt-io`'s shard loop), and the I/O
//! layer steers most traffic to its owner before it is read (each shard
//! its own TUN queue and its own socket in a `SO_REUSEPORT` group), so
//! handoffs are the exception; they keep a peer's packets in one tunnel,
//! and so in one order, whichever thread read them.
//!
//! Invariants:
//! * a peer's tunnel exists only in its owner shard;
//! * a handoff is made only for a peer that belongs to another shard, and
//!   a handed-off packet is taken exactly once, by its owner;
//! * with one shard (the default) nothing is ever handed off.

use std::net::SocketAddr;

use super::{Concentrator, PeerId};
use crate::tunnel::Received;
use crate::wire::HEADER_LEN;
use crate::Nanos;

/// What one shard read and another must handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    /// An inner packet read from the TUN (without header room).
    Packet { shard: usize, bytes: Vec<u8> },
    /// A datagram received on socket `local_key` from `from`; `peer` is
    /// the peer a handshake initiation was found to come from (`None` for
    /// anything else, found again by its session index).
    Datagram {
        shard: usize,
        local_key: usize,
        from: SocketAddr,
        peer: Option<PeerId>,
        bytes: Vec<u8>,
    },
}

impl Handoff {
    /// The shard that must handle it.
    pub fn shard(&self) -> usize {
        match self {
            Self::Packet { shard, .. } | Self::Datagram { shard, .. } => *shard,
        }
    }
}

/// Handoffs made and taken by one shard (status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandoffCounts {
    pub packets_out: u64,
    pub datagrams_out: u64,
    pub taken: u64,
}

impl Concentrator {
    /// Make this concentrator shard `index` of `count` (see the module
    /// documentation). Call before any peer connects.
    pub fn set_shard(&mut self, index: usize, count: usize) {
        assert!(count >= 1 && index < count, "shard {index} of {count}");
        self.shard = (index, count);
    }

    /// (index, count) of this shard.
    pub fn shard(&self) -> (usize, usize) {
        self.shard
    }

    /// The shard that owns peer `id`.
    pub fn shard_of(&self, id: PeerId) -> usize {
        id as usize % self.shard.1
    }

    /// Whether this shard owns peer `id`.
    pub fn owns(&self, id: PeerId) -> bool {
        self.shard_of(id) == self.shard.0
    }

    /// The next packet or datagram for another shard.
    pub fn poll_handoff(&mut self) -> Option<Handoff> {
        self.handoffs.pop_front()
    }

    pub fn handoff_counts(&self) -> HandoffCounts {
        self.handoff_counts
    }

    pub(super) fn hand_off_packet(&mut self, id: PeerId, buf: &[u8], len: usize) {
        self.handoff_counts.packets_out += 1;
        let bytes = buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        let shard = self.shard_of(id);
        self.handoffs.push_back(Handoff::Packet { shard, bytes });
    }

    pub(super) fn hand_off_datagram(
        &mut self,
        id: PeerId,
        init: bool,
        local_key: usize,
        from: SocketAddr,
        buf: &[u8],
    ) {
        self.handoff_counts.datagrams_out += 1;
        let shard = self.shard_of(id);
        self.handoffs.push_back(Handoff::Datagram {
            shard,
            local_key,
            from,
            peer: init.then_some(id),
            bytes: buf.to_vec(),
        });
    }

    /// Take a datagram another shard handed off (its fields as in
    /// [`Handoff::Datagram`]): as [`Concentrator::recv`], except that an
    /// initiation's peer is already known.
    pub fn recv_handed(
        &mut self,
        now: Nanos,
        local_key: usize,
        from: SocketAddr,
        peer: Option<PeerId>,
        buf: &mut [u8],
    ) -> (Option<PeerId>, Received) {
        self.handoff_counts.taken += 1;
        match peer {
            Some(id) if self.owns(id) && self.peer(id).is_some() => {
                self.recv_for(now, id, true, local_key, from, buf, 0)
            }
            Some(_) => {
                // Removed (or moved) in between: as for any unknown peer.
                let r = crate::stats::DropReason::UnknownPeer;
                self.drops.add(r);
                (None, Received::Dropped(r))
            }
            None => self.recv(now, local_key, from, buf),
        }
    }

    /// Take an inner packet another shard handed off: as
    /// [`Concentrator::send`], with `buf[HEADER_LEN..HEADER_LEN + len]`
    /// holding it.
    pub fn send_handed(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        len: usize,
    ) -> Option<(PeerId, crate::tunnel::Transmit)> {
        self.handoff_counts.taken += 1;
        self.send(now, buf, len)
    }

    /// [`Concentrator::send_handed`] without the seal (see
    /// [`Concentrator::send_unsealed`]).
    pub fn send_handed_unsealed(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        len: usize,
    ) -> Option<(PeerId, crate::tunnel::Transmit)> {
        self.handoff_counts.taken += 1;
        self.send_unsealed(now, buf, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{client_inner_addr, client_peer, concentrator_template};

    fn shards(n: usize) -> Vec<Concentrator> {
        (0..n)
            .map(|i| {
                let mut c = Concentrator::new(concentrator_template(2)).unwrap();
                c.set_shard(i, n);
                for p in 0..5 {
                    assert_eq!(c.add_peer(client_peer(p)), Ok(p), "same ids everywhere");
                }
                c
            })
            .collect()
    }

    fn packet_to(c: u32) -> Vec<u8> {
        let mut p = vec![0u8; HEADER_LEN + 20];
        let ip = &mut p[HEADER_LEN..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&20u16.to_be_bytes());
        ip[12..16].copy_from_slice(&[10, 99, 0, 1]);
        ip[16..20].copy_from_slice(&client_inner_addr(c).octets());
        p
    }

    #[test]
    fn a_packet_for_another_shards_peer_is_handed_to_it_once() {
        let mut s = shards(2);
        assert!(s[0].owns(0) && s[0].owns(4) && !s[0].owns(1) && s[1].owns(3));
        // Peer 3 belongs to shard 1: shard 0 hands the packet off.
        let mut p = packet_to(3);
        assert_eq!(s[0].send(0, &mut p, 20), None);
        let h = s[0].poll_handoff().expect("handed off");
        assert_eq!(h.shard(), 1);
        assert_eq!(s[0].poll_handoff(), None);
        assert_eq!(s[0].handoff_counts().packets_out, 1);
        // Its own peer 2 is not handed off (no session yet: a counted drop).
        let mut p = packet_to(2);
        assert_eq!(s[0].send(0, &mut p, 20), None);
        assert_eq!(s[0].poll_handoff(), None);
        // The owner takes it as its own (no session either: no handoff).
        let Handoff::Packet { bytes, .. } = h else {
            panic!("a packet")
        };
        assert_eq!(&bytes[..], &packet_to(3)[HEADER_LEN..]);
        let mut buf = vec![0u8; HEADER_LEN + bytes.len() + 16];
        buf[HEADER_LEN..HEADER_LEN + bytes.len()].copy_from_slice(&bytes);
        assert_eq!(s[1].send_handed(0, &mut buf, bytes.len()), None);
        assert_eq!(s[1].poll_handoff(), None);
        assert_eq!(s[1].handoff_counts().taken, 1);
    }

    #[test]
    fn one_shard_hands_nothing_off() {
        let mut s = shards(1);
        for c in 0..5 {
            let mut p = packet_to(c);
            s[0].send(0, &mut p, 20);
        }
        assert_eq!(s[0].poll_handoff(), None);
    }
}
