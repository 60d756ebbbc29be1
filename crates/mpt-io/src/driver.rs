//! The Linux event loop: waits for readiness with mio and hands each turn
//! to the [`Engine`] on the real TUN device, path sockets and clock.
//!
//! One thread polls the TUN, the path sockets, a signal pipe and a waker for
//! control requests (mio, edge-triggered). A source reported readable stays
//! marked ready until a turn finds it dry, so a source whose batch ran out
//! is drained on the next turn without sleeping.
//!
//! Invariants:
//! * the loop never blocks except in `poll`, whose timeout is the core's
//!   next timer (or zero while a source is still ready);
//! * only SIGINT/SIGTERM end it (SIGHUP is logged and changes nothing);
//!   I/O errors on packets are counted drops (see the engine).

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::UnixStream as MioUnixStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use mpt_core::rates::{Counts, RateWindow};
use mpt_core::tunnel::Tunnel;
use mpt_core::Nanos;
use mpt_sys::tun::Tun;
use serde_json::Value;
use tracing::info;

use crate::capture::Tap;
use crate::control::Pending;
use crate::engine::{Engine, Ready, BATCH_PACKETS};
use crate::linux::{SystemClock, UdpPaths};
use crate::pathctl::{self, PathChange};
use crate::seam::Clock;
use crate::stop::Drain;
use crate::udp::{PathBind, PathSocket};
use crate::workers::{Engage, Workers};
use mpt_control::Request;

mod control;

pub(crate) const TOKEN_TUN: Token = Token(0);
pub(crate) const TOKEN_SIGNAL: Token = Token(1);
pub(crate) const TOKEN_HANGUP: Token = Token(4);
pub(crate) const TOKEN_WAKER: Token = Token(2);
pub(crate) const TOKEN_SOCKET_BASE: usize = 16;

/// Static facts about the daemon for status output.
pub struct Identity {
    pub name: String,
    pub role: &'static str,
    pub addresses: Vec<String>,
    pub control_socket: String,
    /// The configured peer's public key (base64); `None` without
    /// encryption.
    pub peer_public_key: Option<String>,
}

pub use mpt_control::status::STATUS_SCHEMA;
use mpt_control::status::{IoDoc, SocketDoc, TunnelDoc};

/// The event loop and everything it owns.
pub struct Driver {
    poll: Poll,
    engine: Engine<Tun, UdpPaths, SystemClock>,
    identity: Identity,
    /// Kept open: the signal handlers write to its peer.
    signal_rx: MioUnixStream,
    /// SIGHUP's pipe, read to empty on each hangup.
    hangup_rx: MioUnixStream,
    control_rx: mpsc::Receiver<Pending>,
    /// Throughput over the last second, per path (status).
    rates: RateWindow,
    started: Instant,
    /// Reads the configuration again and applies it (SIGHUP, `reload`);
    /// set by the daemon, which owns the configuration.
    reload: Option<Reload>,
    failover: Option<Failover>,
    /// Which sources may have something to read.
    ready: Ready,
    /// When the path sockets' send buffers were last sized
    /// ([`crate::udp::send_limit_bytes`]).
    send_limits_at: Nanos,
    hold_changes: Vec<(usize, bool)>,
}

/// How often the path sockets' send buffers follow their paths' rates
/// (tuning knob), and by how much a size must move to be set again.
const SEND_LIMIT_REFRESH_NS: Nanos = 50_000_000;
const SEND_LIMIT_MOVE: f64 = 0.25;

/// A configuration reload: applied through the context, answered as the
/// control protocol's JSON (`ok` with what changed, or `error`). The
/// string says who asked, for the log.
pub type Reload = Box<dyn FnMut(&mut ReloadCtx<'_>, &str) -> Value>;

/// Looked at every turn: may replace the tunnel (a client moving to
/// another server) and then returns the new peer's public key.
pub type Failover = Box<dyn FnMut(&mut Tunnel, Nanos) -> Option<String>>;

/// What a reload may change: the tunnel, and the set of path sockets.
pub struct ReloadCtx<'a> {
    pub tunnel: &'a mut Tunnel,
    pub now: Nanos,
    sockets: Sockets<'a>,
}

/// The loop's path sockets, as a reload sees them.
struct Sockets<'a> {
    paths: &'a mut UdpPaths,
    poll: &'a Poll,
    ready: &'a mut Ready,
}

