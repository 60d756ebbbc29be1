//! The receive half of the loop: datagrams from a path socket to the TUN.
//!
//! One batch receive fills up to [`BATCH_PACKETS`] buffers (each possibly
//! several datagrams coalesced by UDP GRO). Every datagram goes through
//! `recv_start` in arrival order; those that need a key are opened
//! together on the workers, with the header the core parsed once
//! ([`OpenTicket`]); then `recv_finish` runs on them in arrival order, and
//! whatever the core releases is written to the TUN through the coalescing
//! writer.
//!
//! Invariants:
//! * the core sees datagrams in the order the socket gave them, so the
//!   per-path FIFO assumption of the reorder policy holds;
//! * the TUN writer is flushed at the end of every batch.

use std::io;

use mpt_core::crypto::TAG_LEN;
use mpt_core::qos::ecn::ECN_MASK;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{OpenTicket, Received, RecvStart};
use mpt_core::wire::{Header, PacketType, HEADER_LEN};

use super::{normalize, Engine, BATCH_PACKETS};
use crate::capture::{Dir, Tap};
use crate::seam::{Clock, PathIo, TunDevice};

impl<T: TunDevice, P: PathIo, C: Clock> Engine<T, P, C> {
    /// Receive a batch from socket `i`, then decapsulate it in three steps:
    /// `recv_start` on every datagram (serial), open the ones that passed
    /// (on the workers), `recv_finish` on them in arrival order (serial),
    /// delivering as the core releases. Returns whether the socket may
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
            tunnel,
            tun,
            writer,
            io,
            workers,
            open,
            capture,
            ..
        } = self;
        let mut tap = capture.as_mut().filter(|t| t.active_now());
        open.spans.clear();
        open.from.clear();
        open.tickets.clear();
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
                match tunnel.recv_start(now, i, from, data, m.tos & ECN_MASK) {
                    RecvStart::Open(t) => {
                        open.spans.push(span);
                        open.from.push(from);
                        open.tickets.push(t);
                    }
                    RecvStart::Done(r) => {
                        if let Some(t) = tap.as_mut() {
                            // Plaintext: the path is the peer's id here.
                            capture_inbound(t, &r, u8::MAX, wall, data);
                        }
                        writer.deliver(tun, tunnel, Some((&r, data)));
                    }
                }
            }
        }
        if !open.spans.is_empty() {
            open.results.clear();
            open.results
                .resize(open.spans.len(), Err(DropReason::NoSession));
            let opener = tunnel.opener();
            let tickets: &[OpenTicket] = &open.tickets;
            workers.for_each(
                recv_batch.bufs_mut(),
                &open.spans,
                &mut open.results,
                &|j, d: &mut [u8]| opener.open(&tickets[j], d),
            );
            for (j, span) in open.spans.iter().enumerate() {
                let data = recv_batch.slice_mut(*span);
                let t = &open.tickets[j];
                let r = tunnel.recv_finish(now, open.from[j], data, t, open.results[j]);
                if let Some(c) = tap.as_mut() {
                    capture_inbound(c, &r, t.fields.path, wall, data);
                }
                writer.deliver(tun, tunnel, Some((&r, data)));
            }
        }
        self.flush_writer();
        n == BATCH_PACKETS.min(self.recv_batch.capacity())
    }

    pub(super) fn deliver_ready(&mut self) {
        self.writer.deliver(&mut self.tun, &mut self.tunnel, None);
    }

    pub(super) fn flush_writer(&mut self) {
        if !self.writer.flush(&mut self.tun) {
            self.tunnel.count_drop(DropReason::TunWriteFailed);
        }
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
