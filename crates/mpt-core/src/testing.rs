//! Test configurations shared by the core's tests, benchmarks and fuzz
//! targets (cargo feature `testing`; not part of the daemon's build).
//!
//! Two sides of a tunnel: side 0 is the server (handshake responder), side
//! 1 the client. Path `i` of side `s` is bound to [`addr`]`(s, i)` and
//! sends to the same path of the other side. Keys are fixed, so tests and
//! fuzz targets are reproducible, and both sides of a secure pair built
//! here know each other's public key.
//!
//! Invariant: one place builds a [`TunnelConfig`] for tests; a new field of
//! the configuration gets its test default here and nowhere else.

use std::net::SocketAddr;

use crate::crypto::handshake::Identity;
use crate::crypto::keys::{PresharedKey, PrivateKey};
use crate::crypto::state::{CipherPref, HandshakeRole, SecurityConfig};
use crate::path::PathConfig;
use crate::sched::Share;
use crate::tunnel::{ReleaseKind, SchedKind, Tunnel, TunnelConfig};
use crate::{Nanos, NANOS_PER_MS};

const MS: Nanos = NANOS_PER_MS;

/// Address of path `path` on side `side`: `10.side.path.1:(4000 + path)`.
pub fn addr(side: u8, path: usize) -> SocketAddr {
    SocketAddr::from(([10, side, path as u8, 1], 4000 + path as u16))
}

/// The fixed static key of side 0 (server) or 1 (client).
pub fn private_key(side: u8) -> PrivateKey {
    PrivateKey::from_random([10 + side; 32])
}

/// Security of `side` towards the other side. With `psk_ok` false the
/// client holds a different pre-shared key than the server (its handshakes
/// fail).
pub fn security(side: u8, psk_ok: bool) -> SecurityConfig {
    SecurityConfig {
        identity: Identity {
            private: private_key(side),
            peer_public: private_key(1 - side).public(),
            psk: PresharedKey(if psk_ok || side == 0 {
                [7; 32]
            } else {
                [8; 32]
            }),
        },
        role: if side == 0 {
            HandshakeRole::Responder
        } else {
            HandshakeRole::Initiator
        },
        cipher: CipherPref::Auto,
        rekey_after: 120_000 * MS,
        rekey_after_packets: 1 << 40,
        index_slot: None,
    }
}

/// A tunnel configuration for tests, with defaults that every test shares.
#[derive(Clone)]
pub struct TestConfig {
    side: u8,
    config: TunnelConfig,
}

impl TestConfig {
    /// Side `side` with `paths` paths, each with its remote configured;
    /// plaintext, path-frontier release, no loss recovery.
    pub fn new(side: u8, paths: usize) -> Self {
        let paths = (0..paths)
            .map(|i| PathConfig {
                name: format!("p{i}"),
                local_key: i,
                local: addr(side, i),
                remote: Some(addr(1 - side, i)),
                weight: 1,
                rate_cap_bps: None,
                backup: false,
                keepalive: 100 * MS,
                dead: 500 * MS,
            })
            .collect();
        Self {
            side,
            config: TunnelConfig {
                paths,
                mtu: 1400,
                datagram_body: None,
                reorder_window: 1024,
                reorder_max_delay: 200 * MS,
                release: ReleaseKind::PathFrontier,
                share: Share::Bytes,
                scheduler: SchedKind::Wrr,
                queue_max: 100 * MS,
                local_queue: 0,
                security: None,
                seed: [side; 32],
                adapt_to_loss: true,
                recover: false,
                qos: None,
                mss_clamp: None,
                fec: None,
            },
        }
    }

    /// With these traffic classes.
    pub fn qos(mut self, qos: crate::qos::QosConfig) -> Self {
        self.config.qos = Some(qos);
        self
    }

    pub fn release(mut self, release: ReleaseKind) -> Self {
        self.config.release = release;
        self
    }

    /// Encrypted with this side's fixed keys (and the right pre-shared key).
    pub fn secure(self) -> Self {
        let side = self.side;
        self.security(security(side, true))
    }

    pub fn security(mut self, security: SecurityConfig) -> Self {
        self.config.security = Some(security);
        self
    }

