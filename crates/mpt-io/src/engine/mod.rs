//! The event loop's work, generic over the seam ([`TunDevice`], [`PathIo`],
//! [`Clock`]) and over what it drives ([`Plane`]: one peer's [`Tunnel`],
//! or a concentrator shard's many peers, `crate::hub`): what to do when
//! the TUN or a path socket is readable and when the core's timers are
//! due. One engine for both: the single tunnel's driver (`driver.rs`) and
//! each concentrator shard (`hub_driver.rs`, `shards.rs`) wait for
//! readiness with mio and call [`Engine::turn`]; tests call it on
//! in-memory devices in virtual time (`engine/tests.rs`, `hub_tests.rs`).
//!
//! The send half is in `tx.rs`, the receive half in `rx.rs`, the plane's
//! interface in `plane.rs`.
//!
//! Invariants:
//! * a turn never blocks; each ready source is drained by at most one
//!   batch ([`BATCH_PACKETS`]) so that no source starves the others, and
//!   stays marked ready while its batch came back full;
//! * every I/O error on a packet is counted as a drop in the core and the
//!   loop continues;
//! * received packets are decapsulated in place: in-order data goes from
//!   the receive buffer straight to the TUN; sent packets are read from the
//!   TUN straight into their transmit slot.

use std::io;
use std::net::SocketAddr;

use mpt_core::concentrator::PeerId;
use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{OpenTicket, Tunnel};
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

pub use self::plane::Plane;
use crate::batch::{RecvBatch, Span, TxBatch};
use crate::by_peer::ByPeer;
use crate::capture::{Dir, Tap};
use crate::events::EventLog;
use crate::flush::SealScratch;
pub use crate::flush::{is_hard, IoStats};
use crate::hold::Hold;
use crate::seam::{Clock, PathIo, TunDevice};
use crate::tunwrite::{TunWriter, WriteStats};
use crate::workers::Workers;

pub mod plane;
mod rx;
#[cfg(test)]
mod tests;
mod tx;

/// Packets handled per source before the loop looks at the others.
pub const BATCH_PACKETS: usize = 64;
/// Transmit slots: two batches, so a super-packet's segments fit beside
/// what is already queued.
pub const TX_SLOTS: usize = 2 * BATCH_PACKETS;
/// Receive buffer size: the largest UDP datagram (or GRO buffer), and the
/// largest TUN super-packet.
pub const BUF_BYTES: usize = 65_536;
/// How often the wall-clock offset is re-read (tuning knob).
pub const WALL_REFRESH_NS: Nanos = 1_000_000_000;

/// Which sources may have input: set from readiness events, cleared by a
/// turn when a source ran dry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub tun: bool,
    pub sockets: Vec<bool>,
}

impl Ready {
    /// Everything possibly readable (the state at start).
    pub fn all(sockets: usize) -> Self {
        Self {
            tun: true,
            sockets: vec![true; sockets],
        }
    }
    pub fn any(&self) -> bool {
        self.tun || self.sockets.iter().any(|r| *r)
    }
}

