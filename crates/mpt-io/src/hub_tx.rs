//! The concentrator's send half: TUN reads to its peers' datagrams, through
//! the transmit slots and flush it shares with the single tunnel's engine
//! ([`crate::flush`]).
//!
//! Without offloads, a batch read puts each packet straight into a
//! transmit slot; the concentrator finds its peer by destination and that
//! peer's tunnel encapsulates it there. With offloads (`IFF_VNET_HDR`), a
//! read is one packet or a TCP/UDP super-packet, read into scratch; a
//! super-packet for a peer of this shard is cut into segments straight
//! into slots inside one burst of that peer's tunnel (one path for all),
//! one for another shard's peer is cut and handed over segment by segment.
//!
//! Invariants:
//! * a peer's output is drained after at most
//!   [`Concentrator::send_batch_max`] of its packets (its pieces leave
//!   right behind a packet cut in pieces);
//! * the slots hold only the burst's peer's datagrams while a burst is
//!   open (they are flushed before it), so that a flush inside the burst
//!   seals each with the right keys;
//! * every packet read is sent, handed off, or counted as a drop.

use std::io;

use mpt_core::concentrator::Concentrator;
use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

use super::Hub;
use crate::capture::Dir;
use crate::engine::BATCH_PACKETS;
use crate::flush::{drain_output, meta, Flush};
use crate::offload::{
    self, segment_at, VnetHdr, GSO_NONE, GSO_UDP_L4, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};
use crate::seam::{Clock, PathIo, Slots, TunDevice};

impl<T: TunDevice, P: PathIo, C: Clock> Hub<T, P, C> {
    /// The transmit slots and what sending them needs, borrowed apart from
    /// the concentrator.
    pub(super) fn flush_parts(&mut self) -> (Flush<'_, P>, &mut Concentrator) {
        let Hub {
            tx,
            paths,
            workers,
            seal,
            send_failures,
            io,
            conc,
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
            io,
            capture,
            wall_offset: *wall_offset,
            // Shown as read from the TUN, before the peer is known.
            capture_inner: false,
        };
        (flush, conc)
    }

    /// Seal and send what the transmit slots hold.
    pub(super) fn flush_tx(&mut self, now: Nanos) {
        let (mut flush, conc) = self.flush_parts();
        flush.run(conc, now);
    }

    /// Read a batch from the TUN, each packet straight into a transmit
    /// slot and on to its peer, in reads of as many packets as a peer
    /// takes before its output is drained; then send everything.
    pub(super) fn pump_tun(&mut self) -> bool {
        let more = if self.io.tun_offload {
            self.pump_tun_offload()
        } else {
            self.pump_tun_plain()
        };
        let now = self.clock.now();
        self.drain_busy(now);
        more
    }

    /// Up to a batch of packets read straight into the transmit slots.
    fn pump_tun_plain(&mut self) -> bool {
        let per_read = self.conc.send_batch_max().clamp(1, BATCH_PACKETS);
        let mut read = 0;
        let mut more = true;
        while read < BATCH_PACKETS {
            let want = per_read.min(BATCH_PACKETS - read);
            if !self.read_into_slots(want) {
                more = false;
                break;
            }
            read += want;
        }
        more
    }
    /// Up to `max` packets read straight into the free transmit slots and
    /// handed to their peers, whose output follows them; whether the TUN
    /// may have more.
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
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => return false,
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
            if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                let pkt = &slot[HEADER_LEN..HEADER_LEN + len];
                tap.packet(Dir::Out, wall, pkt, "read from the TUN");
            }
            match self.conc.send_unsealed(now, slot, len) {
                Some((peer, t)) => {
                    self.tx.commit(meta(peer, &t));
                    self.sent_to.push(peer);
                }
                None => self.tx.skip(),
            }
        }
        let sent_to = std::mem::take(&mut self.sent_to);
        let (mut flush, conc) = self.flush_parts();
        for &peer in &sent_to {
            drain_output(&mut flush, conc, peer, now);
        }
        self.sent_to = sent_to;
        n == want
    }

    /// Up to a batch of reads into scratch, each a packet or a
    /// super-packet (offload mode); whether the TUN may have more.
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
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    more = false;
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

    /// A whole packet read into scratch goes into the next slot and on to
    /// its peer, whose output follows it.
    fn send_copy(&mut self, pkt: &[u8]) {
        let now = self.clock.now();
        if self.tx.is_full() {
            self.flush_tx(now);
        }
        let wall = self.wall(now);
        if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
            tap.packet(Dir::Out, wall, pkt, "read from the TUN");
        }
        let Some(slot) = self.tx.slot() else {
            return;
        };
        if HEADER_LEN + pkt.len() + TAG_LEN > slot.len() {
            self.tx.skip();
            self.conc.count_drop(DropReason::TooBig);
            return;
        }
        slot[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(pkt);
        match self.conc.send_unsealed(now, slot, pkt.len()) {
            Some((peer, t)) => {
                self.tx.commit(meta(peer, &t));
                let (mut flush, conc) = self.flush_parts();
                drain_output(&mut flush, conc, peer, now);
            }
            None => self.tx.skip(),
        }
    }

    /// Cut a super-packet into segments: for a peer of this shard, straight
    /// into slots inside one burst of its tunnel; otherwise one by one
    /// through [`Hub::send_copy`] (handed off, or counted).
    fn segment_and_send(&mut self, pkt: &[u8], h: &VnetHdr) {
        let udp = h.gso_type == GSO_UDP_L4;
        let Ok(count) = offload::segments(pkt, h).map(|g| g.count) else {
            self.io.offload_errors += 1;
            return;
        };
        let now = self.clock.now();
        let wall = self.wall(now);
        if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
            tap.packet(Dir::Out, wall, pkt, "read from the TUN (to be cut)");
        }
        // The slots hold only the burst's peer's datagrams from here on.
        self.flush_tx(now);
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

    /// The segments of a super-packet for a peer of this shard, straight
    /// into slots inside one burst of its tunnel, then sent; how many were
    /// cut (`None`: no such peer here, nothing done).
    fn burst_segments(&mut self, pkt: &[u8], h: &VnetHdr, count: usize, now: Nanos) -> Option<u64> {
        let per_drain = self.conc.send_batch_max();
        let (mut flush, conc) = self.flush_parts();
        let (peer, mut burst) = conc.burst(now, pkt, pkt.len(), count)?;
        let mut cut = 0;
        let mut undrained = 0;
        for i in 0..count {
            if flush.tx.is_full() {
                flush.run(&mut *burst, now);
            }
            let Some(slot) = flush.tx.slot() else {
                break;
            };
            let end = slot.len() - TAG_LEN;
            let Ok(len) = segment_at(pkt, h, i, &mut slot[HEADER_LEN..end]) else {
                flush.io.offload_errors += 1;
                break;
            };
            match burst.send_unsealed(now, slot, len) {
                Some(t) => flush.tx.commit(meta(peer, &t)),
                None => flush.tx.skip(),
            }
            undrained += 1;
            if undrained >= per_drain {
                drain_output(&mut flush, &mut *burst, peer, now);
                undrained = 0;
            }
            cut += 1;
        }
        if undrained > 0 {
            drain_output(&mut flush, &mut *burst, peer, now);
        }
        drop(burst);
        // Sealed with this peer's keys before another peer's datagrams
        // join the slots.
        flush.run(conc, now);
        Some(cut)
    }
}
