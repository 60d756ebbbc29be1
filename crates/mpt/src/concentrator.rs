//! `mpt up` for a concentrator: one TUN and one set of path sockets for
//! every peer of the configuration (`[[peer]]` blocks and `peers_dir`).
//!
//! Each peer's `routes` are routed into the TUN (its `allowed_ips` are
//! reached through the tunnel's own addresses, or routed the same way when
//! they lie outside them). Peers come and go at runtime through the
//! control socket (`mpt peer add|remove`) and `mpt reload`, which re-reads
//! the file and its directory.
//!
//! With `tunnel.announce_table`, every prefix of each peer that is here (a
//! session and a path up) has a route in that kernel table while it is,
//! for a routing daemon (BIRD, FRR) to announce: several concentrators for
//! the same clients then attract each client's traffic to the one that
//! holds it (`docs/deploy.md`).
//!
//! A reload adds and removes peers, and updates the others in place: their
//! allowed IPs (at once, routes too), pre-shared key (their sessions end,
//! so a client without the new key is cut off), limits. The server's own
//! sections (its key, paths, tunnel, …) are listed as needing a restart.
//!
//! Invariants: the daemon starts only with every peer valid (the
//! configuration was checked as a whole); a failed reload changes nothing;
//! a security-relevant difference is never "nothing changed";
//! routes go when the daemon stops (the `Routes` guard).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use ipnet::IpNet;
use mpt_config::{Config, PeerSection};
use mpt_core::concentrator::{Concentrator, PeerConfig, PeerLimits};
use mpt_core::crypto::keys::PresharedKey;
use mpt_io::control::ControlSocket;
use mpt_io::hub_driver::{HubDriver, PeerHooks, Reread};
use mpt_io::linux::SystemClock;
use mpt_io::netcfg::{self, Routes};
use mpt_io::tun::Tun;
use mpt_io::udp::{bind_path_socket_sets, PathBind};
use mpt_io::workers::Engage;
use tracing::{info, warn};

/// The core's view of a configured peer, and the routes to install.
pub fn peer_config(p: &PeerSection) -> (PeerConfig, Vec<IpNet>) {
    (
        PeerConfig {
            name: p.name.clone(),
            public_key: p.public_key,
            psk: p.psk.clone().unwrap_or(PresharedKey([0; 32])),
            allowed_ips: p.prefixes().collect(),
            limits: PeerLimits {
                rate_cap_bps: p.rate_mbit.map(|m| m * 1_000_000),
                path_caps_bps: p
                    .path_rate_mbit
                    .iter()
                    .map(|(n, m)| (n.clone(), m * 1_000_000))
                    .collect(),
                qos: p.qos.clone(),
            },
        },
        p.routes.clone(),
    )
}

/// Routes a peer needs in the kernel: its routes, and its allowed IPs
/// that the tunnel's own addresses do not cover.
fn kernel_routes(cfg: &PeerConfig, routes: &[IpNet], own: &[IpNet]) -> Vec<IpNet> {
    let mut out: Vec<IpNet> = routes.to_vec();
    for n in &cfg.allowed_ips {
        let covered = own.iter().any(|o| o.trunc().contains(n));
        if !covered && !out.contains(n) {
            out.push(*n);
        }
    }
    out
}

struct Hooks {
    file: PathBuf,
    /// The configuration the daemon started with: the server's own
    /// sections, which a reload cannot change.
    running: Config,
    tunnel: String,
    own: Vec<IpNet>,
    routes: Routes,
    /// Routes of the peers that are here, in `tunnel.announce_table`.
    announced: Option<Routes>,
}

impl PeerHooks for Hooks {
    fn added(&mut self, cfg: &PeerConfig, routes: &[IpNet]) {
        for n in kernel_routes(cfg, routes, &self.own) {
            if let Err(e) = self.routes.add(n, None, &format!("peer {}", cfg.name)) {
                warn!(tunnel = %self.tunnel, peer = %cfg.name, "route {n}: {e}");
            }
        }
    }

