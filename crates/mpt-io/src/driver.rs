//! The event loop that drives a [`Tunnel`] with real I/O.
//!
//! One thread polls the TUN, the path sockets, a signal pipe and a waker for
//! control requests (mio, edge-triggered). Each readiness is drained in
//! bounded batches ([`BATCH_PACKETS`]) so that one busy source cannot starve
//! the others; a source whose batch ran out stays marked ready and the next
//! poll does not sleep.
//!
//! Invariants:
//! * the loop never blocks except in `poll`, whose timeout is the core's
//!   next timer (or zero while work is pending);
//! * every I/O error on a packet is counted as a drop in the core and the
//!   loop continues; only SIGINT/SIGTERM end it;
//! * received packets are decapsulated in place: in-order data goes from the
//!   receive buffer straight to the TUN.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::net::UnixStream as MioUnixStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Received, RecvStart, Sealer, Transmit, Tunnel};
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::batch::{self, RecvBatch, SendBatch};
use crate::control::Request;
use crate::events::EventLog;
use crate::offload::{
    self, Coalescer, VnetHdr, GSO_NONE, VIRTIO_NET_HDR_F_NEEDS_CSUM, VNET_HDR_LEN,
};
use crate::tun::Tun;
use crate::udp::PathSocket;
use crate::workers::{Engage, Span, Workers};

/// Packets handled per source before the loop looks at the others.
pub const BATCH_PACKETS: usize = 64;
/// Receive/transmit buffer size: the largest UDP datagram.
const BUF_BYTES: usize = 65_536;
/// How often the wall-clock offset is re-read.
const WALL_REFRESH: Duration = Duration::from_secs(1);

const TOKEN_TUN: Token = Token(0);
const TOKEN_SIGNAL: Token = Token(1);
const TOKEN_WAKER: Token = Token(2);
const TOKEN_SOCKET_BASE: usize = 16;

/// Monotonic clock with a wall-clock offset for wire timestamps.
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
    pub fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }
    /// Real time minus monotonic time, in nanoseconds.
    pub fn wall_offset(&self) -> i64 {
        let mono = self.now() as i64;
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        wall - mono
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Static facts about the daemon for status output.
pub struct Identity {
    pub name: String,
    pub role: &'static str,
    pub addresses: Vec<String>,
    pub control_socket: String,
}

/// The event loop and everything it owns.
pub struct Driver {
    poll: Poll,
    tun: Tun,
    sockets: Vec<PathSocket>,
    tunnel: Tunnel,
    clock: Clock,
    identity: Identity,
    /// Kept open: the signal handlers write to its peer.
    _signal_rx: MioUnixStream,
    control_rx: mpsc::Receiver<Request>,
    started: Instant,
    event_log: EventLog,
    recv_batch: RecvBatch,
    /// One send batch per path socket.
    send_batches: Vec<SendBatch>,
    io: IoStats,
    /// GRO for TUN writes (offload mode only).
    coalescer: Option<Coalescer>,
    /// Scratch buffer for segments cut from TSO super-packets.
    seg_buf: Vec<u8>,
    /// Threads that seal and open batches (see `workers.rs`).
    workers: Workers,
    /// Per-batch scratch, reused: seal results; datagrams to open, their
    /// sources and results.
    seal_ok: Vec<bool>,
    open_spans: Vec<Span>,
    open_from: Vec<SocketAddr>,
    open_res: Vec<Result<usize, DropReason>>,
}

/// Data-plane I/O counters (batching effectiveness), in `mpt status`.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct IoStats {
    pub tun_reads: u64,
    pub tun_writes: u64,
    pub udp_recv_calls: u64,
    pub udp_datagrams_received: u64,
    pub udp_send_calls: u64,
    pub udp_datagrams_sent: u64,
    pub max_recv_batch: u64,
    pub max_send_batch: u64,
    /// TUN offloads active (TSO reads, GRO writes).
    pub tun_offload: bool,
    /// UDP segmentation offload on every path socket.
    pub udp_gso: bool,
    /// UDP receive coalescing on every path socket.
    pub udp_gro: bool,
    /// TCP super-packets read and the segments cut from them.
    pub tso_super_packets: u64,
    pub tso_segments: u64,
    /// Super-packets written after coalescing, and the segments merged.
    pub gro_super_packets: u64,
    pub gro_segments: u64,
    /// Super-packets that could not be segmented (dropped).
    pub offload_errors: u64,
}

