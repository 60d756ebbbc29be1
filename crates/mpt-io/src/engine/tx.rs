//! The send half of the loop: TUN reads to sealed datagrams in batches,
//! for one peer or many ([`Plane`]).
//!
//! Without offloads, one batch read puts each TUN packet straight into a
//! transmit slot, behind the room for the tunnel header; the plane finds
//! its peer, whose tunnel writes the header, picks the path and hands out
//! a seal ticket; the slot is committed to its path's socket with its
//! peer. With offloads, a read is one packet or a TCP/UDP super-packet
//! (TSO/USO) read into scratch and cut into datagram-sized segments, each
//! straight into its transmit slot, inside one [`mpt_core::tunnel::Burst`]
//! of its peer's tunnel so that they share a path (for a peer of another
//! shard, one by one, handed over). At the end of the batch (or when the
//! slots run out) every slot is sealed with its own ticket and its peer's
//! keys, on the workers, and each socket's slots leave in one batch send
//! ([`crate::flush`]).
//!
//! Everything else a peer has to send (control packets, and packets that
//! waited in its queues) leaves through the same slots, in the order its
//! tunnel gives ([`mpt_core::tunnel::Tunnel::poll_transmit`]), drained
//! after every [`Plane::send_batch_max`] of its packets, and for every peer
//! with work each turn ([`Engine::settle`]).
//!
//! Invariants:
//! * datagrams leave each socket in the order the core made them: after
//!   at most [`Plane::send_batch_max`] packets handed to a peer, its
//!   output is drained before the next packet is read;
//! * nothing leaves unsealed when security is on: a slot whose seal fails
//!   is dropped and counted (`no_session`) at its peer;
//! * a session change between a packet's encapsulation and its seal does
//!   not matter: the ticket names the session and nonce;
//! * the segments of one super-packet go to one path, in order; while a
//!   burst is open the slots hold only its peer's datagrams (they are
//!   flushed before it when they hold another peer's).

use std::io;

use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;
use tracing::warn;

use super::{Engine, Plane, BATCH_PACKETS};
use crate::capture::Dir;
use crate::flush::{drain_output, meta, Flush};
use crate::offload::{
    self, segment_at, VnetHdr, GSO_NONE, GSO_UDP_L4, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};
use crate::seam::{Clock, PathIo, Slots, TunDevice};

impl<T: TunDevice, P: PathIo, C: Clock, D: Plane> Engine<T, P, C, D> {
    /// Read up to a batch from the TUN, encapsulate each packet in its
    /// transmit slot, then seal and send them all. Returns whether the TUN
    /// may still have packets.
    pub(super) fn pump_tun(&mut self) -> bool {
        let more = if self.io.tun_offload {
            self.pump_tun_offload()
        } else {
            self.pump_tun_plain()
        };
        let now = self.clock.now();
        self.flush_tx(now);
        more
    }

    /// Seal and send what the transmit slots hold.
    pub(crate) fn flush_tx(&mut self, now: Nanos) {
        let (mut flush, plane) = self.flush_parts();
        flush.run(plane, now);
    }

    /// The transmit slots and what sending them needs, borrowed apart from
    /// the plane (which a burst may hold meanwhile).
    pub(crate) fn flush_parts(&mut self) -> (Flush<'_, P>, &mut D) {
        let Engine {
            tx,
            paths,
            workers,
            seal,
            send_failures,
            hold,
            io,
            plane,
            capture,
            wall_offset,
            ..
        } = self;
        let flush = Flush {
            tx,
            paths,
            workers,
            seal,
            failures: send_failures,
            hold,
            io,
            capture,
            wall_offset: *wall_offset,
            // Several peers: shown as read from the TUN, with the peer.
            capture_inner: !D::NAMES_PEERS,
        };
        (flush, plane)
    }

    /// One batch read straight into the free transmit slots, in reads of
    /// as many packets as a peer takes before its output is drained.
    fn pump_tun_plain(&mut self) -> bool {
        let per_read = self.plane.send_batch_max().clamp(1, BATCH_PACKETS);
        let mut read = 0;
        while read < BATCH_PACKETS {
            let want = per_read.min(BATCH_PACKETS - read);
            if !self.read_into_slots(want) {
                return false;
            }
            read += want;
        }
        true
    }