    fn removed(&mut self, cfg: &PeerConfig, routes: &[IpNet]) {
        for n in kernel_routes(cfg, routes, &self.own) {
            if let Err(e) = self.routes.remove(n, None) {
                warn!(tunnel = %self.tunnel, peer = %cfg.name, "route {n}: {e}");
            }
        }
    }

    fn live(&mut self, cfg: &PeerConfig, up: bool) {
        let Some(a) = self.announced.as_mut() else {
            return;
        };
        for n in &cfg.allowed_ips {
            let r = if up {
                a.add(*n, None, &format!("peer {}", cfg.name))
            } else {
                a.remove(*n, None)
            };
            if let Err(e) = r {
                warn!(tunnel = %self.tunnel, peer = %cfg.name, "announce table, {n}: {e}");
            }
        }
    }

    fn updated(&mut self, old: (&PeerConfig, &[IpNet]), new: (&PeerConfig, &[IpNet])) {
        let before = kernel_routes(old.0, old.1, &self.own);
        let after = kernel_routes(new.0, new.1, &self.own);
        for n in before.iter().filter(|n| !after.contains(n)) {
            if let Err(e) = self.routes.remove(*n, None) {
                warn!(tunnel = %self.tunnel, peer = %new.0.name, "route {n}: {e}");
            }
        }
        for n in after.iter().filter(|n| !before.contains(n)) {
            if let Err(e) = self.routes.add(*n, None, &format!("peer {}", new.0.name)) {
                warn!(tunnel = %self.tunnel, peer = %new.0.name, "route {n}: {e}");
            }
        }
    }

    fn reread(&mut self) -> Result<Reread, String> {
        let c = Config::load(&self.file).map_err(|errs| {
            let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
            format!(
                "{} error(s); nothing changed:\n{}",
                list.len(),
                list.join("\n")
            )
        })?;
        if !c.is_concentrator() {
            return Err(format!(
                "{} no longer describes a concentrator; nothing changed",
                self.file.display()
            ));
        }
        Ok(Reread {
            peers: c.peers.iter().map(peer_config).collect(),
            needs_restart: server_differences(&self.running, &c),
        })
    }
}

/// The server's own sections that differ between the running
/// configuration and the file: a reload cannot change them (the daemon's
/// private key and paths are every peer's, its tunnel is the interface).
fn server_differences(r: &Config, new: &Config) -> Vec<String> {
    [
        ("tunnel", r.tunnel == new.tunnel),
        (
            "security (the server's own key or cipher)",
            r.security == new.security,
        ),
        ("paths", r.paths == new.paths),
        ("reorder", r.reorder == new.reorder),
        ("metrics", r.metrics_listen == new.metrics_listen),
        ("qos (the server's classes)", r.qos == new.qos),
        (
            "tunnel.announce_table",
            r.announce_table == new.announce_table,
        ),
        (
            "scheduler",
            r.scheduler == new.scheduler
                && r.share == new.share
                && r.adapt_to_loss == new.adapt_to_loss
                && r.queue_ms == new.queue_ms,
        ),
        ("route", r.routes == new.routes),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(k, _)| k.to_string())
    .collect()
}

/// Threads (shards of the peers) to run: `tunnel.shards`, else one per
/// core.
fn shard_count(cfg: &Config) -> usize {
    cfg.tunnel.shards.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    })
}

