//! The receive half of the loop: datagrams from a path socket to the TUN.
//!
//! One `recvmmsg` fills up to 64 buffers (each possibly several datagrams
//! coalesced by UDP GRO). Every datagram goes through `recv_start` in
//! arrival order; those that need a key are opened together on the workers;
//! then `recv_finish` runs on them in arrival order, and whatever the core
//! releases is written to the TUN through the coalescing writer.
//!
//! Invariants:
//! * the core sees datagrams in the order the socket gave them, so the
//!   per-path FIFO assumption of the reorder policy holds;
//! * the TUN writer is flushed at the end of every batch.

use std::io;

use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Received, RecvStart};

use super::{normalize, Driver};

impl Driver {
    /// Receive a batch from socket `i` with one `recvmmsg`, then decapsulate
    /// it in three steps: [`Tunnel::recv_start`] on every datagram (serial),
    /// open the ones that passed (on the workers), [`Tunnel::recv_finish`]
    /// on them in arrival order (serial), delivering as the core releases.
    /// Returns whether the socket may still have datagrams.
    pub(super) fn pump_socket(&mut self, i: usize) -> bool {
        let n = match self.recv_batch.recv(&self.sockets[i].socket) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            // ICMP errors from earlier sends surface here; try again.
            Err(_) => return true,
        };
        self.io.udp_recv_calls += 1;
        self.io.udp_datagrams_received += n as u64;
        self.io.max_recv_batch = self.io.max_recv_batch.max(n as u64);
        let now = self.clock.now();
        let Driver {
            recv_batch,
            tunnel,
            tun,
            writer,
            io,
            workers,
            open_spans,
            open_from,
            open_res,
            ..
        } = self;
        open_spans.clear();
        open_from.clear();
        for k in 0..n {
            let (from, total, seg) = recv_batch.meta(k);
            let Some(from) = from.map(normalize) else {
                continue;
            };
            io.udp_datagrams_received += (total.div_ceil(seg) as u64).saturating_sub(1);
            let mut off = 0;
            while off < total {
                let len = seg.min(total - off);
                let data = recv_batch.slice_mut(k, off, len);
                match tunnel.recv_start(now, i, from, data) {
                    RecvStart::Open => {
                        open_spans.push((k, off, len));
                        open_from.push(from);
                    }
                    RecvStart::Done(Received::Deliver { offset, len }) => {
                        writer.deliver(tun, tunnel, &data[offset..offset + len]);
                        writer.drain(tun, tunnel);
                    }
                    RecvStart::Done(_) => writer.drain(tun, tunnel),
                }
                off += seg;
            }
        }
        if !open_spans.is_empty() {
            open_res.clear();
            open_res.resize(open_spans.len(), Err(DropReason::NoSession));
            let opener = tunnel.opener();
            workers.for_each(
                recv_batch.bufs_mut(),
                open_spans,
                open_res,
                &|d: &mut [u8]| opener.open(d),
            );
            for (j, (k, off, len)) in open_spans.iter().enumerate() {
                let data = recv_batch.slice_mut(*k, *off, *len);
                if let Received::Deliver { offset, len } =
                    tunnel.recv_finish(now, open_from[j], data, open_res[j])
                {
                    writer.deliver(tun, tunnel, &data[offset..offset + len]);
                }
                writer.drain(tun, tunnel);
            }
        }
        self.flush_coalescer();
        n == self.recv_batch.capacity()
    }

    pub(super) fn deliver_ready(&mut self) {
        self.writer.drain(&self.tun, &mut self.tunnel);
    }

    pub(super) fn flush_coalescer(&mut self) {
        if !self.writer.flush(&self.tun) {
            self.tunnel.count_drop(DropReason::TunWriteFailed);
        }
    }
}
