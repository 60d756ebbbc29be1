//! The receive half of the loop: datagrams from a path socket to the TUN,
//! for one peer or many ([`Plane`]).
//!
//! One batch receive fills up to [`BATCH_PACKETS`] buffers (each possibly
//! several datagrams coalesced by UDP GRO). Every datagram goes through
//! `recv_start` in arrival order (the plane finds its peer); those that
//! need a key are opened together on the workers, each with its peer's
//! opener and the header the core parsed once ([`OpenTicket`]); then
//! `recv_finish` runs on them in arrival order, and whatever the peer
//! delivers is written to the TUN through the coalescing writer (one call,
//! [`Plane::deliver`]: the packet in place, then what its reorder buffer
//! releases).
//!
//! Invariants:
//! * the core sees datagrams in the order the socket gave them, so the
//!   per-path FIFO assumption of the reorder policy holds;
//! * the TUN writer is flushed at the end of every batch.

use std::io;

use mpt_core::concentrator::PeerId;
use mpt_core::crypto::TAG_LEN;
use mpt_core::qos::ecn::ECN_MASK;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{OpenTicket, Received, RecvStart};
use mpt_core::wire::{Header, PacketType, HEADER_LEN};

use super::{normalize, Engine, Plane, BATCH_PACKETS};
use crate::capture::{Dir, Tap};
use crate::seam::{Clock, PathIo, TunDevice};
use crate::tunwrite::TunWriter;

impl<T: TunDevice, P: PathIo, C: Clock, D: Plane> Engine<T, P, C, D> {
    /// Receive a batch from socket `i`, then take it in three steps:
    /// `recv_start` on every datagram (serial), open the ones that passed
    /// (on the workers), `recv_finish` on them in arrival order (serial),
    /// delivering as the peers release. Returns whether the socket may
    /// still have datagrams.
    pub(super) fn pump_socket(&mut self, i: usize) -> bool {
        let (bufs, meta) = self.recv_batch.parts_mut();
        let n = match self.paths.recv(i, bufs, meta) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            // ICMP errors from earlier sends surface here; try again.
            Err(_) => return true,
        };
        self.io.udp_recv_calls += 1;
        self.io.udp_datagrams_received += n as u64;
        self.io.max_recv_batch = self.io.max_recv_batch.max(n as u64);
        let now = self.clock.now();
        let wall = self.wall(now);
        let Engine {
            recv_batch,
            plane,
            tun,
            writer,
            io,
            workers,
            open,
            capture,
            tun_write_failures,
            ..
        } = self;
        let mut tap = capture.as_mut().filter(|t| t.active_now());
        let mut out = Out {
            tun,
            writer,
            failures: tun_write_failures,
            wall,
        };
        open.clear();
        for k in 0..n {
            let m = recv_batch.meta(k);
            let Some(from) = m.from.map(normalize) else {
                continue;
            };
            let parts = m.len.div_ceil(m.segment.max(1)) as u64;
            io.udp_datagrams_received += parts.saturating_sub(1);
            for span in recv_batch.datagrams(k) {
                let data = recv_batch.slice_mut(span);
                if let Some(t) = tap.as_mut() {
                    t.datagram(Dir::In, i, wall, data);
                }
                match plane.recv_start(now, i, from, data, m.tos & ECN_MASK) {
                    (Some(peer), RecvStart::Open(t)) => {
                        open.spans.push(span);
                        open.from.push(from);
                        open.tickets.push(t);
                        open.peers.push(peer);
                    }
                    (peer, RecvStart::Done(r)) => {
                        if let (Some(t), false) = (tap.as_mut(), D::NAMES_PEERS) {
                            // Plaintext: the path is the peer's id here.
                            capture_inbound(t, &r, u8::MAX, wall, data);
                        }
                        if let Some(peer) = peer {
                            out.deliver(plane, tap.as_deref_mut(), peer, Some((&r, data)));
                        }
                    }
                    (None, RecvStart::Open(_)) => {}
                }
            }
        }
        if !open.spans.is_empty() {
            open.results.clear();
            open.results
                .resize(open.spans.len(), Err(DropReason::NoSession));
            let opening: &D = plane;
            let tickets: &[OpenTicket] = &open.tickets;
            open.by_peer.run(
                workers,
                recv_batch.bufs_mut(),
                &open.spans,
                &open.peers,
                &mut open.results,
                Err(DropReason::NoSession),
                |p| opening.opener(p),
                |opener, j, d| opener.open(&tickets[j], d),
            );
            for j in 0..open.spans.len() {
                let data = recv_batch.slice_mut(open.spans[j]);
                let (peer, t) = (open.peers[j], &open.tickets[j]);
                let r = plane.recv_finish(now, peer, open.from[j], data, t, open.results[j]);
                if let (Some(c), false) = (tap.as_mut(), D::NAMES_PEERS) {
                    capture_inbound(c, &r, t.fields.path, wall, data);
                }
                out.deliver(plane, tap.as_deref_mut(), peer, Some((&r, data)));
            }
        }
        self.flush_writer();
        n == BATCH_PACKETS.min(self.recv_batch.capacity())
    }

    /// What `peer` delivers outside a receive batch: what a datagram
    /// handed over by another shard carried (`arrived`), or what its
    /// reorder buffer releases after a timer (`None`).
    pub(crate) fn deliver(
        &mut self,
        peer: PeerId,
        arrived: Option<(&Received, &[u8])>,
        now: mpt_core::Nanos,
    ) {
        let wall = self.wall(now);
        let Engine {
            plane,
            tun,
            writer,
            capture,
            tun_write_failures,
            ..
        } = self;
        let tap = capture.as_mut().filter(|t| t.active_now());
        let mut out = Out {
            tun,
            writer,
            failures: tun_write_failures,
            wall,
        };
        out.deliver(plane, tap, peer, arrived);
    }

    pub(super) fn flush_writer(&mut self) {
        if !self.writer.flush(&mut self.tun) {
            self.tun_write_failures += 1;
            self.plane.count_unowned(DropReason::TunWriteFailed);
        }
    }
}