/// Run the concentrator until SIGINT/SIGTERM.
pub fn run(cfg: Config) -> io::Result<()> {
    let binds: Vec<PathBind<'_>> = cfg
        .paths
        .iter()
        .map(|p| PathBind {
            name: &p.name,
            local: p.local,
            interface: p.interface.as_deref(),
        })
        .collect();
    let n = shard_count(&cfg);
    let (socket_sets, keys) = bind_path_socket_sets(&binds, n)?;
    if n > 1 {
        if let Err(e) = mpt_io::shards::steer(&socket_sets) {
            // Still correct: what reaches the wrong shard is handed over.
            warn!(tunnel = %cfg.tunnel.name, "{e}; the kernel's hash spreads datagrams instead");
        }
    }
    let mut control = ControlSocket::bind(&cfg.tunnel.control_socket)?;
    let tuns = Tun::create_queues(&cfg.tunnel.name, n, cfg.tunnel.offload)?;
    let offload = tuns.first().is_some_and(|t| t.offload());
    netcfg::configure(&cfg.tunnel.name, &cfg.tunnel.addresses, cfg.tunnel.mtu)?;
    let seed = crate::keys::random32()?;
    let template = crate::daemon::core_config(&cfg, &keys, seed);
    let mut concs = vec![];
    for i in 0..n {
        let mut c = Concentrator::new(template.clone()).map_err(io::Error::other)?;
        c.set_shard(i, n);
        for p in &cfg.peers {
            c.add_peer(peer_config(p).0)
                .map_err(|e| io::Error::other(format!("{}: peer {}: {e}", p.source, p.name)))?;
        }
        concs.push(c);
    }
    let own = cfg.tunnel.addresses.clone();
    let mut routes = Routes::install(&cfg.tunnel.name, &[])?;
    let mut peer_routes = vec![];
    for p in &cfg.peers {
        let (pc, r) = peer_config(p);
        for n in kernel_routes(&pc, &r, &own) {
            routes.add(n, None, &format!("{}: peer {}", p.source, p.name))?;
        }
        peer_routes.push(r);
    }
    let mut parts = tuns.into_iter().zip(socket_sets).zip(concs);
    let ((tun, sockets), conc) = parts.next().ok_or_else(|| io::Error::other("no shard"))?;
    if let Some(listen) = cfg.metrics_listen {
        crate::metrics::spawn(
            listen,
            cfg.tunnel.control_socket.clone(),
            cfg.tunnel.name.clone(),
        )?;
    }
    let clock = SystemClock::new();
    let (mut driver, hook) = HubDriver::new(
        tun,
        sockets,
        conc,
        clock,
        &cfg.tunnel.name,
        cfg.tunnel
            .addresses
            .iter()
            .map(ToString::to_string)
            .collect(),
        cfg.tunnel.control_socket.display().to_string(),
        peer_routes,
        // Each shard seals and opens alone unless `workers` says more.
        (
            cfg.tunnel.workers.unwrap_or(1),
            if cfg.tunnel.parallel_always {
                Engage::Always
            } else {
                Engage::Auto
            },
        ),
    )?;
    driver.spread(parts.map(|((t, s), c)| (t, s, c)).collect())?;
    let announced = match cfg.announce_table {
        Some(t) => Some(Routes::install_in(&cfg.tunnel.name, t, &[])?),
        None => None,
    };
    driver.set_hooks(Box::new(Hooks {
        file: cfg.file.clone(),
        // The server's own sections only: the peers are the core's.
        running: Config {
            peers: vec![],
            ..cfg.clone()
        },
        tunnel: cfg.tunnel.name.clone(),
        own,
        routes,
        announced,
    }));
    control.serve(hook.tx, Arc::clone(&hook.wake))?;
    info!(
        tunnel = %cfg.tunnel.name,
        peers = cfg.peers.len(),
        paths = cfg.paths.len(),
        shards = n,
        mtu = cfg.tunnel.mtu,
        offload,
        control = %cfg.tunnel.control_socket.display(),
        "concentrator up"
    );
    let res = driver.run();
    drop(driver);
    drop(control);
    match &res {
        Ok(()) => {
            info!(tunnel = %cfg.tunnel.name, "concentrator down, interface and routes removed")
        }
        Err(e) => warn!(tunnel = %cfg.tunnel.name, "event loop failed: {e}"),
    }
    res
}
