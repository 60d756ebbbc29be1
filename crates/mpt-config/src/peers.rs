//! A concentrator's peers: `[[peer]]` blocks in the server's file, and
//! one file per peer in `tunnel.peers_dir`, so that adding a client never
//! means editing a large file.
//!
//! ```toml
//! [[peer]]
//! name = "site-17"                         # optional; for logs and status
//! public_key = "base64"                    # the client's `mpt pubkey`
//! preshared_key_file = "psk/site-17"       # optional; or preshared_key
//! allowed_ips = ["10.200.17.2/32", "fd00:200::17/128"]
//! routes = ["192.168.17.0/24"]             # optional: networks behind it
//! rate_mbit = 20                           # optional: cap on every path to it
//! path_rate_mbit = { lte = 5 }             # optional: caps on named paths
//! [peer.qos]                               # optional: its own classes
//! [[peer.qos.class]]                       #   (the [qos] syntax)
//! name = "voip"
//! dscp = ["EF"]
//! realtime = true
//! ```
//!
//! A file in `peers_dir` (`*.toml`, read in name order) holds the same keys
//! at its top level; its name without `.toml` is the peer's default name.
//!
//! `allowed_ips` are the addresses the peer may send from and the
//! destinations it is sent to (WireGuard's allowed IPs); `routes` are
//! allowed IPs too, and the daemon also routes them into the tunnel.
//!
//! `rate_mbit` and `path_rate_mbit` cap what the server sends to the peer
//! (the lowest of them and the server path's own `rate_mbit` applies);
//! `qos` replaces the server's `[qos]` for this peer. They need path-aware
//! sending, checked with the rest of the file.
//!
//! Invariants of the result: every peer has a valid public key, at least
//! one allowed IP, and a unique name; no public key and no prefix belongs
//! to two peers (the error names both); secrets never appear in errors.

use std::path::{Path, PathBuf};

use ipnet::IpNet;
use mpt_core::crypto::keys::{PresharedKey, PublicKey};
use toml_edit::{Document, Table};

use crate::files;
use crate::reader::{Ctx, TableReader};
use crate::security::{read_psk, read_public_key};

pub const PEER_BLOCK_KEYS: &[&str] = &[
    "name",
    "public_key",
    "preshared_key",
    "preshared_key_file",
    "allowed_ips",
    "routes",
    "rate_mbit",
    "path_rate_mbit",
    "qos",
];

/// Largest per-peer cap, Mbit/s (a typo guard, as a path's).
const MAX_RATE_MBIT: i64 = 1_000_000;

/// Most peer files read from `peers_dir` (a guard against a wrong path).
pub const MAX_PEER_FILES: usize = 100_000;

/// One peer of a concentrator.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSection {
    pub name: String,
    pub public_key: PublicKey,
    pub psk: Option<PresharedKey>,
    pub allowed_ips: Vec<IpNet>,
    /// Networks behind the peer (allowed IPs that also get a route).
    pub routes: Vec<IpNet>,
    /// Cap on every path toward the peer, Mbit/s.
    pub rate_mbit: Option<u64>,
    /// Caps on named paths (the server's path names), Mbit/s.
    pub path_rate_mbit: Vec<(String, u64)>,
    /// Traffic classes of this peer instead of the server's.
    pub qos: Option<mpt_core::qos::QosConfig>,
    /// Where it was configured (`file` or `file:line`), for errors.
    pub source: String,
}

impl PeerSection {
    /// Every prefix the peer holds: its allowed IPs and its routes.
    pub fn prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.allowed_ips
            .iter()
            .chain(&self.routes)
            .map(IpNet::trunc)
    }
}

fn prefixes(ctx: &mut Ctx<'_>, r: &TableReader<'_>, k: &str) -> Vec<IpNet> {
    let mut out = vec![];
    for (i, s) in r.strings(ctx, k).unwrap_or_default().iter().enumerate() {
        match s.parse::<IpNet>() {
            Ok(n) => out.push(n),
            Err(_) => match s.parse::<std::net::IpAddr>() {
                Ok(a) => out.push(IpNet::from(a)),
                Err(_) => ctx.error(
                    r.span(k),
                    &format!("{}[{}]", r.key(k), i + 1),
                    format!("'{s}' is not an address or prefix, like 10.0.0.2/32 or fd00::2/128"),
                ),
            },
        }
    }
    out
}

/// `path_rate_mbit`: path name to Mbit/s, as an inline table or a table.
fn path_caps(ctx: &mut Ctx<'_>, r: &TableReader<'_>, t: &Table) -> Vec<(String, u64)> {
    let Some(item) = t.get("path_rate_mbit") else {
        return vec![];
    };
    let key = r.key("path_rate_mbit");
    let Some(tl) = item.as_table_like() else {
        ctx.error(
            r.span("path_rate_mbit"),
            &key,
            "must be a table of path names to Mbit/s, like { lte = 5 }",
        );
        return vec![];
    };
    let mut out = vec![];
    for (name, v) in tl.iter() {
        match v.as_integer().filter(|m| (1..=MAX_RATE_MBIT).contains(m)) {
            Some(m) => out.push((name.to_string(), m as u64)),
            None => ctx.error(
                r.span("path_rate_mbit"),
                &format!("{key}.{name}"),
                format!("must be a whole number of Mbit/s from 1 to {MAX_RATE_MBIT}"),
            ),
        }
    }
    out
}

