//! The send half of the loop: TUN reads to sealed datagrams in batches.
//!
//! Without offloads, one batch read puts each TUN packet straight into a
//! transmit slot, behind the room for the tunnel header; the core writes
//! the header, picks the path and hands out a seal ticket; the slot is
//! committed to its path's socket. With offloads, a read is one packet or
//! a TCP/UDP super-packet (TSO/USO) read into scratch and cut into
//! datagram-sized segments, each straight into its transmit slot, inside
//! one [`mpt_core::tunnel::Burst`] so that they share a path. At the end
//! of the batch (or when the slots run out) every slot is sealed with its
//! own ticket, on the workers, and each socket's slots leave in one batch
//! send.
//!
//! Everything else the core has to send (control packets, and packets
//! that waited in its queues) leaves through the same slots, in the order
//! the core gives ([`Tunnel::poll_transmit`], drained after every
//! [`Tunnel::send_batch_max`] sends, each turn and at the core's
//! deadline: [`Engine::send_output`]).
//!
//! Invariants:
//! * datagrams leave each socket in the order the core made them: after
//!   at most [`Tunnel::send_batch_max`] packets handed to the core, its
//!   output is drained before the next packet is read;
//! * nothing leaves unsealed when security is on: a slot whose seal fails
//!   is dropped and counted (`no_session`);
//! * a session change between a packet's encapsulation and its seal does
//!   not matter: the ticket names the session and nonce;
//! * the segments of one super-packet go to one path, in order.

use std::io;

use mpt_core::concentrator::PeerId;
use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::Tunnel;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;
use tracing::warn;

use super::{Engine, BATCH_PACKETS};
use crate::flush::{drain_output, meta, Flush};
use crate::offload::{
    self, segment_at, VnetHdr, GSO_NONE, GSO_UDP_L4, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};
use crate::seam::{Clock, PathIo, Slots, TunDevice};

/// A single tunnel is peer 0 of its slots.
const PEER: PeerId = 0;

impl<T: TunDevice, P: PathIo, C: Clock> Engine<T, P, C> {
    /// Read up to a batch from the TUN, encapsulate each packet in its
    /// transmit slot, then seal and send them all. Returns whether the TUN
    /// may still have packets.
    pub(super) fn pump_tun(&mut self) -> bool {
        let more = if self.io.tun_offload {
            self.pump_tun_offload()
        } else {
            self.pump_tun_plain()
        };
        self.flush_tx();
        more
    }

    /// Send what the core has to send by itself now (control packets,
    /// packets whose path has budget again), through the transmit slots
    /// like packets read from the TUN.
    pub(super) fn send_output(&mut self) {
        let now = self.clock.now();
        let (mut flush, tunnel) = self.flush_parts();
        drain_output(&mut flush, tunnel, PEER, now);
        flush.run(tunnel, now);
    }

    fn flush_tx(&mut self) {
        let now = self.clock.now();
        let (mut flush, tunnel) = self.flush_parts();
        flush.run(tunnel, now);
    }

    /// The transmit slots and what sending them needs, borrowed apart from
    /// the tunnel (which a burst may hold meanwhile).
    fn flush_parts(&mut self) -> (Flush<'_, P>, &mut Tunnel) {
        let Engine {
            tx,
            paths,
            workers,
            seal,
            send_failures,
            io,
            tunnel,
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
            capture_inner: true,
        };
        (flush, tunnel)
    }

    /// One batch read straight into the free transmit slots, in reads of
    /// as many packets as the core takes before its output is drained.
    fn pump_tun_plain(&mut self) -> bool {
        let per_read = self.tunnel.send_batch_max().clamp(1, BATCH_PACKETS);
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
    /// encapsulated there; whether the TUN may have more.
    fn read_into_slots(&mut self, max: usize) -> bool {
        if self.tx.free() == 0 {
            self.flush_tx();
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
            Err(e) => return self.read_failed(e),
        };
        self.io.tun_reads += n as u64;
        let now = self.clock.now();
        for k in 0..n {
            let len = self.tun_lens[k];
            let Some(slot) = self.tx.slot() else {
                break;
            };
            match self.tunnel.send_unsealed(now, slot, len) {
                Some(t) => self.tx.commit(meta(PEER, &t)),
                None => self.tx.skip(),
            }
        }
        // What the core has to send behind them (`max` is at most
        // `send_batch_max`).
        self.drain_output(now);
        n == want
    }

    /// Put the core's output ([`Tunnel::poll_transmit`]) into the transmit
    /// slots behind what is there.
    fn drain_output(&mut self, now: Nanos) {
        let (mut flush, tunnel) = self.flush_parts();
        drain_output(&mut flush, tunnel, PEER, now);
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
                self.encapsulate_copy(pkt);
            } else {
                self.segment_and_send(pkt, &h);
            }
        }
        self.scratch = scratch;
        more
    }

    /// A whole packet read into scratch (offload mode: its size was not
    /// known before the read) goes into the next slot.
    fn encapsulate_copy(&mut self, pkt: &[u8]) {
        if self.tx.is_full() {
            self.flush_tx();
        }
        let now = self.clock.now();
        let Some(slot) = self.tx.slot() else {
            return;
        };
        let room = slot.len() - HEADER_LEN - TAG_LEN;
        if pkt.len() > room {
            self.tunnel.count_drop(DropReason::TooBig);
            return;
        }
        slot[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(pkt);
        match self.tunnel.send_unsealed(now, slot, pkt.len()) {
            Some(t) => self.tx.commit(meta(PEER, &t)),
            None => self.tx.skip(),
        }
        self.drain_output(now);
    }

    /// Cut a super-packet into segments, each straight into its transmit
    /// slot, all on the burst's path.
    fn segment_and_send(&mut self, pkt: &[u8], h: &VnetHdr) {
        let udp = h.gso_type == GSO_UDP_L4;
        let Ok(count) = offload::segments(pkt, h).map(|g| g.count) else {
            self.io.offload_errors += 1;
            return;
        };
        let now = self.clock.now();
        let (mut flush, tunnel) = self.flush_parts();
        let per_drain = tunnel.send_batch_max();
        let mut burst = tunnel.burst(now, pkt.len(), count);
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
                Some(t) => flush.tx.commit(meta(PEER, &t)),
                None => flush.tx.skip(),
            }
            undrained += 1;
            if undrained >= per_drain {
                drain_output(&mut flush, &mut *burst, PEER, now);
                undrained = 0;
            }
            cut += 1;
        }
        drop(burst);
        if undrained > 0 {
            drain_output(&mut flush, tunnel, PEER, now);
        }
        let io = &mut *flush.io;
        let (supers, segments) = if udp {
            (&mut io.uso_super_packets, &mut io.uso_segments)
        } else {
            (&mut io.tso_super_packets, &mut io.tso_segments)
        };
        *supers += 1;
        *segments += cut;
    }
}