/// Scratch of the receive half, reused batch after batch: the datagrams
/// to open, their sources, tickets, peers and results.
#[derive(Default)]
struct OpenScratch {
    spans: Vec<Span>,
    from: Vec<SocketAddr>,
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

/// See the module documentation.
pub struct Engine<T, P, C, D = Tunnel> {
    pub tun: T,
    pub paths: P,
    pub clock: C,
    pub(crate) plane: D,
    name: String,
    event_log: EventLog,
    recv_batch: RecvBatch,
    pub(crate) tx: TxBatch,
    io: IoStats,
    writer: TunWriter,
    workers: Workers,
    /// Time spent waiting for events, for the workers' gate (a loop that
    /// measures it: [`Engine::add_idle`]).
    loop_idle: std::time::Duration,
    /// TUN reads in offload mode (super-packets), and one segment cut for
    /// a peer of another shard.
    scratch: Vec<u8>,
    seg_scratch: Vec<u8>,
    /// A super-packet's segment for the burst path: its tunnel's recovery
    /// ring may keep this buffer and hand back another
    /// (`Tunnel::send_owned`).
    owned_seg: Vec<u8>,
    tun_lens: Vec<usize>,
    seal: SealScratch,
    open: OpenScratch,
    send_failures: Vec<(usize, io::Error)>,
    /// Datagrams the sockets refused for now.
    pub(crate) hold: Hold,
    /// Sockets whose hold began or ended since the loop last asked
    /// ([`Engine::take_hold_changes`]).
    hold_was: Vec<bool>,
    /// Peers sent to by the last read, and peers with work (scratch).
    sent_to: Vec<PeerId>,
    busy: Vec<PeerId>,
    /// Inner packets the TUN refused.
    tun_write_failures: u64,
    last_wall: Option<Nanos>,
    /// The wall clock's offset from the loop's (capture timestamps).
    wall_offset: i64,
    /// A packet capture under way (`mpt capture`), or the last one.
    pub capture: Option<Tap>,
}

impl<T: TunDevice, P: PathIo, C: Clock, D: Plane> Engine<T, P, C, D> {
    /// `name` names the tunnel in logs; `workers` seal and open batches.
    pub fn new(tun: T, paths: P, clock: C, plane: D, name: &str, workers: Workers) -> Self {
        let offload = tun.offload();
        let uso = tun.uso();
        // One byte more than the MTU can hold: a longer TUN packet shows
        // as too big instead of being cut.
        let slot_bytes = HEADER_LEN + plane.mtu() + 1 + TAG_LEN;
        let udp_gso = (0..paths.sockets()).all(|s| paths.gso(s));
        let udp_gro = paths.gro();
        Self {
            tun,
            paths,
            clock,
            plane,
            name: name.to_string(),
            event_log: EventLog::default(),
            recv_batch: RecvBatch::new(BATCH_PACKETS, BUF_BYTES),
            tx: TxBatch::new(TX_SLOTS, slot_bytes),
            io: IoStats {
                tun_offload: offload,
                tun_uso: uso,
                udp_gso,
                udp_gro,
                ..IoStats::default()
            },
            writer: TunWriter::new(offload, uso),
            workers,
            loop_idle: std::time::Duration::ZERO,
            scratch: vec![0u8; BUF_BYTES],
            seg_scratch: vec![0u8; BUF_BYTES],
            owned_seg: Vec::new(),
            tun_lens: vec![0; BATCH_PACKETS],
            seal: SealScratch::default(),
            open: OpenScratch::default(),
            send_failures: Vec::new(),
            hold: Hold::default(),
            hold_was: Vec::new(),
            sent_to: Vec::with_capacity(BATCH_PACKETS),
            busy: Vec::new(),
            tun_write_failures: 0,
            last_wall: None,
            wall_offset: 0,
            capture: None,
        }
    }

    /// What the engine drives.
    pub fn plane(&self) -> &D {
        &self.plane
    }
    pub fn plane_mut(&mut self) -> &mut D {
        &mut self.plane
    }
    pub fn io_stats(&self) -> &IoStats {
        &self.io
    }
    pub fn io_stats_mut(&mut self) -> &mut IoStats {
        &mut self.io
    }
    pub fn write_stats(&self) -> &WriteStats {
        &self.writer.stats
    }
    /// Inner packets the TUN refused (each also a drop at its peer).
    pub fn tun_write_failures(&self) -> u64 {
        self.tun_write_failures
    }
    pub fn workers(&self) -> &Workers {
        &self.workers
    }
    pub fn workers_mut(&mut self) -> &mut Workers {
        &mut self.workers
    }
    /// Seal and open on `workers` (made on the thread that runs this
    /// loop).
    pub fn with_workers(mut self, workers: Workers) -> Self {
        self.workers = workers;
        self
    }
    /// Time the loop spent waiting for events (for the workers' gate,
    /// looked at each turn).
    pub fn add_idle(&mut self, idle: std::time::Duration) {
        self.loop_idle += idle;
    }

    /// The loop reports writable sockets ([`Engine::socket_writable`]):
    /// a socket that refused datagrams is tried again only then (else at
    /// every turn).
    pub fn set_reports_writable(&mut self, on: bool) {
        self.hold.set_reports_writable(on);
    }

    /// `socket` is writable again (a readiness event).
    pub fn socket_writable(&mut self, socket: usize) {
        self.hold.writable(socket);
    }

