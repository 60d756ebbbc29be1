//! `mpt up`: build the tunnel from a validated configuration and run it.
//!
//! Start-up order is chosen so that a start that cannot work fails before
//! anything visible exists: sockets are bound first (port in use, address
//! not local, no such interface), then the control socket, then the TUN
//! (name taken, permission), then addresses and routes. Whatever was created
//! is removed by drop order on any error and at stop: routes, then the TUN
//! (which takes its addresses with it), then the control socket file.

use std::io;
use std::sync::Arc;

use mpt_config::{Config, PathSection, Release, Role, SchedulerMode, Security, Share};
use mpt_core::crypto::handshake::Identity as KeyIdentity;
use mpt_core::crypto::keys::PresharedKey;
use mpt_core::crypto::state::{HandshakeRole, SecurityConfig};
use mpt_core::path::PathConfig;
use mpt_core::sched;
use mpt_core::tunnel::{ReleaseKind, SchedKind, Tunnel, TunnelConfig};
use mpt_core::NANOS_PER_MS;
use mpt_io::control::ControlSocket;
use mpt_io::driver::{Driver, Identity};
use mpt_io::linux::SystemClock;
use mpt_io::netcfg::{self, Routes};
use mpt_io::seam::Clock;
use mpt_io::tun::Tun;
use mpt_io::udp::{bind_path_sockets, PathBind};
use mpt_io::workers::Engage;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