impl ReloadCtx<'_> {
    /// The socket (its key) for a path bound to `local`: the one already
    /// bound there, or a new one (bound, registered with the loop). A
    /// socket outlives the paths that leave it, until the daemon stops.
    pub fn socket_for(&mut self, bind: &PathBind<'_>) -> io::Result<usize> {
        let s = &mut self.sockets;
        if let Some(i) = s.paths.sockets.iter().position(|x| x.local == bind.local) {
            if !s.paths.sockets[i].paths.iter().any(|n| n == bind.name) {
                s.paths.sockets[i].paths.push(bind.name.to_string());
            }
            return Ok(i);
        }
        let socket = crate::udp::open(bind)?;
        let i = s.paths.sockets.len();
        s.poll.registry().register(
            &mut SourceFd(&socket.as_raw_fd()),
            Token(TOKEN_SOCKET_BASE + i),
            Interest::READABLE,
        )?;
        s.paths.add_socket(PathSocket {
            local: bind.local,
            socket,
            paths: vec![bind.name.to_string()],
        });
        s.ready.sockets.push(true);
        Ok(i)
    }
}

/// What every loop waits on besides packets: SIGINT/SIGTERM (stop),
/// SIGHUP (reload) and the control thread's waker, registered with
/// [`TOKEN_SIGNAL`], [`TOKEN_HANGUP`] and [`TOKEN_WAKER`].
pub(crate) struct LoopSources {
    pub signal_rx: MioUnixStream,
    pub hangup_rx: MioUnixStream,
    pub control_rx: mpsc::Receiver<Pending>,
    pub hook: ControlHook,
}

impl LoopSources {
    pub(crate) fn register(reg: &mio::Registry) -> io::Result<Self> {
        let (sig_rx, sig_tx) = std::os::unix::net::UnixStream::pair()?;
        sig_rx.set_nonblocking(true)?;
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?)?;
        }
        let mut signal_rx = MioUnixStream::from_std(sig_rx);
        reg.register(&mut signal_rx, TOKEN_SIGNAL, Interest::READABLE)?;
        // SIGHUP (`systemctl reload`) must not end the tunnel.
        let (hup_rx, hup_tx) = std::os::unix::net::UnixStream::pair()?;
        hup_rx.set_nonblocking(true)?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGHUP, hup_tx)?;
        let mut hangup_rx = MioUnixStream::from_std(hup_rx);
        reg.register(&mut hangup_rx, TOKEN_HANGUP, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(reg, TOKEN_WAKER)?);
        let (tx, control_rx) = mpsc::channel();
        let hook = ControlHook {
            tx,
            wake: Arc::new(move || {
                let _ = waker.wake();
            }),
        };
        Ok(Self {
            signal_rx,
            hangup_rx,
            control_rx,
            hook,
        })
    }
}

/// What the control thread needs to hand requests to the loop.
pub struct ControlHook {
    pub tx: mpsc::Sender<Pending>,
    pub wake: Arc<dyn Fn() + Send + Sync>,
}

/// Register a loop's TUN (queue) and path sockets for reading.
pub(crate) fn register_io(
    reg: &mio::Registry,
    tun: &Tun,
    sockets: &[PathSocket],
) -> io::Result<()> {
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
    Ok(())
}

impl Driver {
    /// Build the loop with `workers` threads for the AEAD work (the calling
    /// thread, which must be the one that calls [`Driver::run`], being the
    /// first).
    pub fn new(
        tun: Tun,
        sockets: Vec<PathSocket>,
        tunnel: Tunnel,
        clock: SystemClock,
        identity: Identity,
        workers: usize,
        engage: Engage,
    ) -> io::Result<(Driver, ControlHook)> {
        let workers = Workers::new(workers, &identity.name, engage)?;
        let poll = Poll::new()?;
        let reg = poll.registry();
        register_io(reg, &tun, &sockets)?;
        let LoopSources {
            signal_rx,
            hangup_rx,
            control_rx,
            hook,
        } = LoopSources::register(reg)?;
        let paths = UdpPaths::new(sockets, 2 * BATCH_PACKETS);
        let engine = Engine::new(tun, paths, clock, tunnel, &identity.name, workers);
        Ok((
            Driver {
                poll,
                engine,
                identity,
                signal_rx,
                hangup_rx,
                control_rx,
                rates: RateWindow::default(),
                started: Instant::now(),
                reload: None,
                failover: None,
                ready: Ready::all(0),
                send_limits_at: 0,
                hold_changes: Vec::new(),
            },
            hook,
        ))
    }

    /// Whether TUN offloads are active.
    pub fn offload(&self) -> bool {
        self.engine.io_stats().tun_offload
    }