    /// Sockets that began (`true`) or ended (`false`) holding refused
    /// datagrams since the last call: the loop asks to hear when the
    /// former are writable, and stops for the latter.
    pub fn take_hold_changes(&mut self, out: &mut Vec<(usize, bool)>) {
        out.clear();
        let n = self.paths.sockets();
        self.hold_was.resize(n, false);
        for (s, was) in self.hold_was.iter_mut().enumerate() {
            let now = self.hold.holds(s);
            if now != *was {
                *was = now;
                out.push((s, now));
            }
        }
    }

    /// When the loop must run again without any input (the core's next
    /// timer), as monotonic nanoseconds.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        self.plane.poll_timeout()
    }

    /// Packets waiting to leave, over every peer of the plane.
    pub fn queued(&self) -> usize {
        self.plane.queued()
    }

    /// The wall clock at loop time `now`, ns since the UNIX epoch.
    pub(crate) fn wall(&self, now: Nanos) -> u64 {
        (now as i64).wrapping_add(self.wall_offset) as u64
    }

    /// One turn of the loop: drain each ready source by one batch (a
    /// source stays ready while its batch came back full), run due timers,
    /// then settle every peer with work: its output sent, its deliveries
    /// written, its events logged.
    pub fn turn(&mut self, ready: &mut Ready) {
        if !self.loop_idle.is_zero() {
            self.workers.tick(self.loop_idle);
        }
        // The wall clock first: every timestamp sent and every one-way
        // delay measured in this turn uses it.
        let now = self.clock.now();
        if self
            .last_wall
            .is_none_or(|t| now.saturating_sub(t) >= WALL_REFRESH_NS)
        {
            self.last_wall = Some(now);
            self.wall_offset = self.clock.wall_offset();
            self.plane.set_wall_offset(self.wall_offset);
        }
        if let Some(t) = self.capture.as_mut() {
            t.active(now);
        }
        // What the sockets refused before goes first (one may be writable
        // again), then what became due since the last turn (paced
        // packets), before what is read now.
        if self.hold.any() {
            let (mut flush, plane) = self.flush_parts();
            flush.retry_held(plane, now);
        }
        self.settle_peers(now);
        if ready.tun {
            ready.tun = self.pump_tun();
        }
        for (i, r) in ready.sockets.iter_mut().enumerate() {
            if *r {
                *r = self.pump_socket(i);
            }
        }
        let now = self.clock.now();
        if self.plane.poll_timeout().is_some_and(|t| t <= now) {
            self.plane.handle_timeout(now);
        }
        self.settle_peers(now);
    }

    /// Every peer with work: its output into the transmit slots, what it
    /// releases written to the TUN, its events logged; then everything
    /// sent and written, and what the plane sends of its own.
    pub fn settle_peers(&mut self, now: Nanos) {
        let mut busy = std::mem::take(&mut self.busy);
        busy.clear();
        self.plane.take_busy(&mut busy);
        for &peer in &busy {
            {
                let (mut flush, plane) = self.flush_parts();
                crate::flush::drain_output(&mut flush, plane, peer, now);
            }
            self.deliver(peer, None, now);
            self.plane
                .settle_peer(peer, &mut self.event_log, &self.name);
        }
        self.busy = busy;
        self.flush_tx(now);
        self.flush_writer();
        let wall = self.wall(now);
        while let Some((socket, dst, d)) = self.plane.poll_own() {
            self.io.udp_send_calls += 1;
            if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
                tap.datagram(Dir::Out, socket, wall, &d);
            }
            match self.paths.send_to(socket, &d, dst) {
                Ok(()) => self.io.udp_datagrams_sent += 1,
                Err(_) => self.plane.count_unowned(DropReason::SendFailed),
            }
        }
        self.plane.log_own(&self.name);
    }
}

/// The single tunnel's engine.
impl<T: TunDevice, P: PathIo, C: Clock> Engine<T, P, C, Tunnel> {
    pub fn tunnel(&self) -> &Tunnel {
        &self.plane
    }
    pub fn tunnel_mut(&mut self) -> &mut Tunnel {
        &mut self.plane
    }
    /// The tunnel and the path I/O together (a reload changes both).
    pub fn tunnel_and_paths(&mut self) -> (&mut Tunnel, &mut P) {
        (&mut self.plane, &mut self.paths)
    }
}

/// Turn an IPv4-mapped IPv6 source back into IPv4 (not expected with
/// V6ONLY sockets, but harmless).
pub(crate) fn normalize(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}