    /// No `remote` on any path: the side learns (a server behind which
    /// clients roam).
    pub fn learning(mut self) -> Self {
        self.config.paths.iter_mut().for_each(|p| p.remote = None);
        self
    }

    /// Path-aware scheduling: ECF over paced paths (the daemon's default;
    /// tests default to static weights, whose shares they check).
    pub fn ecf(mut self) -> Self {
        self.config.scheduler = SchedKind::Ecf;
        self
    }

    pub fn recover(mut self, on: bool) -> Self {
        self.config.recover = on;
        self
    }

    pub fn adapt_to_loss(mut self, on: bool) -> Self {
        self.config.adapt_to_loss = on;
        self
    }

    pub fn reorder(mut self, window: usize, max_delay: Nanos) -> Self {
        self.config.reorder_window = window;
        self.config.reorder_max_delay = max_delay;
        self
    }

    /// All paths bound to one local socket (key 0) at `local`, as a fuzz
    /// target or a server on one address has it.
    pub fn one_socket(mut self, local: SocketAddr) -> Self {
        for p in &mut self.config.paths {
            p.local_key = 0;
            p.local = local;
        }
        self
    }

    pub fn seed(mut self, seed: [u8; 32]) -> Self {
        self.config.seed = seed;
        self
    }

    /// Change anything else.
    pub fn with(mut self, f: impl FnOnce(&mut TunnelConfig)) -> Self {
        f(&mut self.config);
        self
    }

    pub fn config(self) -> TunnelConfig {
        self.config
    }

    /// The tunnel, created at time 0.
    pub fn tunnel(self) -> Tunnel {
        Tunnel::new(self.config, 0)
    }
}

/// Concentrators: the server side 0 with `paths` sockets (no remotes), its
/// fixed key, as the template of every peer's tunnel.
pub fn concentrator_template(paths: usize) -> TunnelConfig {
    TestConfig::new(0, paths).secure().learning().ecf().config()
}

/// The static key of concentrator client `c`.
pub fn client_key(c: u32) -> PrivateKey {
    let mut s = [0u8; 32];
    s[..4].copy_from_slice(&c.to_be_bytes());
    s[4] = 0xc1;
    PrivateKey::from_random(s)
}

/// The pre-shared key of concentrator client `c` (each its own).
pub fn client_psk(c: u32) -> PresharedKey {
    let mut s = [0x5au8; 32];
    s[..4].copy_from_slice(&c.to_be_bytes());
    PresharedKey(s)
}

/// Client `c`'s inner address: 10.100.0.0/16 + c (its allowed IP, /32).
pub fn client_inner_addr(c: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from_be_bytes([10, 100, 0, 0]) + c)
}

/// Address of client `c`'s path `i` (distinct per client and path).
pub fn client_addr(c: u32, i: usize) -> SocketAddr {
    let [_, _, hi, lo] = c.to_be_bytes();
    SocketAddr::from(([172, 16 + hi, lo, i as u8 + 1], 5000 + i as u16))
}

/// Concentrator client `c` with `paths` paths (path i to server socket i,
/// named as the server's), its own keys and a new seed.
pub fn client_config(c: u32, paths: usize) -> TunnelConfig {
    let mut seed = [0x33u8; 32];
    seed[..4].copy_from_slice(&c.to_be_bytes());
    TestConfig::new(1, paths)
        .ecf()
        .security(SecurityConfig {
            identity: Identity {
                private: client_key(c),
                peer_public: private_key(0).public(),
                psk: client_psk(c),
            },
            ..security(1, true)
        })
        .seed(seed)
        .with(|t| {
            for (i, p) in t.paths.iter_mut().enumerate() {
                p.local = client_addr(c, i);
            }
        })
        .config()
}

/// The concentrator's configuration of client `c`.
pub fn client_peer(c: u32) -> crate::concentrator::PeerConfig {
    crate::concentrator::PeerConfig {
        name: format!("client{c}"),
        public_key: client_key(c).public(),
        psk: client_psk(c),
        allowed_ips: vec![std::net::IpAddr::V4(client_inner_addr(c)).into()],
        limits: Default::default(),
    }
}