/// What the control thread needs to hand requests to the loop.
pub struct ControlHook {
    pub tx: mpsc::Sender<Request>,
    pub wake: Arc<dyn Fn() + Send + Sync>,
}

impl Driver {
    /// Build the loop with `workers` threads for the AEAD work (the calling
    /// thread, which must be the one that calls [`Driver::run`], being the
    /// first).
    pub fn new(
        tun: Tun,
        sockets: Vec<PathSocket>,
        mut tunnel: Tunnel,
        clock: Clock,
        identity: Identity,
        workers: usize,
        engage: Engage,
    ) -> io::Result<(Driver, ControlHook)> {
        let workers = Workers::new(workers, &identity.name, engage)?;
        let tun_offload = tun.offload();
        let gso: Vec<bool> = sockets
            .iter()
            .map(|s| batch::gso_supported(&s.socket))
            .collect();
        let gro = sockets
            .iter()
            .filter(|s| batch::enable_gro(&s.socket))
            .count()
            == sockets.len();
        let max_datagram = tunnel.mtu() + HEADER_LEN + TAG_LEN;
        let poll = Poll::new()?;
        let reg = poll.registry();
        reg.register(
            &mut SourceFd(&tun.as_raw_fd()),
            TOKEN_TUN,
            Interest::READABLE,
        )?;
        for (i, s) in sockets.iter().enumerate() {
            reg.register(
                &mut SourceFd(&s.socket.as_raw_fd()),
                Token(TOKEN_SOCKET_BASE + i),
                Interest::READABLE,
            )?;
        }
        let (sig_rx, sig_tx) = std::os::unix::net::UnixStream::pair()?;
        sig_rx.set_nonblocking(true)?;
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?)?;
        }
        let mut signal_rx = MioUnixStream::from_std(sig_rx);
        reg.register(&mut signal_rx, TOKEN_SIGNAL, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(reg, TOKEN_WAKER)?);
        let (tx, control_rx) = mpsc::channel();
        tunnel.set_wall_offset(clock.wall_offset());

        let hook = ControlHook {
            tx,
            wake: Arc::new(move || {
                let _ = waker.wake();
            }),
        };
        Ok((
            Driver {
                poll,
                tun,
                sockets,
                tunnel,
                clock,
                identity,
                _signal_rx: signal_rx,
                control_rx,
                started: Instant::now(),
                event_log: EventLog::default(),
                recv_batch: RecvBatch::new(BATCH_PACKETS, BUF_BYTES),
                send_batches: gso
                    .iter()
                    .map(|g| SendBatch::new(BATCH_PACKETS, max_datagram, *g))
                    .collect(),
                io: IoStats {
                    tun_offload,
                    udp_gso: gso.iter().all(|g| *g),
                    udp_gro: gro,
                    ..IoStats::default()
                },
                coalescer: tun_offload.then(Coalescer::default),
                seg_buf: vec![0u8; BUF_BYTES],
                workers,
                seal_ok: Vec::with_capacity(BATCH_PACKETS),
                open_spans: Vec::with_capacity(BATCH_PACKETS * 64),
                open_from: Vec::with_capacity(BATCH_PACKETS * 64),
                open_res: Vec::with_capacity(BATCH_PACKETS * 64),
            },
            hook,
        ))
    }

    /// Whether TUN offloads are active.
    pub fn offload(&self) -> bool {
        self.io.tun_offload
    }

    /// Run until SIGINT or SIGTERM.
    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        let mut buf = vec![0u8; BUF_BYTES];
        let mut tun_ready = true;
        let mut sock_ready = vec![true; self.sockets.len()];
        let mut last_wall = Instant::now();
        loop {
            let busy = tun_ready || sock_ready.iter().any(|r| *r);
            let timeout = if busy {
                Some(Duration::ZERO)
            } else {
                let now = self.clock.now();
                self.tunnel
                    .poll_timeout()
                    .map(|t| Duration::from_nanos(t.saturating_sub(now)))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in events.iter() {
                match ev.token() {
                    TOKEN_TUN => tun_ready = true,
                    TOKEN_SIGNAL => {
                        info!(tunnel = %self.identity.name, "signal received, stopping");
                        return Ok(());
                    }
                    TOKEN_WAKER => self.answer_control(),
                    Token(t) if t >= TOKEN_SOCKET_BASE => {
                        if let Some(r) = sock_ready.get_mut(t - TOKEN_SOCKET_BASE) {
                            *r = true;
                        }
                    }
                    _ => {}
                }
            }
            if tun_ready {
                tun_ready = self.pump_tun(&mut buf);
            }
            for (i, ready) in sock_ready.iter_mut().enumerate() {
                if *ready {
                    *ready = self.pump_socket(i);
                }
            }
            let now = self.clock.now();
            if self.tunnel.poll_timeout().is_some_and(|t| t <= now) {
                self.tunnel.handle_timeout(now);
                self.deliver_ready();
                self.flush_coalescer();
            }
            self.workers.tick();
            if last_wall.elapsed() >= WALL_REFRESH {
                last_wall = Instant::now();
                self.tunnel.set_wall_offset(self.clock.wall_offset());
            }
            self.flush_control(now, &mut buf);
            self.log_events();
        }
    }

    /// Read up to a batch from the TUN, encapsulate each packet into the
    /// send batch of its path's socket, then send every batch with one
    /// `sendmmsg` each. TSO super-packets are segmented first. Returns
    /// whether the TUN may still have packets.
    fn pump_tun(&mut self, buf: &mut [u8]) -> bool {
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
        let Ok((_, _, _, count)) = offload::segments(pkt, h) else {
            self.io.offload_errors += 1;
            return;
        };
        self.io.tso_super_packets += 1;
        self.tunnel.begin_burst(pkt.len(), count);
        let target = self.tunnel.burst_target();
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
            self.io.tso_segments += 1;
        }
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
        let Ok(len) = offload::segment_at(pkt, h, i, &mut slot[HEADER_LEN..end]) else {
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
        let ok = match offload::segment_at(pkt, h, i, &mut seg[HEADER_LEN..end]) {
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

    fn send(&mut self, path: u8, key: usize, data: &[u8], dst: SocketAddr, now: Nanos) {
        let Some(s) = self.sockets.get(key) else {
            return;
        };
        if let Err(e) = s.socket.send_to(data, dst) {
            self.tunnel.on_send_error(path, is_hard(&e), now);
        }
    }

    /// Receive a batch from socket `i` with one `recvmmsg`, then decapsulate
    /// it in three steps: [`Tunnel::recv_start`] on every datagram (serial),
    /// open the ones that passed (on the workers), [`Tunnel::recv_finish`]
    /// on them in arrival order (serial), delivering as the core releases.
    /// Returns whether the socket may still have datagrams.
    fn pump_socket(&mut self, i: usize) -> bool {
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
            coalescer,
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
                        if !write_tun(tun, coalescer, io, &data[offset..offset + len]) {
                            tunnel.count_drop(DropReason::TunWriteFailed);
                        }
                        drain_reorder(tunnel, tun, coalescer, io);
                    }
                    RecvStart::Done(_) => drain_reorder(tunnel, tun, coalescer, io),
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
                    if !write_tun(tun, coalescer, io, &data[offset..offset + len]) {
                        tunnel.count_drop(DropReason::TunWriteFailed);
                    }
                }
                drain_reorder(tunnel, tun, coalescer, io);
            }
        }
        self.flush_coalescer();
        n == self.recv_batch.capacity()
    }

    fn deliver_ready(&mut self) {
        drain_reorder(
            &mut self.tunnel,
            &self.tun,
            &mut self.coalescer,
            &mut self.io,
        );
    }

    fn flush_coalescer(&mut self) {
        if let Some(c) = self.coalescer.as_mut() {
            if let Some(bytes) = c.take() {
                let merged = VnetHdr::parse(bytes).is_some_and(|h| h.gso_type != GSO_NONE);
                self.io.tun_writes += 1;
                if merged {
                    self.io.gro_super_packets += 1;
                }
                if self.tun.write(bytes).is_err() {
                    self.tunnel.count_drop(DropReason::TunWriteFailed);
                }
            }
        }
    }

    fn flush_control(&mut self, now: Nanos, buf: &mut [u8]) {
        while let Some(tx) = self.tunnel.poll_transmit(now, buf) {
            self.send(tx.path, tx.local_key, &buf[..tx.len], tx.dst, now);
        }
    }

    fn log_events(&mut self) {
        while let Some(e) = self.tunnel.poll_event() {
            self.event_log.log(&self.identity.name, &self.tunnel, e);
        }
    }

    fn answer_control(&mut self) {
        while let Ok(req) = self.control_rx.try_recv() {
            let answer = match req.command.as_str() {
                "status" => self.status_json().to_string(),
                other => json!({ "error": format!("unknown request '{other}'") }).to_string(),
            };
            let _ = req.reply.send(answer);
        }
    }

    /// The full status document (`mpt status --json`).
    pub fn status_json(&self) -> Value {
        let now = self.clock.now();
        let mut v = serde_json::to_value(self.tunnel.status(now)).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("name".into(), json!(self.identity.name));
            m.insert("role".into(), json!(self.identity.role));
            m.insert("pid".into(), json!(std::process::id()));
            m.insert(
                "uptime_s".into(),
                json!(self.started.elapsed().as_secs_f64()),
            );
            m.insert("addresses".into(), json!(self.identity.addresses));
            m.insert("control_socket".into(), json!(self.identity.control_socket));
            let socks: Vec<Value> = self
                .sockets
                .iter()
                .map(|s| json!({ "local": s.local.to_string(), "paths": s.paths }))
                .collect();
            m.insert("sockets".into(), Value::Array(socks));
            m.insert(
                "io".into(),
                serde_json::to_value(&self.io).unwrap_or(Value::Null),
            );
            m.insert(
                "workers".into(),
                serde_json::to_value(self.workers.pool_status()).unwrap_or(Value::Null),
            );
        }
        v
    }
}