/// Read one peer from table `t`; `default_name` when it names none.
pub fn read_peer(
    ctx: &mut Ctx<'_>,
    t: &Table,
    prefix: String,
    default_name: &str,
    config_file: &Path,
) -> Option<PeerSection> {
    let r = TableReader::new(t, prefix, PEER_BLOCK_KEYS);
    let line = ctx.line_of(r.table_span());
    let name = r
        .string(ctx, "name")
        .unwrap_or_else(|| default_name.to_string());
    let key = read_public_key(ctx, &r);
    let psk = read_psk(ctx, &r, config_file);
    let allowed_ips = prefixes(ctx, &r, "allowed_ips");
    if allowed_ips.is_empty() && r.span("allowed_ips").is_none() {
        ctx.error(
            r.table_span(),
            &r.key("allowed_ips"),
            "missing: the peer's tunnel addresses, like [\"10.200.0.2/32\"]",
        );
    }
    let routes = prefixes(ctx, &r, "routes");
    let rate_mbit = r
        .int(ctx, "rate_mbit", (1, MAX_RATE_MBIT))
        .map(|v| v as u64);
    let path_rate_mbit = path_caps(ctx, &r, t);
    // Whether sending is paced is checked with the rest of the file.
    let qos = match t.get("qos") {
        None => None,
        Some(_) => crate::table(ctx, t, "qos").and_then(|q| crate::qos::read(ctx, Some(q), true)),
    };
    r.finish(ctx);
    let source = match line {
        Some(l) => format!("{}:{l}", ctx.file),
        None => ctx.file.clone(),
    };
    (!allowed_ips.is_empty()).then_some(())?;
    Some(PeerSection {
        name,
        public_key: key?,
        psk,
        allowed_ips,
        routes,
        rate_mbit,
        path_rate_mbit,
        qos,
        source,
    })
}

/// Read every `*.toml` in `dir` (relative to the configuration file's
/// directory) as one peer each; errors name each file.
pub fn read_dir(
    config_file: &Path,
    dir: &str,
) -> Result<Vec<PeerSection>, Vec<crate::ConfigError>> {
    let base = config_file.parent().unwrap_or(Path::new("."));
    let dir = base.join(dir);
    let fail = |msg: String| {
        vec![crate::ConfigError {
            file: config_file.display().to_string(),
            line: None,
            key: "tunnel.peers_dir".into(),
            message: msg,
        }]
    };
    let entries =
        std::fs::read_dir(&dir).map_err(|e| fail(format!("cannot read {}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if files.len() > MAX_PEER_FILES {
        return Err(fail(format!(
            "{} holds {} peer files; at most {MAX_PEER_FILES}",
            dir.display(),
            files.len()
        )));
    }
    let mut peers = vec![];
    let mut errors = vec![];
    for f in files {
        let (text, _) = match files::read_text(&f, files::MAX_CONFIG_BYTES) {
            Ok(t) => t,
            Err(m) => {
                errors.extend(fail(m));
                continue;
            }
        };
        let mut ctx = Ctx::new(f.display().to_string(), &text);
        match Document::parse(text.as_str()) {
            Ok(doc) => {
                let stem = f.file_stem().map(|s| s.to_string_lossy().into_owned());
                let name = stem.unwrap_or_default();
                if let Some(p) = read_peer(&mut ctx, doc.as_table(), String::new(), &name, &f) {
                    peers.push(p);
                }
            }
            Err(e) => {
                let msg = e.message().to_string();
                ctx.error(e.span(), "", format!("TOML syntax error: {msg}"));
            }
        }
        errors.extend(ctx.errors);
    }
    if errors.is_empty() {
        Ok(peers)
    } else {
        Err(errors)
    }
}

/// Problems between the peers and the server's paths: a cap on a path the
/// server does not have, limits without path-aware sending.
pub fn check_limits(peers: &[PeerSection], path_names: &[&str], paced: bool) -> Vec<String> {
    let mut out = vec![];
    for p in peers {
        for (name, _) in &p.path_rate_mbit {
            if !path_names.contains(&name.as_str()) {
                out.push(format!(
                    "peer '{}' ({}): path_rate_mbit names path '{name}', which is not one of the server's paths ({})",
                    p.name,
                    p.source,
                    path_names.join(", ")
                ));
            }
        }
        let limited = p.rate_mbit.is_some() || !p.path_rate_mbit.is_empty() || p.qos.is_some();
        if limited && !paced {
            out.push(format!(
                "peer '{}' ({}): rate_mbit, path_rate_mbit and qos need path-aware sending (scheduler mode \"ecf\")",
                p.name, p.source
            ));
        }
    }
    out
}

/// Problems between peers: a name, public key or prefix used twice.
pub fn cross_check(peers: &[PeerSection]) -> Vec<String> {
    use std::collections::HashMap;
    let mut out = vec![];
    let mut names: HashMap<&str, &PeerSection> = HashMap::new();
    let mut keys: HashMap<[u8; 32], &PeerSection> = HashMap::new();
    let mut nets: HashMap<IpNet, usize> = HashMap::new();
    for (i, p) in peers.iter().enumerate() {
        if let Some(o) = names.insert(&p.name, p) {
            out.push(format!(
                "{}: peer name '{}' is also the name of the peer at {}",
                p.source, p.name, o.source
            ));
        }
        if let Some(o) = keys.insert(p.public_key.0, p) {
            out.push(format!(
                "{}: peer '{}' has the same public_key as peer '{}' ({})",
                p.source, p.name, o.name, o.source
            ));
        }
        for n in p.prefixes() {
            match nets.get(&n) {
                Some(&o) if o != i => {
                    let o = &peers[o];
                    out.push(format!(
                        "{}: prefix {n} of peer '{}' belongs to peer '{}' ({}) already",
                        p.source, p.name, o.name, o.source
                    ));
                }
                _ => {
                    nets.insert(n, i);
                }
            }
        }
    }
    out
}
