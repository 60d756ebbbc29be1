//! The Linux event loop of a concentrator: mio readiness around a
//! [`Hub`], signals, and control requests.
//!
//! Control requests (one line each, answered with one JSON line):
//! * `status` — the concentrator and one entry per peer;
//! * `status peer KEY|NAME` — one peer in full (its tunnel's status);
//! * `peer add {json}` — a peer (`name`, `public_key`, `preshared_key`,
//!   `allowed_ips`, `routes`), at once;
//! * `peer remove KEY|NAME` — a peer, its sessions and prefixes;
//! * `reload` — the configuration file again (its peers added, removed).
//!
//! Invariants: the loop blocks only in `poll`; requests are answered
//! between turns, so a peer is added or removed between packets, never
//! in the middle of one; the other peers' state is never touched.

use std::io::{self, Read};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use mio::net::UnixStream as MioUnixStream;
use mio::{Events, Poll, Token};
use mpt_core::concentrator::{Concentrator, PeerConfig, PeerId};
use mpt_sys::tun::Tun;
use tracing::info;

use crate::control::Pending;
use crate::driver::{
    ControlHook, LoopSources, TOKEN_HANGUP, TOKEN_SIGNAL, TOKEN_SOCKET_BASE, TOKEN_TUN, TOKEN_WAKER,
};
use crate::engine::{Ready, BATCH_PACKETS};
use crate::hub::Hub;
use crate::linux::{SystemClock, UdpPaths};
use crate::seam::Clock;
use crate::shards::{self, ShardLink, TOKEN_SHARD};
use crate::stop::Drain;
use crate::udp::PathSocket;

/// Changes a reload or a request makes beyond the concentrator (routes).
pub trait PeerHooks {
    /// A peer was added: install what it needs (its routes).
    fn added(&mut self, cfg: &PeerConfig, routes: &[ipnet::IpNet]);
    /// A peer was removed.
    fn removed(&mut self, cfg: &PeerConfig, routes: &[ipnet::IpNet]);
    /// A peer became live here (a session and a path up) or stopped.
    fn live(&mut self, cfg: &PeerConfig, up: bool);
    /// A peer's allowed IPs or routes changed (a reload): routes to it.
    fn updated(&mut self, old: (&PeerConfig, &[ipnet::IpNet]), new: (&PeerConfig, &[ipnet::IpNet]));
    /// The configuration's peers now (for `reload`), or an error.
    fn reread(&mut self) -> Result<Reread, String>;
}

/// The configuration file as a reload reads it again.
pub struct Reread {
    /// Every peer, with the routes it needs.
    pub peers: Vec<(PeerConfig, Vec<ipnet::IpNet>)>,
    /// Sections of the server's own that differ from the running ones
    /// and that a reload cannot change (the daemon's key, its paths, …).
    pub needs_restart: Vec<String>,
}

/// See the module documentation.
pub struct HubDriver {
    poll: Poll,
    hub: Hub<Tun, UdpPaths, SystemClock>,
    name: String,
    addresses: Vec<String>,
    control_socket: String,
    signal_rx: MioUnixStream,
    hangup_rx: MioUnixStream,
    control_rx: mpsc::Receiver<Pending>,
    started: Instant,
    ready: Ready,
    /// Each peer's routes (beyond its allowed IPs), by id.
    routes: Vec<Vec<ipnet::IpNet>>,
    /// Worker threads per shard (1: the shard's thread alone), and when
    /// they take work.
    workers: (usize, crate::workers::Engage),
    hooks: Option<Box<dyn PeerHooks>>,
    /// With more than one shard: this loop is shard 0, the leader.
    link: Option<ShardLink>,
    followers: Vec<JoinHandle<()>>,
}

impl HubDriver {
    /// Build the loop. `routes[i]` are the routes of the `i`-th peer added
    /// to `conc` (in id order).
    #[allow(clippy::too_many_arguments)] // the daemon's parts, as they are
    pub fn new(
        tun: Tun,
        sockets: Vec<PathSocket>,
        conc: Concentrator,
        clock: SystemClock,
        name: &str,
        addresses: Vec<String>,
        control_socket: String,
        routes: Vec<Vec<ipnet::IpNet>>,
        workers: (usize, crate::workers::Engage),
    ) -> io::Result<(HubDriver, ControlHook)> {
        let poll = Poll::new()?;
        let reg = poll.registry();
        crate::driver::register_io(reg, &tun, &sockets)?;
        let src = LoopSources::register(reg)?;
        let paths = UdpPaths::new(sockets, 2 * BATCH_PACKETS);
        // On this thread, which runs shard 0's loop (a pool's first worker).
        let pool = crate::workers::Workers::new(workers.0, name, workers.1)?;
        let hub = Hub::for_concentrator(tun, paths, clock, conc, name).with_workers(pool);
        Ok((
            HubDriver {
                poll,
                hub,
                name: name.to_string(),
                addresses,
                control_socket,
                signal_rx: src.signal_rx,
                hangup_rx: src.hangup_rx,
                control_rx: src.control_rx,
                started: Instant::now(),
                ready: Ready::all(0),
                routes,
                workers,
                hooks: None,
                link: None,
                followers: vec![],
            },
            src.hook,
        ))
    }

