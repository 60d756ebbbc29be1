//! The event loop's work for a concentrator (many peers, one TUN, one set
//! of path sockets), generic over the seam like [`crate::engine::Engine`].
//!
//! Each turn drains the ready sources by one batch: TUN packets go to the
//! peer that holds their destination ([`Concentrator::send`]); datagrams go
//! to the peer their session index or handshake names
//! ([`Concentrator::recv`]) and what that peer delivers is written to the
//! TUN. Then due timers run and every peer with output is polled
//! (handshake answers, probes, queued packets, released packets, events).
//!
//! Invariants:
//! * a turn never blocks; each source gives at most one batch per turn;
//! * every I/O error on a packet is a counted drop in the peer's tunnel
//!   (or the concentrator's own counters), and the loop continues;
//! * work per turn follows the peers that have something to do, not the
//!   number of peers configured;
//! * the TUN carries plain packets (no offload header): a concentrator
//!   sends each peer its own datagrams, so there is no batch to coalesce.

use std::io;

use mpt_core::concentrator::{Concentrator, Handoff, PeerId};
use mpt_core::crypto::TAG_LEN;
use mpt_core::qos::ecn::ECN_MASK;
use mpt_core::stats::DropReason;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

use crate::batch::RecvBatch;
use crate::capture::{Dir, Tap};
use crate::engine::{is_hard, IoStats, Ready, BATCH_PACKETS, BUF_BYTES, WALL_REFRESH_NS};
use crate::events::EventLog;
use crate::seam::{Clock, PathIo, Slots, TunDevice};

/// See the module documentation.
pub struct Hub<T, P, C> {
    pub tun: T,
    pub paths: P,
    pub clock: C,
    conc: Concentrator,
    name: String,
    event_log: EventLog,
    recv_batch: RecvBatch,
    /// TUN reads: one slot per packet, header room in front, tag room after.
    tun_slots: Vec<u8>,
    stride: usize,
    tun_lens: Vec<usize>,
    scratch: Vec<u8>,
    io: IoStats,
    tun_write_failures: u64,
    last_wall: Option<Nanos>,
    /// The datagrams of one receive buffer (scratch, kept for its room).
    spans: Vec<crate::batch::Span>,
    /// Per peer: whether it is live (a session and a path up), as last seen.
    live: Vec<bool>,
    /// Peers whose liveness changed, for the driver (routes to announce).
    changes: Vec<(PeerId, bool)>,
    /// The wall clock's offset from the loop's (capture timestamps).
    wall_offset: i64,
    /// A packet capture under way (`mpt capture`), or the last one: this
    /// shard's end of it.
    pub capture: Option<Tap>,
}

impl<T: TunDevice, P: PathIo, C: Clock> Hub<T, P, C> {
    pub fn new(tun: T, paths: P, clock: C, conc: Concentrator, mtu: usize, name: &str) -> Self {
        let stride = HEADER_LEN + mtu + 1 + TAG_LEN;
        Self {
            tun,
            paths,
            clock,
            conc,
            name: name.to_string(),
            event_log: EventLog::default(),
            recv_batch: RecvBatch::new(BATCH_PACKETS, BUF_BYTES),
            tun_slots: vec![0u8; stride * BATCH_PACKETS],
            stride,
            tun_lens: vec![0; BATCH_PACKETS],
            scratch: vec![0u8; BUF_BYTES],
            io: IoStats::default(),
            tun_write_failures: 0,
            last_wall: None,
            spans: Vec::new(),
            live: Vec::new(),
            changes: Vec::new(),
            wall_offset: 0,
            capture: None,
        }
    }

    pub fn concentrator(&self) -> &Concentrator {
        &self.conc
    }
    pub fn concentrator_mut(&mut self) -> &mut Concentrator {
        &mut self.conc
    }
    pub fn io_stats(&self) -> &IoStats {
        &self.io
    }
    /// The wall clock at loop time `now`, ns since the UNIX epoch.
    fn wall(&self, now: Nanos) -> u64 {
        (now as i64).wrapping_add(self.wall_offset) as u64
    }
    pub fn tun_write_failures(&self) -> u64 {
        self.tun_write_failures
    }