    /// Up to `max` packets read straight into the free transmit slots and
    /// encapsulated there by their peers, whose output follows them;
    /// whether the TUN may have more.
    fn read_into_slots(&mut self, max: usize) -> bool {
        if self.tx.free() == 0 {
            let now = self.clock.now();
            self.flush_tx(now);
        }
        let want = self.tx.free().min(max);
        let stride = self.tx.slot_bytes();
        let slots = Slots {
            buf: self.tx.free_slots_mut(),
            stride,
            head: HEADER_LEN,
            tail: TAG_LEN,
        };
        let n = match self.tun.read_batch(slots, &mut self.tun_lens[..want]) {
            Ok(n) => n,
            Err(e) => {
                self.tx.end_read();
                return self.read_failed(e);
            }
        };
        self.io.tun_reads += n as u64;
        let now = self.clock.now();
        let wall = self.wall(now);
        self.sent_to.clear();
        for k in 0..n {
            let len = self.tun_lens[k];
            let Some(slot) = self.tx.slot() else {
                break;
            };
            if D::NAMES_PEERS {
                if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                    let pkt = &slot[HEADER_LEN..HEADER_LEN + len];
                    tap.packet(Dir::Out, wall, pkt, "read from the TUN");
                }
            }
            match self.plane.send_unsealed(now, slot, len) {
                Some((peer, t)) => {
                    self.tx.commit(meta(peer, &t));
                    if self.sent_to.last() != Some(&peer) {
                        self.sent_to.push(peer);
                    }
                }
                None => self.tx.skip(),
            }
        }
        self.tx.end_read();
        // What the peers have to send behind them (`max` is at most
        // `send_batch_max`).
        let sent_to = std::mem::take(&mut self.sent_to);
        let (mut flush, plane) = self.flush_parts();
        for &peer in &sent_to {
            drain_output(&mut flush, plane, peer, now);
        }
        self.sent_to = sent_to;
        n == want
    }

    /// Whether to go on after a failed read (only if interrupted).
    fn read_failed(&mut self, e: io::Error) -> bool {
        match e.kind() {
            io::ErrorKind::WouldBlock => false,
            io::ErrorKind::Interrupted => true,
            _ => {
                warn!(tunnel = %self.name, "TUN read failed: {e}");
                false
            }
        }
    }

    /// Up to a batch of reads into scratch, each a packet or a super-packet.
    fn pump_tun_offload(&mut self) -> bool {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut more = true;
        for _ in 0..BATCH_PACKETS {
            let stride = scratch.len();
            let slots = Slots {
                buf: &mut scratch,
                stride,
                head: 0,
                tail: 0,
            };
            let n = match self.tun.read_batch(slots, &mut self.tun_lens[..1]) {
                Ok(_) => self.tun_lens[0],
                Err(e) => {
                    more = self.read_failed(e);
                    if more {
                        continue;
                    }
                    break;
                }
            };
            self.io.tun_reads += 1;
            if n < VNET_HDR_LEN {
                continue;
            }
            let h = VnetHdr::parse(&scratch[..VNET_HDR_LEN]).unwrap_or_default();
            let pkt = &mut scratch[VNET_HDR_LEN..n];
            if h.gso_type == GSO_NONE {
                if h.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0
                    && offload::finish_checksum(pkt, &h).is_err()
                {
                    self.io.offload_errors += 1;
                    continue;
                }
                self.send_copy(pkt);
            } else {
                self.segment_and_send(pkt, &h);
            }
        }
        self.scratch = scratch;
        more
    }

    /// A whole packet read into scratch (offload mode: its size was not
    /// known before the read) goes into the next slot and on to its peer,
    /// whose output follows it.
    fn send_copy(&mut self, pkt: &[u8]) {
        let now = self.clock.now();
        if self.tx.is_full() {
            self.flush_tx(now);
        }
        if D::NAMES_PEERS {
            let wall = self.wall(now);
            if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                tap.packet(Dir::Out, wall, pkt, "read from the TUN");
            }
        }
        let Some(slot) = self.tx.slot() else {
            return;
        };
        let room = slot.len() - HEADER_LEN - TAG_LEN;
        if pkt.len() > room {
            self.tx.skip();
            self.plane.count_unowned(DropReason::TooBig);
            return;
        }
        slot[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(pkt);
        match self.plane.send_unsealed(now, slot, pkt.len()) {
            Some((peer, t)) => {
                self.tx.commit(meta(peer, &t));
                let (mut flush, plane) = self.flush_parts();
                drain_output(&mut flush, plane, peer, now);
            }
            None => self.tx.skip(),
        }
    }

    /// Cut a super-packet into segments: straight into slots inside one
    /// burst of its peer's tunnel, or (a peer of another shard) one by one
    /// through [`Engine::send_copy`].
    fn segment_and_send(&mut self, pkt: &[u8], h: &VnetHdr) {
        let udp = h.gso_type == GSO_UDP_L4;
        let Ok(count) = offload::segments(pkt, h).map(|g| g.count) else {
            self.io.offload_errors += 1;
            return;
        };
        let now = self.clock.now();
        if D::NAMES_PEERS {
            let wall = self.wall(now);
            if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                tap.packet(Dir::Out, wall, pkt, "read from the TUN (to be cut)");
            }
        }
        let cut = match self.burst_segments(pkt, h, count, now) {
            Some(cut) => cut,
            None => {
                let mut seg = std::mem::take(&mut self.seg_scratch);
                let mut cut = 0;
                for i in 0..count {
                    let Ok(len) = segment_at(pkt, h, i, &mut seg) else {
                        self.io.offload_errors += 1;
                        break;
                    };
                    self.send_copy(&seg[..len]);
                    cut += 1;
                }
                self.seg_scratch = seg;
                cut
            }
        };
        let io = &mut self.io;
        let (supers, segments) = if udp {
            (&mut io.uso_super_packets, &mut io.uso_segments)
        } else {
            (&mut io.tso_super_packets, &mut io.tso_segments)
        };
        *supers += 1;
        *segments += cut;
    }

    /// The segments of a super-packet for a peer of this plane, straight
    /// into slots inside one burst of its tunnel; how many were cut
    /// (`None`: no such peer here, nothing done).
    fn burst_segments(&mut self, pkt: &[u8], h: &VnetHdr, count: usize, now: Nanos) -> Option<u64> {
        let per_drain = self.plane.send_batch_max();
        let mut seg = std::mem::take(&mut self.owned_seg);
        let cut = self.burst_segments_with(pkt, h, count, now, per_drain, &mut seg);
        self.owned_seg = seg;
        cut
    }

    fn burst_segments_with(
        &mut self,
        pkt: &[u8],
        h: &VnetHdr,
        count: usize,
        now: Nanos,
        per_drain: usize,
        seg: &mut Vec<u8>,
    ) -> Option<u64> {
        let (mut flush, plane) = self.flush_parts();
        // The slots hold only the burst's peer's datagrams while the burst
        // holds its tunnel (a flush inside seals with that peer's keys).
        if D::NAMES_PEERS && !flush.tx.is_empty() {
            flush.run(plane, now);
        }
        let (peer, burst) = plane.burst(now, pkt, pkt.len(), count)?;
        Some(burst_into(
            &mut flush, peer, burst, pkt, h, count, per_drain, now, seg,
        ))
    }
}