/// Where delivered packets go: the TUN through the coalescing writer.
struct Out<'a, T> {
    tun: &'a mut T,
    writer: &'a mut TunWriter,
    failures: &'a mut u64,
    wall: u64,
}

impl<T: TunDevice> Out<'_, T> {
    /// Write what `peer` delivers ([`Plane::deliver`]); a capture that
    /// names peers sees each packet with its peer's name.
    fn deliver<D: Plane>(
        &mut self,
        plane: &mut D,
        mut tap: Option<&mut Tap>,
        peer: PeerId,
        arrived: Option<(&Received, &[u8])>,
    ) {
        let label = match (&tap, D::NAMES_PEERS) {
            (Some(_), true) => Some(plane.peer_label(peer)),
            _ => None,
        };
        let wall = self.wall;
        let Out {
            tun,
            writer,
            failures,
            ..
        } = self;
        plane.deliver(peer, arrived, |p| {
            if let (Some(t), Some(l)) = (tap.as_deref_mut(), label.as_deref()) {
                t.packet(Dir::In, wall, p, l);
            }
            if writer.write(&mut **tun, p) {
                Ok(())
            } else {
                **failures += 1;
                Err(DropReason::TunWriteFailed)
            }
        });
    }
}

/// Show an inbound data packet to a capture when its datagram arrived:
/// delivered at once, or held for reordering (`Consumed`); its header is
/// still in `data`.
fn capture_inbound(tap: &mut Tap, r: &Received, path: u8, wall: u64, data: &[u8]) {
    let is_data = Header::new_checked(data).is_ok_and(|h| h.packet_type() == PacketType::Data);
    match *r {
        Received::Deliver { len, .. } => tap.inner(Dir::In, path, wall, data, len, false),
        Received::Consumed if is_data => {
            let rest = data.len().saturating_sub(HEADER_LEN + TAG_LEN);
            let len = inner_len(data).unwrap_or(rest);
            tap.inner(Dir::In, path, wall, data, len, true);
        }
        _ => {}
    }
}

/// The inner packet's length from its own IP header (the datagram may
/// carry a tag after it).
fn inner_len(data: &[u8]) -> Option<usize> {
    let ip = data.get(HEADER_LEN..)?;
    match ip.first()? >> 4 {
        4 => Some(usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]))),
        6 => Some(40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]))),
        _ => None,
    }
}
