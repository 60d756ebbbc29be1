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
//! * packets are read from the TUN straight into transmit slots, and every
//!   peer's datagrams leave through them ([`crate::flush`], shared with the
//!   single tunnel's engine): sealed together by ticket with their peer's
//!   keys, then one batch send per socket, consecutive datagrams to one
//!   client merged into UDP GSO super-datagrams;
//! * a peer's output is drained after at most
//!   [`Concentrator::send_batch_max`] of its packets were read, so that a
//!   packet's pieces leave right behind it;
//! * with TUN offloads, TCP/UDP super-packets are cut per peer
//!   (`hub_tx.rs`) and what peers deliver is coalesced back into GRO
//!   super-packets on the TUN ([`TunWriter`]), flushed at the end of every
//!   batch and turn.

use std::io;

use mpt_core::concentrator::{Concentrator, Handoff, PeerId};
use mpt_core::crypto::TAG_LEN;
use mpt_core::qos::ecn::ECN_MASK;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{OpenTicket, RecvStart};
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

use crate::batch::{RecvBatch, Span, TxBatch};
use crate::by_peer::ByPeer;
use crate::capture::{Dir, Tap};
use crate::engine::{IoStats, Ready, BATCH_PACKETS, BUF_BYTES, TX_SLOTS, WALL_REFRESH_NS};
use crate::events::EventLog;
use crate::flush::{drain_output, meta, SealScratch};
use crate::seam::{Clock, PathIo, TunDevice};
use crate::tunwrite::{TunWriter, WriteStats};
use crate::workers::Workers;

