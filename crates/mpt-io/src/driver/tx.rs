//! The send half of the loop: TUN reads to sealed datagrams in batches.
//!
//! A TUN read is one inner packet, or a TCP/UDP super-packet (TSO/USO) that
//! is cut into datagram-sized segments straight into the send batch of the
//! burst's path. The core assigns path, sequence numbers and nonce per
//! datagram (`send_unsealed`); just before each `sendmmsg` the batch is
//! sealed, on the worker threads when they are engaged.
//!
//! Invariants:
//! * nothing leaves unsealed when security is on: a datagram that cannot be
//!   sealed is zeroed and counted (`no_session`);
//! * sealing happens inside `pump_tun`, before anything that can change
//!   sessions runs (see `Tunnel::send_unsealed`);
//! * the segments of one super-packet go to one path, in order.

use std::io;
use std::net::SocketAddr;

use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Sealer, Transmit};
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;
use tracing::warn;

use super::{is_hard, Driver, BATCH_PACKETS};
use crate::offload::{
    self, OffloadError, VnetHdr, GSO_NONE, GSO_UDP_L4, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};
use crate::offload_udp;

/// Segment `i` of a TCP or UDP super-packet.
fn segment_at(pkt: &[u8], h: &VnetHdr, i: usize, out: &mut [u8]) -> Result<usize, OffloadError> {
    if h.gso_type == GSO_UDP_L4 {
        offload_udp::segment_at(pkt, h, i, out)
    } else {
        offload::segment_at(pkt, h, i, out)
    }
}