/// Write every packet the reorder buffer releases to the TUN, in order.
fn drain_reorder(
    tunnel: &mut Tunnel,
    tun: &Tun,
    coalescer: &mut Option<Coalescer>,
    io: &mut IoStats,
) {
    while let Some(p) = tunnel.poll_deliver() {
        if !write_tun(tun, coalescer, io, &p) {
            tunnel.count_drop(DropReason::TunWriteFailed);
        }
        tunnel.recycle(p);
    }
}

/// Write one inner packet to the TUN: through the coalescer in offload mode
/// (flushing it when the packet cannot join), else directly. Returns
/// whether the write (if any happened) succeeded.
fn write_tun(tun: &Tun, coalescer: &mut Option<Coalescer>, io: &mut IoStats, pkt: &[u8]) -> bool {
    let Some(c) = coalescer.as_mut() else {
        io.tun_writes += 1;
        return tun.write(pkt).is_ok();
    };
    if c.push(pkt) {
        io.gro_segments += 1;
        return true;
    }
    let mut ok = true;
    if let Some(bytes) = c.take() {
        if VnetHdr::parse(bytes).is_some_and(|h| h.gso_type != GSO_NONE) {
            io.gro_super_packets += 1;
        }
        io.tun_writes += 1;
        ok &= tun.write(bytes).is_ok();
    }
    if c.push(pkt) {
        io.gro_segments += 1;
        return ok;
    }
    io.tun_writes += 1;
    ok & tun.write_vectored(&[0u8; VNET_HDR_LEN], pkt).is_ok()
}

/// Errors that mean the path cannot deliver at all right now (as opposed to
/// a full buffer).
fn is_hard(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::EHOSTUNREACH
                | libc::EADDRNOTAVAIL
                | libc::ENODEV
        )
    )
}

/// Turn an IPv4-mapped IPv6 source back into IPv4 (not expected with
/// V6ONLY sockets, but harmless).
fn normalize(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}