    /// Peers that became live (a session and a path up: the client is
    /// here) or stopped being live since the last call.
    pub fn take_changes(&mut self) -> Vec<(PeerId, bool)> {
        std::mem::take(&mut self.changes)
    }

    /// Forget a removed peer's liveness (its slot may be reused); whether
    /// it was live.
    pub fn forget(&mut self, id: PeerId) -> bool {
        self.live
            .get_mut(id as usize)
            .is_some_and(|l| std::mem::replace(l, false))
    }

    /// Wait in `poll` for readiness, or until the next deadline (not at
    /// all while `busy`: a source still has input). `false`: interrupted
    /// by a signal, wait again.
    pub(crate) fn wait(
        &mut self,
        poll: &mut mio::Poll,
        events: &mut mio::Events,
        busy: bool,
    ) -> io::Result<bool> {
        let timeout = if busy {
            Some(std::time::Duration::ZERO)
        } else {
            let now = self.clock.now();
            self.poll_timeout()
                .map(|t| std::time::Duration::from_nanos(t.saturating_sub(now)))
        };
        match poll.poll(events, timeout) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// When the loop must run again without input.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        self.conc.poll_timeout()
    }

    /// One turn: drain each ready source by one batch, run due timers,
    /// poll the peers that have output.
    pub fn turn(&mut self, ready: &mut Ready) {
        let now = self.clock.now();
        if self
            .last_wall
            .is_none_or(|t| now.saturating_sub(t) >= WALL_REFRESH_NS)
        {
            self.last_wall = Some(now);
            self.wall_offset = self.clock.wall_offset();
            self.conc.set_wall_offset(self.wall_offset);
        }
        if let Some(t) = self.capture.as_mut() {
            t.active(now);
        }
        if ready.tun {
            ready.tun = self.pump_tun();
        }
        for i in 0..ready.sockets.len() {
            if ready.sockets[i] {
                ready.sockets[i] = self.pump_socket(i);
            }
        }
        let now = self.clock.now();
        if self.conc.poll_timeout().is_some_and(|t| t <= now) {
            self.conc.handle_timeout(now);
        }
        self.drain_busy(now);
    }