    pub fn set_hooks(&mut self, hooks: Box<dyn PeerHooks>) {
        self.hooks = Some(hooks);
    }

    /// Start the other shards, one thread each: `parts[i]` is shard
    /// `i + 1`'s TUN queue, path sockets and concentrator shard. This loop
    /// becomes shard 0, their leader.
    pub fn spread(&mut self, parts: Vec<(Tun, Vec<PathSocket>, Concentrator)>) -> io::Result<()> {
        if parts.is_empty() {
            return Ok(());
        }
        let polls = (0..parts.len())
            .map(|_| Poll::new())
            .collect::<io::Result<Vec<_>>>()?;
        let mut regs = vec![self.poll.registry()];
        regs.extend(polls.iter().map(Poll::registry));
        let mut links = ShardLink::build(&regs)?.into_iter();
        let Some(own) = links.next() else {
            return Ok(());
        };
        let mut followers = vec![];
        for ((poll, (tun, sockets, conc)), link) in polls.into_iter().zip(parts).zip(links) {
            followers.push(shards::Follower::spawn(
                poll,
                tun,
                sockets,
                conc,
                &self.name,
                link,
                self.workers,
            )?);
        }
        self.link = Some(own);
        self.followers = followers;
        Ok(())
    }

    /// Stop and join the other shards.
    fn stop_followers(&mut self) {
        if let Some(l) = self.link.as_mut() {
            l.stop_others();
        }
        for f in self.followers.drain(..) {
            let _ = f.join();
        }
    }

    /// Liveness of peers (of any shard) for the hooks.
    fn report_live(&mut self, changes: Vec<(PeerId, bool)>) {
        for (id, up) in changes {
            let cfg = self.hub.concentrator().peer(id).map(|p| p.cfg.clone());
            if let (Some(cfg), Some(h)) = (cfg, self.hooks.as_mut()) {
                info!(tunnel = %self.name, peer = %cfg.name, "{}", if up { "peer here (session and a path up)" } else { "peer gone (no path up)" });
                h.live(&cfg, up);
            }
        }
    }

    /// Run until SIGINT or SIGTERM (the other shards with it).
    pub fn run(&mut self) -> io::Result<()> {
        let r = self.run_loop();
        self.stop_followers();
        r
    }

    fn run_loop(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        self.ready = Ready::all(self.hub.paths.sockets.len());
        let mut drain = Drain::default();
        loop {
            let now = self.hub.clock.now();
            if drain.done(now, || self.hub.queued()) {
                info!(tunnel = %self.name, left = self.hub.queued(), "stopped");
                return Ok(());
            }
            if drain.active() {
                self.ready.tun = false;
            }
            if !self
                .hub
                .wait(&mut self.poll, &mut events, self.ready.any(), &drain)?
            {
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    TOKEN_TUN => self.ready.tun = !drain.active(),
                    TOKEN_SIGNAL => {
                        let mut buf = [0u8; 64];
                        while matches!(self.signal_rx.read(&mut buf), Ok(n) if n > 0) {}
                        if drain.signal(self.hub.clock.now()) {
                            info!(tunnel = %self.name, "second signal: stopping now");
                            return Ok(());
                        }
                        info!(tunnel = %self.name, queued = self.hub.queued(), "signal received: stopping once what is queued has left (at most 200 ms)");
                        // The other shards drain theirs meanwhile.
                        if let Some(l) = self.link.as_mut() {
                            l.stop_others();
                        }
                    }
                    TOKEN_HANGUP => {
                        let mut buf = [0u8; 64];
                        while matches!(self.hangup_rx.read(&mut buf), Ok(n) if n > 0) {}
                        info!(tunnel = %self.name, "SIGHUP received: reloading the peers");
                        let r = self.reload("SIGHUP");
                        info!(tunnel = %self.name, result = %r, "reload");
                    }
                    TOKEN_WAKER => self.answer_control(),
                    TOKEN_SHARD => {
                        if let Some(l) = self.link.as_mut() {
                            let d = l.drain(&mut self.hub);
                            self.report_live(d.live);
                            if let Some(i) = d.gone.first() {
                                return Err(io::Error::other(format!(
                                    "shard {i} stopped; its peers have no loop"
                                )));
                            }
                        }
                    }
                    Token(t) if t >= TOKEN_SOCKET_BASE => {
                        if let Some(r) = self.ready.sockets.get_mut(t - TOKEN_SOCKET_BASE) {
                            *r = true;
                        }
                    }
                    _ => {}
                }
            }
            self.hub.turn(&mut self.ready);
            if let Some(l) = self.link.as_mut() {
                l.forward(&mut self.hub);
            }
            let changes = self.hub.take_changes();
            self.report_live(changes);
        }
    }
}

#[path = "hub_control.rs"]
mod hub_control;