/// The segments of `pkt` into the slots through `burst` (of `peer`).
#[allow(clippy::too_many_arguments)] // the burst and the super-packet
fn burst_into<P: PathIo>(
    flush: &mut Flush<'_, P>,
    peer: mpt_core::concentrator::PeerId,
    mut burst: mpt_core::tunnel::Burst<'_>,
    pkt: &[u8],
    h: &VnetHdr,
    count: usize,
    per_drain: usize,
    now: Nanos,
    seg: &mut Vec<u8>,
) -> u64 {
    let mut cut = 0;
    let mut undrained = 0;
    for i in 0..count {
        if flush.tx.is_full() {
            flush.run(&mut *burst, now);
        }
        let Some(slot) = flush.tx.slot() else {
            break;
        };
        // The segment is built in `seg`, which the tunnel's recovery ring
        // may keep as its copy (one copy fewer per segment).
        let most = slot.len() - TAG_LEN - HEADER_LEN;
        if seg.len() < most {
            seg.resize(most, 0);
        }
        let Ok(len) = segment_at(pkt, h, i, &mut seg[..most]) else {
            flush.io.offload_errors += 1;
            break;
        };
        seg.truncate(len);
        match burst.send_owned(now, seg, slot) {
            Some(t) => flush.tx.commit(meta(peer, &t)),
            None => flush.tx.skip(),
        }
        undrained += 1;
        if undrained >= per_drain {
            drain_output(flush, &mut *burst, peer, now);
            undrained = 0;
        }
        cut += 1;
    }
    if undrained > 0 {
        drain_output(flush, &mut *burst, peer, now);
    }
    cut
}
