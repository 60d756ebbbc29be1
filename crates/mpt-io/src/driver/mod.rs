//! The event loop that drives a [`Tunnel`] with real I/O.
//!
//! One thread polls the TUN, the path sockets, a signal pipe and a waker for
//! control requests (mio, edge-triggered). Each readiness is drained in
//! bounded batches ([`BATCH_PACKETS`]) so that one busy source cannot starve
//! the others; a source whose batch ran out stays marked ready and the next
//! poll does not sleep.
//!
//! The send half is in `tx.rs`, the receive half in `rx.rs`.
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
use mpt_core::tunnel::Tunnel;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;
use serde_json::{json, Value};
use tracing::info;

use crate::batch::{self, RecvBatch, SendBatch};
use crate::control::Request;
use crate::events::EventLog;
use crate::tun::Tun;
use crate::tunwrite::TunWriter;
use crate::udp::PathSocket;
use crate::workers::{Engage, Span, Workers};

mod rx;
mod tx;

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
    /// TUN writes, coalesced in offload mode.
    writer: TunWriter,
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
    pub udp_recv_calls: u64,
    pub udp_datagrams_received: u64,
    pub udp_send_calls: u64,
    pub udp_datagrams_sent: u64,
    pub max_recv_batch: u64,
    pub max_send_batch: u64,
    /// TUN offloads active (TSO reads, GRO writes).
    pub tun_offload: bool,
    /// UDP segmentation on TUN reads and UDP coalescing on writes (USO).
    pub tun_uso: bool,
    /// UDP segmentation offload on every path socket.
    pub udp_gso: bool,
    /// UDP receive coalescing on every path socket.
    pub udp_gro: bool,
    /// TCP super-packets read and the segments cut from them.
    pub tso_super_packets: u64,
    pub tso_segments: u64,
    /// UDP super-packets read and the datagrams cut from them.
    pub uso_super_packets: u64,
    pub uso_segments: u64,
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
        let tun_uso = tun.uso();
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
                    tun_uso,
                    udp_gso: gso.iter().all(|g| *g),
                    udp_gro: gro,
                    ..IoStats::default()
                },
                writer: TunWriter::new(tun_offload, tun_uso),
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
        let mut loop_idle = Duration::ZERO;
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
            let waiting = Instant::now();
            let polled = self.poll.poll(&mut events, timeout);
            loop_idle += waiting.elapsed();
            if let Err(e) = polled {
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
            self.workers.tick(loop_idle);
            if last_wall.elapsed() >= WALL_REFRESH {
                last_wall = Instant::now();
                self.tunnel.set_wall_offset(self.clock.wall_offset());
            }
            self.flush_control(now, &mut buf);
            self.log_events();
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
            let mut io = serde_json::to_value(&self.io).unwrap_or(Value::Null);
            if let (Value::Object(io), Ok(Value::Object(w))) =
                (&mut io, serde_json::to_value(&self.writer.stats))
            {
                io.extend(w);
            }
            m.insert("io".into(), io);
            m.insert(
                "workers".into(),
                serde_json::to_value(self.workers.pool_status()).unwrap_or(Value::Null),
            );
        }
        v
    }
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