/// See the module documentation.
pub struct Hub<T, P, C> {
    pub tun: T,
    pub paths: P,
    pub clock: C,
    conc: Concentrator,
    name: String,
    event_log: EventLog,
    recv_batch: RecvBatch,
    /// Transmit slots: TUN reads land in them, header room in front, tag
    /// room after; every peer's output goes through them.
    tx: TxBatch,
    /// Seal and open a batch's datagrams: the shard's thread alone, or a
    /// pool of its own ([`Hub::with_workers`]).
    workers: Workers,
    /// Time spent waiting for events, for the workers' gate.
    loop_idle: std::time::Duration,
    seal: SealScratch,
    send_failures: Vec<(usize, io::Error)>,
    tun_lens: Vec<usize>,
    /// Offload reads (a packet or a super-packet with its virtio-net
    /// header), and one segment cut for another shard.
    scratch: Vec<u8>,
    seg_scratch: Vec<u8>,
    /// Deliveries to the TUN, coalesced when offloads are on.
    writer: TunWriter,
    /// Peers sent to by the last read, whose output is drained behind it.
    sent_to: Vec<PeerId>,
    io: IoStats,
    tun_write_failures: u64,
    last_wall: Option<Nanos>,
    /// The datagrams of a receive batch that need opening, with their
    /// peers (scratch).
    open: OpenScratch,
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
        let slot_bytes = HEADER_LEN + mtu + 1 + TAG_LEN;
        let udp_gso = (0..paths.sockets()).all(|s| paths.gso(s));
        let (offload, uso) = (tun.offload(), tun.uso());
        Self {
            tun,
            paths,
            clock,
            conc,
            name: name.to_string(),
            event_log: EventLog::default(),
            recv_batch: RecvBatch::new(BATCH_PACKETS, BUF_BYTES),
            tx: TxBatch::new(TX_SLOTS, slot_bytes),
            workers: Workers::inline(),
            loop_idle: std::time::Duration::ZERO,
            seal: SealScratch::default(),
            send_failures: Vec::new(),
            tun_lens: vec![0; BATCH_PACKETS],
            scratch: vec![0u8; BUF_BYTES],
            seg_scratch: vec![0u8; BUF_BYTES],
            writer: TunWriter::new(offload, uso),
            sent_to: Vec::with_capacity(BATCH_PACKETS),
            io: IoStats {
                udp_gso,
                tun_offload: offload,
                tun_uso: uso,
                ..IoStats::default()
            },
            tun_write_failures: 0,
            last_wall: None,
            open: OpenScratch::default(),
            live: Vec::new(),
            changes: Vec::new(),
            wall_offset: 0,
            capture: None,
        }
    }

    /// Seal and open on `workers` (made on the thread that runs this
    /// loop) instead of the loop's thread alone.
    pub fn with_workers(mut self, workers: Workers) -> Self {
        self.workers = workers;
        self
    }

    /// The worker pool (status).
    pub fn workers(&self) -> &Workers {
        &self.workers
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
    /// TUN writes and GRO coalescing.
    pub fn write_stats(&self) -> &WriteStats {
        &self.writer.stats
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
        let waiting = std::time::Instant::now();
        let polled = poll.poll(events, timeout);
        self.loop_idle += waiting.elapsed();
        match polled {
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
        self.workers.tick(self.loop_idle);
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

    /// Write what a datagram's peer delivers to the TUN
    /// ([`Concentrator::deliver`]: the packet it carried, then what the
    /// peer's reorder buffer releases; a failed write is a drop).
    fn deliver(
        (tun, writer): (&mut T, &mut TunWriter),
        conc: &mut Concentrator,
        failures: &mut u64,
        (mut tap, wall): (Option<&mut Tap>, u64),
        (peer, r): (Option<PeerId>, mpt_core::tunnel::Received),
        data: &[u8],
    ) {
        let Some(id) = peer else {
            return; // dropped or handed off: nothing to deliver
        };
        let comment = tap.is_some().then(|| from_peer(conc, Some(id)));
        conc.deliver(id, Some((&r, data)), |p| {
            if let (Some(t), Some(c)) = (tap.as_deref_mut(), comment.as_deref()) {
                t.packet(Dir::In, wall, p, c);
            }
            if writer.write(tun, p) {
                Ok(())
            } else {
                *failures += 1;
                Err(DropReason::TunWriteFailed)
            }
        });
    }

    /// Take what another shard read for one of this shard's peers (then
    /// [`Hub::settle`] once for all of them).
    pub fn take_handoff(&mut self, h: Handoff) {
        let now = self.clock.now();
        match h {
            Handoff::Packet { bytes, .. } => {
                let len = bytes.len();
                if self.tx.is_full() {
                    self.flush_tx(now);
                }
                let Some(slot) = self.tx.slot() else {
                    return;
                };
                if HEADER_LEN + len + TAG_LEN > slot.len() {
                    return; // cannot be: the other shard read it into the same room
                }
                slot[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&bytes);
                match self.conc.send_handed_unsealed(now, slot, len) {
                    Some((peer, t)) => {
                        self.tx.commit(meta(peer, &t));
                        let (mut flush, conc) = self.flush_parts();
                        drain_output(&mut flush, conc, peer, now);
                    }
                    None => self.tx.skip(),
                }
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
                let out = (&mut self.tun, &mut self.writer);
                Self::deliver(out, &mut self.conc, failures, tap, r, &bytes);
            }
        }
    }

    /// Poll every peer with output (after handoffs were taken).
    pub fn settle(&mut self) {
        let now = self.clock.now();
        self.drain_busy(now);
    }

    /// Receive a batch from socket `i`, then take it in three steps as the
    /// single tunnel's engine does: `recv_start` on every datagram in
    /// arrival order (its peer found), open those that need a key together
    /// on the workers (each with its peer's opener), `recv_finish` on them
    /// in arrival order; what peers deliver goes to the TUN writer.
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
        let wall = self.wall(now);
        let Hub {
            recv_batch,
            conc,
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
        open.clear();
        for k in 0..n {
            let m = recv_batch.meta(k);
            let Some(from) = m.from.map(crate::engine::normalize) else {
                continue;
            };
            for span in recv_batch.datagrams(k) {
                io.udp_datagrams_received += 1;
                let data = recv_batch.slice_mut(span);
                if let Some(t) = tap.as_mut() {
                    t.datagram(Dir::In, i, wall, data);
                }
                match conc.recv_start(now, i, from, data, m.tos & ECN_MASK) {
                    (Some(peer), RecvStart::Open(t)) => {
                        open.spans.push(span);
                        open.from.push(from);
                        open.tickets.push(t);
                        open.peers.push(peer);
                    }
                    (peer, RecvStart::Done(r)) => {
                        let tap = (tap.as_deref_mut(), wall);
                        let failures = &mut *tun_write_failures;
                        Self::deliver((tun, writer), conc, failures, tap, (peer, r), data);
                    }
                    (None, RecvStart::Open(_)) => {}
                }
            }
        }
        if !open.spans.is_empty() {
            open.results.clear();
            open.results
                .resize(open.spans.len(), Err(DropReason::NoSession));
            let c: &Concentrator = conc;
            let tickets: &[OpenTicket] = &open.tickets;
            open.by_peer.run(
                workers,
                recv_batch.bufs_mut(),
                &open.spans,
                &open.peers,
                &mut open.results,
                Err(DropReason::NoSession),
                |p| c.opener(p),
                |opener, j, d| opener.open(&tickets[j], d),
            );
            for j in 0..open.spans.len() {
                let data = recv_batch.slice_mut(open.spans[j]);
                let (peer, t) = (open.peers[j], &open.tickets[j]);
                let r = conc.recv_finish(now, peer, open.from[j], data, t, open.results[j]);
                let tap = (tap.as_deref_mut(), wall);
                let failures = &mut *tun_write_failures;
                Self::deliver((tun, writer), conc, failures, tap, (Some(peer), r), data);
            }
        }
        self.drain_busy(now);
        n == BATCH_PACKETS
    }

    /// Poll every peer that may have output.
    fn drain_busy(&mut self, now: Nanos) {
        while let Some(id) = self.conc.next_busy() {
            self.drain_peer(id, now);
        }
        self.flush_tx(now);
        if !self.writer.flush(&mut self.tun) {
            self.tun_write_failures += 1;
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

    /// Everything peer `id` has to do: its output into the transmit
    /// slots, its events logged, its liveness noted, what it releases
    /// written to the TUN; then its timer re-armed.
    fn drain_peer(&mut self, id: PeerId, now: Nanos) {
        let (mut flush, conc) = self.flush_parts();
        drain_output(&mut flush, conc, id, now);
        let wall = self.wall(now);
        let Hub {
            conc,
            tun,
            event_log,
            name,
            tun_write_failures,
            live,
            changes,
            capture,
            writer,
            ..
        } = self;
        let mut tap = capture.as_mut().filter(|t| t.active_now());
        if let Some((cfg, t)) = conc.peer_tunnel_mut(id) {
            let peer_name = &cfg.name;
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
        conc.deliver(id, None, |p| {
            if let (Some(tap), Some(c)) = (tap.as_deref_mut(), comment.as_deref()) {
                tap.packet(Dir::In, wall, p, c);
            }
            if writer.write(tun, p) {
                Ok(())
            } else {
                *tun_write_failures += 1;
                Err(DropReason::TunWriteFailed)
            }
        });
        conc.rearm(id);
    }
}

/// The datagrams of a receive batch that need opening: where each is,
/// where it came from, its ticket and its peer; the results (same index).
#[derive(Default)]
struct OpenScratch {
    spans: Vec<Span>,
    from: Vec<std::net::SocketAddr>,
    tickets: Vec<OpenTicket>,
    peers: Vec<PeerId>,
    results: Vec<Result<usize, DropReason>>,
    by_peer: ByPeer<Result<usize, DropReason>>,
}

impl OpenScratch {
    fn clear(&mut self) {
        self.spans.clear();
        self.from.clear();
        self.tickets.clear();
        self.peers.clear();
    }
}

/// How a capture names the peer of a delivered packet.
fn from_peer(conc: &Concentrator, peer: Option<PeerId>) -> String {
    match peer.and_then(|p| conc.peer(p)) {
        Some(p) => format!("from peer {}", p.cfg.name),
        None => "from an unknown peer".into(),
    }
}

#[path = "hub_tx.rs"]
mod tx;

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