    /// Read a batch from the TUN and send each packet to its peer.
    fn pump_tun(&mut self) -> bool {
        let slots = Slots {
            buf: &mut self.tun_slots,
            stride: self.stride,
            head: HEADER_LEN,
            tail: 0,
        };
        let n = match self.tun.read_batch(slots, &mut self.tun_lens) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => return false,
        };
        self.io.tun_reads += 1;
        let now = self.clock.now();
        let wall = self.wall(now);
        for k in 0..n {
            let len = self.tun_lens[k];
            let slot = k * self.stride..(k + 1) * self.stride;
            if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                let at = slot.start + HEADER_LEN;
                tap.packet(
                    Dir::Out,
                    wall,
                    &self.tun_slots[at..at + len],
                    "read from the TUN",
                );
            }
            let sent = self.conc.send(now, &mut self.tun_slots[slot.clone()], len);
            self.transmit(now, slot, sent);
        }
        self.drain_busy(now);
        n == self.tun_lens.len()
    }

    /// Send what the concentrator made of the packet in `tun_slots[slot]`.
    fn transmit(
        &mut self,
        now: Nanos,
        slot: std::ops::Range<usize>,
        sent: Option<(PeerId, mpt_core::tunnel::Transmit)>,
    ) {
        let Some((peer, tx)) = sent else {
            return;
        };
        self.io.udp_send_calls += 1;
        let d = &self.tun_slots[slot][..tx.len];
        if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
            let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
            tap.datagram(Dir::Out, tx.local_key, wall, d);
        }
        match self.paths.send_to(tx.local_key, d, tx.dst) {
            Ok(()) => self.io.udp_datagrams_sent += 1,
            Err(e) => {
                if let Some(t) = self.conc.tunnel_mut(peer) {
                    t.on_send_error(tx.path, is_hard(&e), now);
                }
            }
        }
        self.send_output(peer, now);
    }

    /// What the peer's tunnel has to send behind the packet just sent
    /// ([`mpt_core::tunnel::Tunnel::poll_transmit`], in its order).
    fn send_output(&mut self, peer: PeerId, now: Nanos) {
        let wall = self.wall(now);
        let Hub {
            conc,
            paths,
            scratch,
            io,
            capture,
            ..
        } = self;
        let Some(t) = conc.tunnel_mut(peer) else {
            return;
        };
        let mut out = Out {
            paths,
            io,
            scratch,
            tap: capture.as_mut().filter(|t| t.active_now()),
            wall,
        };
        while let Some(tx) = t.poll_transmit(now, out.scratch) {
            if let Some(e) = out.seal_and_send(t, &tx) {
                t.on_send_error(tx.path, is_hard(&e), now);
            }
        }
    }

    /// Write a delivered inner packet to the TUN (a failure is a drop).
    fn deliver(
        tun: &mut T,
        conc: &mut Concentrator,
        failures: &mut u64,
        (tap, wall): (Option<&mut Tap>, u64),
        (peer, r): (Option<PeerId>, mpt_core::tunnel::Received),
        data: &[u8],
    ) {
        if let mpt_core::tunnel::Received::Deliver { offset, len } = r {
            if let Some(tap) = tap {
                tap.packet(
                    Dir::In,
                    wall,
                    &data[offset..offset + len],
                    &from_peer(conc, peer),
                );
            }
            if tun.write(&[], &data[offset..offset + len]).is_err() {
                *failures += 1;
                if let Some(t) = peer.and_then(|p| conc.tunnel_mut(p)) {
                    t.count_drop(DropReason::TunWriteFailed);
                }
            }
        }
    }

    /// Take what another shard read for one of this shard's peers (then
    /// [`Hub::settle`] once for all of them).
    pub fn take_handoff(&mut self, h: Handoff) {
        let now = self.clock.now();
        match h {
            Handoff::Packet { bytes, .. } => {
                let len = bytes.len();
                if HEADER_LEN + len > self.stride {
                    return; // cannot be: the other shard read it into the same room
                }
                let slot = 0..self.stride;
                self.tun_slots[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&bytes);
                let sent = self
                    .conc
                    .send_handed(now, &mut self.tun_slots[slot.clone()], len);
                self.transmit(now, slot, sent);
            }
            Handoff::Datagram {
                local_key,
                from,
                peer,
                mut bytes,
                ..
            } => {
                let r = self
                    .conc
                    .recv_handed(now, local_key, from, peer, &mut bytes);
                let failures = &mut self.tun_write_failures;
                let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
                let tap = (self.capture.as_mut().filter(|t| t.active_now()), wall);
                Self::deliver(&mut self.tun, &mut self.conc, failures, tap, r, &bytes);
            }
        }
    }

    /// Poll every peer with output (after handoffs were taken).
    pub fn settle(&mut self) {
        let now = self.clock.now();
        self.drain_busy(now);
    }

    /// Receive a batch from socket `i` and hand each datagram to its peer.
    fn pump_socket(&mut self, i: usize) -> bool {
        let (bufs, meta) = self.recv_batch.parts_mut();
        let n = match self.paths.recv(i, bufs, meta) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
            Err(_) => return true,
        };
        self.io.udp_recv_calls += 1;
        self.io.max_recv_batch = self.io.max_recv_batch.max(n as u64);
        let now = self.clock.now();
        for k in 0..n {
            let m = self.recv_batch.meta(k);
            let Some(from) = m.from.map(crate::engine::normalize) else {
                continue;
            };
            let mut spans = std::mem::take(&mut self.spans);
            spans.clear();
            spans.extend(self.recv_batch.datagrams(k));
            let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
            for &span in &spans {
                self.io.udp_datagrams_received += 1;
                let data = self.recv_batch.slice_mut(span);
                let mut tap = self.capture.as_mut().filter(|t| t.active_now());
                if let Some(t) = tap.as_mut() {
                    t.datagram(Dir::In, i, wall, data);
                }
                let r = self.conc.recv_ecn(now, i, from, data, m.tos & ECN_MASK);
                let failures = &mut self.tun_write_failures;
                Self::deliver(
                    &mut self.tun,
                    &mut self.conc,
                    failures,
                    (tap, wall),
                    r,
                    data,
                );
            }
            self.spans = spans;
        }
        self.drain_busy(now);
        n == BATCH_PACKETS
    }

    /// Poll every peer that may have output.
    fn drain_busy(&mut self, now: Nanos) {
        while let Some(id) = self.conc.next_busy() {
            self.drain_peer(id, now);
        }
        while let Some((socket, dst, d)) = self.conc.poll_transmit() {
            self.io.udp_send_calls += 1;
            if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
                tap.datagram(Dir::Out, socket, wall, &d);
            }
            let _ = self.paths.send_to(socket, &d, dst);
        }
        while let Some((_, e)) = self.conc.poll_event() {
            if let mpt_core::tunnel::Event::Security(
                mpt_core::crypto::state::CryptoEvent::Failed {
                    unknown_key: Some(k),
                    ..
                },
            ) = e
            {
                tracing::warn!(
                    tunnel = %self.name,
                    key = %mpt_core::crypto::keys::encode(&k),
                    "handshake from a static key that is no peer's (add it as a [[peer]] if it is a client)"
                );
            }
        }
    }

    fn drain_peer(&mut self, id: PeerId, now: Nanos) {
        let wall = self.wall(now);
        let Hub {
            conc,
            paths,
            tun,
            scratch,
            event_log,
            name,
            io,
            tun_write_failures,
            live,
            changes,
            capture,
            ..
        } = self;
        let mut tap = capture.as_mut().filter(|t| t.active_now());
        if let Some((cfg, t)) = conc.peer_tunnel_mut(id) {
            let peer_name = &cfg.name;
            let mut failed = vec![];
            let mut out = Out {
                paths,
                io,
                scratch,
                tap: tap.as_deref_mut(),
                wall,
            };
            while let Some(tx) = t.poll_transmit(now, out.scratch) {
                if let Some(e) = out.seal_and_send(t, &tx) {
                    failed.push((tx.path, is_hard(&e)));
                }
            }
            for (path, hard) in failed {
                t.on_send_error(path, hard, now);
            }
            while let Some(e) = t.poll_event() {
                event_log.log(&format!("{name}/{peer_name}"), t, e);
            }
            let now_live = t.has_session()
                && (0..t.path_count()).any(|i| t.path(i as u8).is_some_and(|p| p.up));
            if live.len() <= id as usize {
                live.resize(id as usize + 1, false);
            }
            if live[id as usize] != now_live {
                live[id as usize] = now_live;
                changes.push((id, now_live));
            }
        }
        let comment = tap.is_some().then(|| from_peer(conc, Some(id)));
        conc.deliver_ready(id, |p| {
            if let (Some(tap), Some(c)) = (tap.as_deref_mut(), comment.as_deref()) {
                tap.packet(Dir::In, wall, p, c);
            }
            tun.write(&[], p).map_err(|_| {
                *tun_write_failures += 1;
                DropReason::TunWriteFailed
            })
        });
        conc.rearm(id);
    }
}