pub fn init_logging(level: Option<&str>) {
    let filter = match level {
        Some(l) => EnvFilter::new(l),
        None => EnvFilter::try_from_env("MPT_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
    };
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// The core's view of a `[[path]]`, on the socket `local_key`.
pub fn path_config(p: &PathSection, local_key: usize) -> PathConfig {
    PathConfig {
        name: p.name.clone(),
        local_key,
        local: p.local,
        remote: p.remote,
        weight: p.weight,
        rate_cap_bps: p.rate_mbit.map(|r| r * 1_000_000),
        backup: p.backup,
        keepalive: p.keepalive_ms * NANOS_PER_MS,
        dead: p.dead_ms * NANOS_PER_MS,
    }
}

pub fn core_config(cfg: &Config, keys: &[usize], seed: [u8; 32]) -> TunnelConfig {
    TunnelConfig {
        paths: cfg
            .paths
            .iter()
            .zip(keys)
            .map(|(p, k)| path_config(p, *k))
            .collect(),
        mtu: cfg.tunnel.mtu as usize,
        datagram_body: Some(cfg.tunnel.datagram_body as usize),
        reorder_window: cfg.reorder.window,
        reorder_max_delay: cfg.reorder.max_delay_ms * NANOS_PER_MS,
        release: match cfg.reorder.release {
            Release::Timeout => ReleaseKind::Timeout,
            Release::Frontier => ReleaseKind::PathFrontier,
        },
        share: match cfg.share {
            Share::Bytes => sched::Share::Bytes,
            Share::Packets => sched::Share::Packets,
        },
        scheduler: match cfg.scheduler {
            SchedulerMode::Ecf => SchedKind::Ecf,
            SchedulerMode::Wrr => SchedKind::Wrr,
        },
        queue_max: cfg.queue_ms * NANOS_PER_MS,
        local_queue: cfg.local_queue_ms * NANOS_PER_MS,
        security: match &cfg.security {
            Security::InsecurePlaintext => None,
            Security::Encrypted(k) => Some(SecurityConfig {
                identity: KeyIdentity {
                    private: k.private.clone(),
                    peer_public: k.peer_public,
                    // Without a configured PSK, Noise IKpsk2 uses zeros (as WireGuard).
                    psk: k.psk.clone().unwrap_or(PresharedKey([0; 32])),
                },
                role: match cfg.role {
                    Role::Client => HandshakeRole::Initiator,
                    Role::Server => HandshakeRole::Responder,
                },
                cipher: k.cipher,
                rekey_after: k.rekey_after_s * 1_000 * NANOS_PER_MS,
                rekey_after_packets: k.rekey_after_packets,
                index_slot: None,
            }),
        },
        seed,
        adapt_to_loss: cfg.adapt_to_loss,
        recover: cfg.reorder.recover,
        qos: cfg.qos.clone(),
        // Only where packets larger than a datagram are cut: routed TCP
        // then sends segments that fit one (`mss.rs`).
        mss_clamp: (cfg.tunnel.mss_clamp && cfg.tunnel.mtu > cfg.tunnel.datagram_body).then(|| {
            mpt_core::mss::MssClamp::new(&cfg.tunnel.addresses, cfg.tunnel.datagram_body as usize)
        }),
        // Forward error correction (`[reorder] fec`): blocks of up to
        // FEC_BLOCK_PACKETS, repairs by each path's random loss.
        fec: cfg
            .reorder
            .fec
            .then_some((FEC_BLOCK_PACKETS, mpt_core::fec::Repairs::ByLoss)),
    }
}

/// Data packets per FEC block (tuning knob: 32 datagrams are 2.5 ms of a
/// 150 Mbit/s path; a block that fills more slowly closes by age,
/// `mpt_core::tunnel` `FEC_BLOCK_AGE_NS`).
pub const FEC_BLOCK_PACKETS: usize = 32;

/// Run the daemon until SIGINT/SIGTERM.
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
    let (sockets, keys) = bind_path_sockets(&binds)?;
    let mut control = ControlSocket::bind(&cfg.tunnel.control_socket)?;
    let tun = Tun::create(&cfg.tunnel.name, cfg.tunnel.offload)?;
    netcfg::configure(&cfg.tunnel.name, &cfg.tunnel.addresses, cfg.tunnel.mtu)?;
    let route_list: Vec<_> = cfg
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = r.line.map_or(String::new(), |l| format!(":{l}"));
            let label = format!("{}{at}: route[{}]", cfg.file.display(), i + 1);
            (r.network, r.metric, label)
        })
        .collect();
    let routes = Routes::install(&cfg.tunnel.name, &route_list)?;
    if let Some(listen) = cfg.metrics_listen {
        crate::metrics::spawn(
            listen,
            cfg.tunnel.control_socket.clone(),
            cfg.tunnel.name.clone(),
        )?;
    }

    let clock = SystemClock::new();
    if cfg.security == Security::InsecurePlaintext {
        warn!(
            tunnel = %cfg.tunnel.name,
            "INSECURE: encryption is off (insecure_no_encryption = true): anyone on a path can read and inject traffic; use only in a lab"
        );
    }
    let seed = crate::keys::random32()?;
    let tunnel = Tunnel::new(core_config(&cfg, &keys, seed), clock.now());
    let identity = Identity {
        name: cfg.tunnel.name.clone(),
        role: match cfg.role {
            Role::Server => "server",
            Role::Client => "client",
        },
        addresses: cfg.tunnel.addresses.iter().map(|a| a.to_string()).collect(),
        control_socket: cfg.tunnel.control_socket.display().to_string(),
        peer_public_key: match &cfg.security {
            Security::Encrypted(k) => Some(mpt_core::crypto::keys::encode(&k.peer_public.0)),
            Security::InsecurePlaintext => None,
        },
    };
    let workers = cfg.tunnel.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let engage = if cfg.tunnel.parallel_always {
        Engage::Always
    } else {
        Engage::Auto
    };
    // A copy of the loop's clock (the same epoch), for the failover.
    let wall = clock;
    let (mut driver, hook) = Driver::new(tun, sockets, tunnel, clock, identity, workers, engage)?;
    let watched = crate::resolve::spawn(&cfg, hook.tx.clone(), Arc::clone(&hook.wake))?;
    // The reload owns the routes from now on: it changes them, and they
    // go when the driver (and the reload with it) is dropped.
    driver.set_reload(crate::reload::hook(cfg.clone(), routes, watched));
    if let Some(mut f) = crate::failover::Failover::new(
        &cfg,
        &keys,
        wall.now(),
        Box::new(move || wall.wall_offset()),
    ) {
        driver.set_failover(Box::new(move |t, now| f.tick(t, now)));
    }
    control.serve(hook.tx, Arc::clone(&hook.wake))?;
    info!(
        tunnel = %cfg.tunnel.name,
        paths = cfg.paths.len(),
        mtu = cfg.tunnel.mtu,
        tun_offload = driver.offload(),
        workers,
        control = %cfg.tunnel.control_socket.display(),
        "tunnel up"
    );
    for p in &cfg.paths {
        let peer = match (&p.remote, &p.remote_host) {
            (Some(r), Some(h)) => format!("{r} (resolved from {h})"),
            (Some(r), None) => r.to_string(),
            (None, _) => "(learned from the client)".to_string(),
        };
        info!(tunnel = %cfg.tunnel.name, path = %p.name, local = %p.local, peer = %peer, weight = p.weight, "path configured");
    }
    let res = driver.run();
    drop(driver);
    drop(control);
    match &res {
        Ok(()) => info!(tunnel = %cfg.tunnel.name, "tunnel down, interface and routes removed"),
        Err(e) => warn!(tunnel = %cfg.tunnel.name, "event loop failed: {e}"),
    }
    res
}
