//! `mpt check`: the one-paragraph description of a configuration that
//! loaded (the tunnel, its paths and their MTU, security, QoS, a
//! concentrator's peers and their limits). Pure: it reads the parsed
//! configuration only.

use std::fmt::Write as _;

use mpt_config::{overhead, Config, Role, SchedulerMode, Security};
use mpt_core::crypto::aead::Cipher;
use mpt_core::crypto::state::CipherPref;

/// One-paragraph summary printed by `mpt check`.
pub fn describe_config(c: &Config) -> String {
    let mut o = String::new();
    let role = match c.role {
        Role::Server => "server",
        Role::Client => "client",
    };
    let _ = writeln!(
        o,
        "{}: ok — tunnel {} ({role}), {} address(es), mtu {}{}, {} path(s), {} route(s)",
        c.file.display(),
        c.tunnel.name,
        c.tunnel.addresses.len(),
        c.tunnel.mtu,
        if c.tunnel.mtu_configured {
            ""
        } else {
            " (derived)"
        },
        c.paths.len(),
        c.routes.len()
    );
    if !c.routes.is_empty() && c.tunnel.mtu > c.tunnel.datagram_body {
        let _ = writeln!(
            o,
            "  routes: packets routed through the tunnel that are larger than {} bytes (one datagram) travel as two or more; {}",
            c.tunnel.datagram_body,
            if c.tunnel.mss_clamp {
                "routed TCP is told to send segments that fit one (mss_clamp), so only UDP and other large packets from the LAN are cut (docs/deploy.md, routing)"
            } else {
                "mss_clamp = false: routed TCP from a LAN of MTU 1500 pays two datagrams per full packet (docs/deploy.md, routing)"
            }
        );
    }
    for p in &c.paths {
        let _ = writeln!(
            o,
            "  path {}: {} -> {} (IPv{}), {}, keepalive {} ms, dead {} ms, overhead {} B",
            p.name,
            p.local,
            match (&p.remote, &p.remote_host) {
                (Some(r), Some(h)) => format!("{r} ({h})"),
                (Some(r), None) => r.to_string(),
                (None, _) => "(learned)".to_string(),
            },
            if p.local.is_ipv4() { 4 } else { 6 },
            match (c.scheduler, p.rate_mbit) {
                (SchedulerMode::Wrr, _) => format!("weight {}", p.weight),
                (SchedulerMode::Ecf, Some(m)) => format!("capacity learned, capped at {m} Mbit/s"),
                (SchedulerMode::Ecf, None) => "capacity learned".to_string(),
            },
            p.keepalive_ms,
            p.dead_ms,
            overhead(&p.local)
        );
    }
    let _ = match &c.security {
        Security::Encrypted(k) => writeln!(
            o,
            "  security: encrypted (Noise IKpsk2, {}), pre-shared key {}, rekey after {} s or {} packets",
            match k.cipher {
                CipherPref::Auto => "cipher auto",
                CipherPref::Only(Cipher::ChaCha20Poly1305) => "ChaCha20-Poly1305",
                CipherPref::Only(Cipher::Aes256Gcm) => "AES-256-GCM",
            },
            if k.psk.is_some() { "yes" } else { "no" },
            k.rekey_after_s,
            k.rekey_after_packets
        ),
        Security::InsecurePlaintext => writeln!(o, "  security: NONE (insecure_no_encryption = true) — lab use only"),
    };
    if c.is_concentrator() {
        let _ = writeln!(
            o,
            "  concentrator: {} peer(s){}",
            c.peers.len(),
            c.peers_dir
                .as_ref()
                .map(|d| format!(" (with the files of {})", d.display()))
                .unwrap_or_default()
        );
        for p in &c.peers {
            let _ = writeln!(
                o,
                "  peer {}: key {}, allowed {}{}, pre-shared key {}{}",
                p.name,
                mpt_core::crypto::keys::encode(&p.public_key.0),
                p.allowed_ips
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                if p.routes.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", routes {}",
                        p.routes
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                },
                if p.psk.is_some() { "yes" } else { "no" },
                peer_limits(p),
            );
        }
    }
    let _ = match &c.qos {
        None => writeln!(o, "  qos: off"),
        Some(q) => writeln!(
            o,
            "  qos: {}",
            q.classes
                .iter()
                .map(|k| format!(
                    "{} (precedence {}{})",
                    k.name,
                    k.priority,
                    if k.realtime { ", real-time" } else { "" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    o
}

/// A concentrator peer's own limits for `mpt check` (empty without).
fn peer_limits(p: &mpt_config::PeerSection) -> String {
    let mut out = String::new();
    if let Some(m) = p.rate_mbit {
        let _ = write!(out, ", at most {m} Mbit/s per path");
    }
    for (name, m) in &p.path_rate_mbit {
        let _ = write!(out, ", {name} at most {m} Mbit/s");
    }
    if let Some(q) = &p.qos {
        let names: Vec<&str> = q.classes.iter().map(|c| c.name.as_str()).collect();
        let _ = write!(out, ", own classes {}", names.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_a_peers_own_limits() {
        use mpt_core::crypto::keys::{encode, PrivateKey};
        let key = |n: u8| encode(&PrivateKey::from_random([n; 32]).public().0);
        let text = format!(
            r#"
[tunnel]
name = "mpt0"
addresses = ["10.200.0.1/16"]
[security]
private_key = "{}"
[[path]]
name = "lte"
local = "192.0.2.1:5000"
[[peer]]
name = "bus"
public_key = "{}"
allowed_ips = ["10.200.1.2/32"]
rate_mbit = 20
path_rate_mbit = {{ lte = 5 }}
[peer.qos]
[[peer.qos.class]]
name = "voip"
dscp = ["EF"]
realtime = true
[[peer]]
public_key = "{}"
allowed_ips = ["10.200.2.2/32"]
"#,
            encode(&[9u8; 32]),
            key(1),
            key(2)
        );
        let c = mpt_config::Config::parse(&text, std::path::Path::new("s.toml")).unwrap();
        let limits = peer_limits(&c.peers[0]);
        assert!(
            limits.starts_with(
                ", at most 20 Mbit/s per path, lte at most 5 Mbit/s, own classes voip"
            ),
            "{limits}"
        );
        assert_eq!(peer_limits(&c.peers[1]), "");
    }
}