/// Where a peer's datagrams go out: the sockets, the I/O counters, the
/// scratch the core writes into, and a capture's end if one is under way.
struct Out<'a, P> {
    paths: &'a mut P,
    io: &'a mut IoStats,
    scratch: &'a mut [u8],
    tap: Option<&'a mut Tap>,
    wall: u64,
}

impl<P: PathIo> Out<'_, P> {
    /// Seal the datagram `tx` describes in `scratch` (a failed seal is
    /// counted as `no_session`), show it to the capture, and send it; the
    /// send's error, if any.
    fn seal_and_send(
        &mut self,
        t: &mut mpt_core::tunnel::Tunnel,
        tx: &mpt_core::tunnel::Transmit,
    ) -> Option<io::Error> {
        let d = &mut self.scratch[..tx.len];
        if !t.sealer().seal(tx.seal, d) {
            t.count_drop(DropReason::NoSession);
            return None;
        }
        if let Some(tap) = self.tap.as_deref_mut() {
            tap.datagram(Dir::Out, tx.local_key, self.wall, d);
        }
        self.io.udp_send_calls += 1;
        match self.paths.send_to(tx.local_key, d, tx.dst) {
            Ok(()) => {
                self.io.udp_datagrams_sent += 1;
                None
            }
            Err(e) => Some(e),
        }
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