    /// Run until SIGINT or SIGTERM, then send what is queued (at most
    /// [`crate::stop::DRAIN_MAX_NS`]; a second signal stops at once).
    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        self.ready = Ready::all(self.engine.paths.sockets.len());
        let mut loop_idle = Duration::ZERO;
        let mut drain = Drain::default();
        loop {
            let now = self.engine.clock.now();
            if drain.done(now, || self.engine.queued()) {
                info!(tunnel = %self.identity.name, left = self.engine.queued(), "stopped");
                return Ok(());
            }
            if drain.active() {
                self.ready.tun = false;
            }
            let timeout = if self.ready.any() {
                Some(Duration::ZERO)
            } else {
                self.engine
                    .poll_timeout()
                    .map(|t| Duration::from_nanos(t.saturating_sub(now)))
            };
            let timeout = drain.wait_cap(now, timeout);
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
                    TOKEN_TUN => self.ready.tun = !drain.active(),
                    TOKEN_SIGNAL => {
                        let mut buf = [0u8; 64];
                        while matches!(self.signal_rx.read(&mut buf), Ok(n) if n > 0) {}
                        let now = self.engine.clock.now();
                        if drain.signal(now) {
                            info!(tunnel = %self.identity.name, "second signal: stopping now");
                            return Ok(());
                        }
                        info!(tunnel = %self.identity.name, queued = self.engine.queued(), "signal received: stopping once what is queued has left (at most 200 ms)");
                    }
                    TOKEN_HANGUP => self.hangup(),
                    TOKEN_WAKER => self.answer_control(),
                    // Writable only: a socket that held datagrams takes
                    // them again; the turn sends them.
                    Token(t)
                        if t >= TOKEN_SOCKET_BASE && (ev.is_readable() || !ev.is_writable()) =>
                    {
                        if let Some(r) = self.ready.sockets.get_mut(t - TOKEN_SOCKET_BASE) {
                            *r = true;
                        }
                    }
                    _ => {}
                }
            }
            self.engine.turn(&mut self.ready);
            self.follow_holds()?;
            self.engine.workers_mut().tick(loop_idle);
            let now = self.engine.clock.now();
            if let Some(f) = self.failover.as_mut() {
                if let Some(key) = f(self.engine.tunnel_mut(), now) {
                    self.identity.peer_public_key = Some(key);
                }
            }
            if now.saturating_sub(self.send_limits_at) >= SEND_LIMIT_REFRESH_NS {
                self.send_limits_at = now;
                self.size_send_buffers(now);
            }
            if self.rates.due(now) {
                let t = self.engine.tunnel();
                let counts = (0..t.path_count())
                    .filter_map(|i| t.path(i as u8))
                    .map(|p| Counts {
                        tx_bytes: p.tx_bytes,
                        tx_packets: p.tx_packets,
                        rx_bytes: p.rx_bytes,
                        rx_packets: p.rx_packets,
                    })
                    .collect();
                self.rates.update(now, counts);
            }
        }
    }

    /// Ask to hear when a socket that began holding refused datagrams is
    /// writable again, and stop asking once it held none.
    fn follow_holds(&mut self) -> io::Result<()> {
        self.engine.take_hold_changes(&mut self.hold_changes);
        for &(i, holds) in &self.hold_changes {
            let Some(s) = self.engine.paths.sockets.get(i) else {
                continue;
            };
            let interest = if holds {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.poll.registry().reregister(
                &mut SourceFd(&s.socket.as_raw_fd()),
                Token(TOKEN_SOCKET_BASE + i),
                interest,
            )?;
        }
        Ok(())
    }

    /// With local push-back on (`[scheduler] local_queue_ms`), each path
    /// socket's send buffer from its paths' rates, so that the local
    /// interface's queue pushes back before it overflows
    /// ([`crate::hold`]).
    fn size_send_buffers(&mut self, now: Nanos) {
        let queue_ns = self.engine.tunnel().local_queue();
        for i in 0..self.engine.paths.sockets.len() {
            if queue_ns == 0 {
                // Off (the default), or switched off by a reload.
                if self.engine.paths.send_limit(i) != 0 {
                    let _ = self.engine.paths.reset_send_limit(i);
                }
                continue;
            }
            // Until its paths delivered, a socket keeps what it has (at
            // first the large default: a start held to the smallest
            // buffer, at a guessed pacing rate far above a slow link's,
            // cost fifty clients on two cores their first seconds).
            let Some(rate) = self.engine.tunnel().socket_rate_bps(i, now) else {
                continue;
            };
            let want = crate::udp::send_limit_bytes(Some(rate), queue_ns);
            let had = self.engine.paths.send_limit(i);
            if had != 0 && (want as f64 - had as f64).abs() < SEND_LIMIT_MOVE * had as f64 {
                continue;
            }
            let _ = self.engine.paths.set_send_limit(i, want);
        }
    }

    /// Install the move between servers (a client with `[[server]]`).
    pub fn set_failover(&mut self, f: Failover) {
        self.failover = Some(f);
    }

    /// Install the configuration reload (SIGHUP, the `reload` request).
    pub fn set_reload(&mut self, reload: Reload) {
        self.reload = Some(reload);
    }
}