impl Driver {
    /// Read up to a batch from the TUN, encapsulate each packet into the
    /// send batch of its path's socket, then send every batch with one
    /// `sendmmsg` each. TSO super-packets are segmented first. Returns
    /// whether the TUN may still have packets.
    pub(super) fn pump_tun(&mut self, buf: &mut [u8]) -> bool {
        let vnet = if self.io.tun_offload { VNET_HDR_LEN } else { 0 };
        let mut more = true;
        for _ in 0..BATCH_PACKETS {
            let end = buf.len() - TAG_LEN;
            let n = match self.tun.read(&mut buf[HEADER_LEN - vnet..end]) {
                Ok(n) if n >= vnet => n - vnet,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    more = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    warn!(tunnel = %self.identity.name, "TUN read failed: {e}");
                    more = false;
                    break;
                }
            };
            self.io.tun_reads += 1;
            let now = self.clock.now();
            if vnet == 0 {
                self.encapsulate(buf, n, now);
                continue;
            }
            let h = VnetHdr::parse(&buf[HEADER_LEN - vnet..HEADER_LEN]).unwrap_or_default();
            if h.gso_type == GSO_NONE {
                if h.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0
                    && offload::finish_checksum(&mut buf[HEADER_LEN..HEADER_LEN + n], &h).is_err()
                {
                    self.io.offload_errors += 1;
                    continue;
                }
                self.encapsulate(buf, n, now);
                continue;
            }
            self.segment_and_send(&buf[HEADER_LEN..HEADER_LEN + n], &h, now);
        }
        for k in 0..self.send_batches.len() {
            self.flush_sends(k);
        }
        more
    }

    /// Cut a TSO super-packet into MSS-sized segments and send each. The
    /// burst's path is fixed first, so every segment is cut straight into
    /// that socket's send batch and encapsulated there (no copy).
    fn segment_and_send(&mut self, pkt: &[u8], h: &VnetHdr, now: Nanos) {
        let udp = h.gso_type == GSO_UDP_L4;
        let count = if udp {
            offload_udp::segments(pkt, h).map(|g| g.2)
        } else {
            offload::segments(pkt, h).map(|g| g.3)
        };
        let Ok(count) = count else {
            self.io.offload_errors += 1;
            return;
        };
        self.tunnel.begin_burst(pkt.len(), count);
        let target = self.tunnel.burst_target();
        let mut cut = 0;
        for i in 0..count {
            let ok = match target {
                Some((_, key)) if key < self.send_batches.len() => {
                    self.segment_in_place(pkt, h, i, key, now)
                }
                _ => self.segment_via_scratch(pkt, h, i, now),
            };
            if !ok {
                self.io.offload_errors += 1;
                break;
            }
            cut += 1;
        }
        let io = &mut self.io;
        let (supers, segments) = if udp {
            (&mut io.uso_super_packets, &mut io.uso_segments)
        } else {
            (&mut io.tso_super_packets, &mut io.tso_segments)
        };
        *supers += 1;
        *segments += cut;
        self.tunnel.end_burst();
    }

    /// Segment `i` of `pkt`, cut into the next slot of batch `key`.
    fn segment_in_place(
        &mut self,
        pkt: &[u8],
        h: &VnetHdr,
        i: usize,
        key: usize,
        now: Nanos,
    ) -> bool {
        if self.send_batches[key].is_full() {
            self.flush_sends(key);
        }
        let Driver {
            tunnel,
            send_batches,
            ..
        } = self;
        let batch = &mut send_batches[key];
        let Some(slot) = batch.slot() else {
            return false;
        };
        let end = slot.len() - TAG_LEN;
        let Ok(len) = segment_at(pkt, h, i, &mut slot[HEADER_LEN..end]) else {
            return false;
        };
        if let Some(tx) = tunnel.send_unsealed(now, slot, len) {
            if tx.local_key == key {
                batch.commit(tx.len, tx.dst, tx.path);
            } else {
                // Not expected (the burst's path is fixed): move it over.
                let bytes = slot[..tx.len].to_vec();
                self.queue(&bytes, tx);
            }
        }
        true
    }

    /// Segment `i` of `pkt` through the scratch buffer (no burst path).
    fn segment_via_scratch(&mut self, pkt: &[u8], h: &VnetHdr, i: usize, now: Nanos) -> bool {
        let mut seg = std::mem::take(&mut self.seg_buf);
        let end = seg.len() - TAG_LEN;
        let ok = match segment_at(pkt, h, i, &mut seg[HEADER_LEN..end]) {
            Ok(len) => {
                self.encapsulate(&mut seg, len, now);
                true
            }
            Err(_) => false,
        };
        self.seg_buf = seg;
        ok
    }

    /// Hand the inner packet at `buf[HEADER_LEN..HEADER_LEN + n]` to the
    /// core and queue the (still unsealed) datagram in its socket's batch.
    fn encapsulate(&mut self, buf: &mut [u8], n: usize, now: Nanos) {
        if let Some(tx) = self.tunnel.send_unsealed(now, buf, n) {
            self.queue(&buf[..tx.len], tx);
        }
    }

    /// Copy a datagram into its socket's send batch.
    fn queue(&mut self, bytes: &[u8], tx: Transmit) {
        let Some(batch) = self.send_batches.get_mut(tx.local_key) else {
            return;
        };
        if batch.is_full() {
            self.flush_sends(tx.local_key);
        }
        let batch = &mut self.send_batches[tx.local_key];
        if let Some(slot) = batch.slot() {
            slot[..tx.len].copy_from_slice(bytes);
            batch.commit(tx.len, tx.dst, tx.path);
        }
    }

    /// Seal every datagram of batch `key` (on the workers), then send the
    /// batch with one `sendmmsg`. A datagram that cannot be sealed (no
    /// session: never expected here) is zeroed, so nothing unsealed leaves;
    /// the receiver drops it as a bad version.
    fn seal_batch(&mut self, key: usize) {
        let Driver {
            tunnel,
            send_batches,
            workers,
            seal_ok,
            ..
        } = self;
        let sealer = tunnel.sealer();
        if matches!(sealer, Sealer::Plain) {
            return;
        }
        let (bufs, spans) = send_batches[key].datagrams_mut();
        seal_ok.clear();
        seal_ok.resize(spans.len(), false);
        workers.for_each(bufs, spans, seal_ok, &|d: &mut [u8]| sealer.seal(d));
        let mut failed = 0;
        for ((k, off, len), ok) in spans.iter().zip(seal_ok.iter()) {
            if !ok {
                bufs[*k][*off..off + len].fill(0);
                failed += 1;
            }
        }
        for _ in 0..failed {
            tunnel.count_drop(DropReason::NoSession);
        }
    }

    fn flush_sends(&mut self, key: usize) {
        if self.send_batches[key].is_empty() {
            return;
        }
        self.seal_batch(key);
        let batch = &mut self.send_batches[key];
        let n = batch.len() as u64;
        let failures = batch.flush(&self.sockets[key].socket);
        self.io.udp_send_calls += 1;
        let failed: u64 = failures.iter().map(|f| f.1 as u64).sum();
        self.io.udp_datagrams_sent += n - failed;
        self.io.max_send_batch = self.io.max_send_batch.max(n);
        let now = self.clock.now();
        for (path, count, e) in failures {
            for _ in 0..count {
                self.tunnel.on_send_error(path, is_hard(&e), now);
            }
        }
    }

    pub(super) fn send(&mut self, path: u8, key: usize, data: &[u8], dst: SocketAddr, now: Nanos) {
        let Some(s) = self.sockets.get(key) else {
            return;
        };
        if let Err(e) = s.socket.send_to(data, dst) {
            self.tunnel.on_send_error(path, is_hard(&e), now);
        }
    }
}
