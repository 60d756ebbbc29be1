//! # mpt-config — the keyword configuration of an mpt peer
//!
//! One TOML file per peer (schema in `docs/config.md`). [`Config::load`] and
//! [`Config::parse`] never touch the system: they read text and return either
//! a complete, validated [`Config`] or every error found, each naming the
//! file, the line and the key, with a suggestion for misspelt keys.
//!
//! Invariants of a returned `Config`:
//! * 1 to [`MAX_PATHS`] paths with unique names and distinct (local, remote)
//!   pairs (a remote that names a host is resolved, and checked again, by
//!   [`Config::resolve_remotes`]); each path's local and remote addresses
//!   are of one IP family;
//! * `dead_ms > keepalive_ms`; the tunnel MTU fits every path and is at least
//!   1280 when the tunnel carries IPv6;
//! * every default is filled in, so consumers never guess.

pub mod files;
mod path;
pub mod peers;
mod qos;
mod reader;
mod remote;
pub mod servers;
pub use remote::resolve_path;
mod sections;
mod security;
mod tunnel_section;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use mpt_core::wire::{
    HEADER_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN, TAG_RESERVE_LEN, UDP_HEADER_LEN,
};
pub use mpt_core::MAX_PATHS;
pub use peers::PeerSection;
pub use reader::ConfigError;
use reader::{suggest, Ctx};
pub use security::{check_private_mode, Keys, Security};
pub use servers::{FailoverSection, ServerSection};
use toml_edit::{Document, Item};

/// Tuning defaults (not spec constants).
pub mod defaults {
    pub const KEEPALIVE_MS: u64 = 100;
    pub const DEAD_MS: u64 = 500;
    pub const WEIGHT: u32 = 1;
    pub const PATH_MTU: u32 = 1500;
    /// The default tunnel MTU in datagrams: an inner packet of the default
    /// MTU travels in this many fragments (tuning knob: more spreads the
    /// inner headers thinner, fewer loses less with a lost datagram).
    pub const MTU_DATAGRAMS: u32 = 8;
    /// What one datagram carries with no path configured (tuning knob).
    pub const DATAGRAM_BODY_BYTES: u32 = 1400;
    pub const REORDER_WINDOW: usize = 4096;
    /// Longest expected wait in the send queue: room for the delay gap of
    /// unequal paths (Wi-Fi + LTE: 35 ms) above what a bulk TCP backs off.
    pub const QUEUE_MS: u64 = 100;
    pub const REORDER_MAX_DELAY_MS: u64 = 100;
    pub const CONTROL_DIR: &str = "/run/mpt";
}

/// Peer role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// What path weights are shares of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Bytes,
    Packets,
}

/// How packets are placed on paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerMode {
    /// Learn each path's capacity and delay; send each packet where it is
    /// expected to arrive first (the default without weights).
    Ecf,
    /// Static weights (`weight` per path), no pacing (the default when a
    /// path sets `weight`).
    Wrr,
}

/// Reorder release policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    Timeout,
    Frontier,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TunnelSection {
    pub name: String,
    pub addresses: Vec<IpNet>,
    /// Effective MTU (configured or derived from the paths).
    pub mtu: u32,
    pub mtu_configured: bool,
    /// Most inner bytes one datagram carries on the smallest path: the
    /// link MTU less the encapsulation. Inner packets up to `mtu` that are
    /// larger travel in fragments.
    pub datagram_body: u32,
    pub control_socket: PathBuf,
    /// Use TUN offloads (TSO in, GRO out) when the kernel has them.
    pub offload: bool,
    /// Lower the MSS of routed TCP connections (an endpoint outside the
    /// tunnel's networks) to what fits one datagram (`mss_clamp`).
    pub mss_clamp: bool,
    /// Threads sealing and opening one tunnel's packets; `None`: one per
    /// CPU core. A concentrator has none (its threads are `shards`).
    pub workers: Option<usize>,
    /// A concentrator's threads, each a shard of its peers; `None`: one
    /// per CPU core. Only a concentrator has shards.
    pub shards: Option<usize>,
    /// Helpers work only while a core is spare (`false`), or always.
    pub parallel_always: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PathSection {
    pub name: String,
    pub local: SocketAddr,
    /// `None` on a server with encryption, which learns it, and until
    /// [`Config::resolve_remotes`] on a path whose remote is a hostname.
    pub remote: Option<SocketAddr>,
    /// The remote as written, when it names a host (`host:port`).
    pub remote_host: Option<String>,
    pub interface: Option<String>,
    pub weight: u32,
    /// Whether `weight` was written (it selects static weights).
    pub weight_set: bool,
    /// Cap on what the path carries, Mbit/s (metered or known links).
    pub rate_mbit: Option<u64>,
    /// Carries data only while no other path is up (failover).
    pub backup: bool,
    pub keepalive_ms: u64,
    pub dead_ms: u64,
    /// MTU of the underlying link (for the default tunnel MTU).
    pub mtu: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReorderSection {
    pub window: usize,
    pub max_delay_ms: u64,
    pub release: Release,
    /// Ask the peer to resend data packets found lost (both peers).
    /// Default: on with path-aware sending (`ecf`), off with `wrr`.
    pub recover: bool,
    /// Forward error correction on lossy paths (`fec = "auto"`, the
    /// default; `"off"`): repairs sized by each path's random loss, none
    /// on a clean path (both peers).
    pub fec: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteSection {
    pub network: IpNet,
    pub metric: Option<u32>,
    /// Line of `network` in the configuration file (for runtime errors).
    pub line: Option<usize>,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub file: PathBuf,
    pub tunnel: TunnelSection,
    pub role: Role,
    pub paths: Vec<PathSection>,
    pub reorder: ReorderSection,
    pub routes: Vec<RouteSection>,
    /// What `weight` divides: bytes (default) or packets.
    pub share: Share,
    pub scheduler: SchedulerMode,
    /// Longest expected wait in mpt's send queue (path-aware scheduling).
    pub queue_ms: u64,
    /// Local push-back: how long of its paths' rate a path socket may
    /// leave in the host's own queues, ms (0: off, the default).
    pub local_queue_ms: u64,
    /// Lower the weight of paths that lose more packets than the best path
    /// (experimental, default off).
    pub adapt_to_loss: bool,
    pub security: Security,
    /// Where to serve Prometheus metrics (`[metrics] listen`); off if `None`.
    pub metrics_listen: Option<SocketAddr>,
    /// Traffic classes (`[qos]`); `None` when QoS is off.
    pub qos: Option<mpt_core::qos::QosConfig>,
    /// A concentrator (`[[peer]]` blocks or `tunnel.peers_dir`): its peers,
    /// those of the blocks first, then those of the directory's files.
    pub peers: Vec<PeerSection>,
    /// `tunnel.peers_dir`, resolved against the file's directory.
    pub peers_dir: Option<PathBuf>,
    /// A concentrator keeps a route to every prefix of each peer that is
    /// here (a session and a path up) in this kernel table, for a routing
    /// daemon to announce (`tunnel.announce_table`).
    pub announce_table: Option<u32>,
    /// A client's further servers, in order of preference (`[[server]]`).
    pub servers: Vec<ServerSection>,
    /// When a client moves between its servers (`[failover]`).
    pub failover: FailoverSection,
}

impl Config {
    /// Whether this is a concentrator (many peers) rather than one peer.
    pub fn is_concentrator(&self) -> bool {
        !self.peers.is_empty() || self.peers_dir.is_some()
    }
}

/// Bytes that encapsulation adds on a path of the given IP family.
pub fn overhead(addr: &SocketAddr) -> u32 {
    let ip = if addr.is_ipv4() {
        IPV4_HEADER_LEN
    } else {
        IPV6_HEADER_LEN
    };
    (ip + UDP_HEADER_LEN + HEADER_LEN + TAG_RESERVE_LEN) as u32
}

const TOP_KEYS: &[&str] = &[
    "tunnel",
    "peer",
    "path",
    "reorder",
    "route",
    "scheduler",
    "security",
    "metrics",
    "qos",
    "server",
    "failover",
];
fn valid_ifname(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 15 {
        return Err("must be 1 to 15 characters (Linux IFNAMSIZ)");
    }
    if s == "."
        || s == ".."
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err("may contain only letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

fn table<'d>(
    ctx: &mut Ctx<'_>,
    root: &'d toml_edit::Table,
    k: &str,
) -> Option<&'d toml_edit::Table> {
    match root.get(k)? {
        Item::Table(t) => Some(t),
        other => {
            let span = root.key(k).and_then(|x| x.span()).or_else(|| other.span());
            let how = if matches!(other, Item::ArrayOfTables(_)) {
                "[[...]]"
            } else {
                "a value"
            };
            ctx.error(span, k, format!("must be a table written [{k}], not {how}"));
            None
        }
    }
}

fn tables<'d>(ctx: &mut Ctx<'_>, root: &'d toml_edit::Table, k: &str) -> Vec<&'d toml_edit::Table> {
    match root.get(k) {
        None => vec![],
        Some(Item::ArrayOfTables(a)) => a.iter().collect(),
        Some(other) => {
            let span = root.key(k).and_then(|x| x.span()).or_else(|| other.span());
            ctx.error(
                span,
                k,
                format!("must be written as [[{k}]] (one block per entry)"),
            );
            vec![]
        }
    }
}

impl Config {
    /// Read and validate a file.
    pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
        let file_error = |message: String, key: &str| {
            vec![ConfigError {
                file: path.display().to_string(),
                line: None,
                key: key.into(),
                message,
            }]
        };
        let (text, meta) =
            files::read_text(path, files::MAX_CONFIG_BYTES).map_err(|m| file_error(m, ""))?;
        let cfg = Self::parse(&text, path)?;
        if let Security::Encrypted(k) = &cfg.security {
            if k.inline_secret {
                files::check_private(path, &meta, "a secret key")
                    .map_err(|m| file_error(m, "security"))?;
            }
        }
        Ok(cfg)
    }

    /// Validate `text` as if it were the file `path`.
    /// The control socket named by a configuration file that may no
    /// longer be valid as a whole (it was edited after the daemon
    /// started): `tunnel.control_socket`, or the default for
    /// `tunnel.name`. An error says why neither can be found.
    pub fn control_socket_of(path: &Path) -> Result<PathBuf, String> {
        let (text, _) = files::read_text(path, files::MAX_CONFIG_BYTES)?;
        let doc = Document::parse(text.as_str())
            .map_err(|e| format!("{} is not valid TOML: {}", path.display(), e.message()))?;
        let tunnel = doc.get("tunnel").and_then(|t| t.as_table_like());
        let get = |k: &str| tunnel.and_then(|t| t.get(k)).and_then(|v| v.as_str());
        if let Some(s) = get("control_socket") {
            return Ok(PathBuf::from(s));
        }
        match get("name") {
            Some(n) if valid_ifname(n).is_ok() => {
                Ok(PathBuf::from(format!("{}/{n}.sock", defaults::CONTROL_DIR)))
            }
            _ => Err(format!(
                "{} names neither tunnel.control_socket nor a valid tunnel.name",
                path.display()
            )),
        }
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, Vec<ConfigError>> {
        let mut ctx = Ctx::new(path.display().to_string(), text);
        let doc = match Document::parse(text) {
            Ok(d) => d,
            Err(e) => {
                let msg = e.message().to_string();
                ctx.error(e.span(), "", format!("TOML syntax error: {msg}"));
                return Err(ctx.errors);
            }
        };
        let root = doc.as_table();
        for (k, _) in root.iter() {
            if !TOP_KEYS.contains(&k) {
                let hint = suggest(k, TOP_KEYS)
                    .map(|s| format!("; did you mean '{s}'?"))
                    .unwrap_or_else(|| format!("; valid sections: {}", TOP_KEYS.join(", ")));
                let span = root.key(k).and_then(|x| x.span());
                ctx.error(span, k, format!("unknown section{hint}"));
            }
        }
        let cfg = build(&mut ctx, root, path);
        match cfg {
            Some(c) if ctx.errors.is_empty() => Ok(c),
            _ => {
                if ctx.errors.is_empty() {
                    ctx.error(None, "", "invalid configuration");
                }
                Err(ctx.errors)
            }
        }
    }
}

/// The whole file: each section by its reader (`tunnel_section`,
/// `sections`, `security`, `qos`, `servers`, `peers`), then the checks
/// that span sections, then the [`Config`] with every default filled in.
fn build(ctx: &mut Ctx<'_>, root: &toml_edit::Table, file: &Path) -> Option<Config> {
    let t = tunnel_section::read_tunnel(ctx, root);
    let peers_dir = t
        .peers_dir
        .as_ref()
        .map(|d| file.parent().unwrap_or(Path::new(".")).join(d));
    let (role, mut peers, concentrator) =
        tunnel_section::read_peer_side(ctx, root, peers_dir.is_some(), file);

    let sec_table = table(ctx, root, "security");
    let security = security::read(ctx, sec_table, file, concentrator);
    if concentrator && security == Some(Security::InsecurePlaintext) {
        ctx.error(
            None,
            "security.insecure_no_encryption",
            "a concentrator needs encryption: its session indices tell the peers apart",
        );
    }
    let learns = role == Some(Role::Server) && matches!(security, Some(Security::Encrypted(_)));
    let paths = tunnel_section::read_paths(ctx, root, learns);
    let (mut reorder, recover_set) = sections::read_reorder(ctx, root);
    let metrics_listen = sections::read_metrics(ctx, root);
    let sched = sections::read_scheduler(ctx, root, &paths);
    let paced = sched.mode == SchedulerMode::Ecf;
    let qos_table = table(ctx, root, "qos");
    let qos = qos::read(ctx, qos_table, paced);
    // Recovery resends link losses only when the sender paces (it tells a
    // congested path by its peer's reports); with static weights it would
    // hide congestion from the inner TCP, so it stays opt-in there.
    reorder.recover = recover_set.unwrap_or(paced);
    let routes = sections::read_routes(ctx, root, &t.addresses);
    let (mtu, datagram_body) = sections::resolve_mtu(ctx, &t, &paths);
    let name = t.name.clone()?;

    // [[server]] and [failover]: a client's further servers.
    let server_tables = tables(ctx, root, "server");
    let servers = servers::read_servers(ctx, &server_tables, &paths, file);
    let failover_table = table(ctx, root, "failover");
    let failover = servers::read_failover(ctx, failover_table);
    if role != Some(Role::Client) && (!server_tables.is_empty() || failover_table.is_some()) {
        ctx.error(
            root.get("server")
                .or(root.get("failover"))
                .and_then(|i| i.span()),
            "server",
            "further servers ([[server]], [failover]) belong to a client's configuration",
        );
    }
    if !server_tables.is_empty() && security == Some(Security::InsecurePlaintext) {
        ctx.error(
            None,
            "server",
            "further servers need encryption (each has its own public_key)",
        );
    }
    if t.announce_table.is_some() && !concentrator {
        ctx.error(
            None,
            "tunnel.announce_table",
            "announces the peers a concentrator holds; this configuration has no [[peer]] or peers_dir",
        );
    }
    // Each key means one thing whatever the file's shape (docs/config.md).
    if !concentrator && t.shards.is_some() {
        ctx.error(
            t.shards_span.clone(),
            "tunnel.shards",
            "only a concentrator ([[peer]] blocks or peers_dir) has shards; one tunnel's threads are `workers`",
        );
    }
    if concentrator {
        if let Some(d) = &t.peers_dir {
            match peers::read_dir(file, d) {
                Ok(more) => peers.extend(more),
                Err(errs) => ctx.errors.extend(errs),
            }
        }
        check_concentrator(ctx, &peers, &paths, paced);
    }
    let control_socket = t
        .control_socket
        .unwrap_or_else(|| PathBuf::from(format!("{}/{}.sock", defaults::CONTROL_DIR, name)));
    Some(Config {
        file: file.to_path_buf(),
        tunnel: TunnelSection {
            name,
            addresses: t.addresses,
            mtu,
            mtu_configured: t.mtu.is_some(),
            datagram_body,
            workers: t.workers,
            shards: t.shards,
            parallel_always: t.parallel_always,
            control_socket,
            offload: t.offload,
            mss_clamp: t.mss_clamp,
        },
        role: role?,
        security: security?,
        share: sched.share,
        scheduler: sched.mode,
        queue_ms: sched.queue_ms,
        local_queue_ms: sched.local_queue_ms,
        adapt_to_loss: sched.adapt_to_loss,
        paths,
        reorder,
        routes,
        metrics_listen,
        qos,
        peers,
        peers_dir,
        announce_table: t.announce_table,
        servers,
        failover,
    })
}

/// A concentrator's peers against each other and its paths; its paths
/// name no remote (each client's addresses are learned).
fn check_concentrator(
    ctx: &mut Ctx<'_>,
    peers: &[PeerSection],
    paths: &[PathSection],
    paced: bool,
) {
    for m in peers::cross_check(peers) {
        ctx.error(None, "peer", m);
    }
    let names: Vec<&str> = paths.iter().map(|p| p.name.as_str()).collect();
    for m in peers::check_limits(peers, &names, paced) {
        ctx.error(None, "peer", m);
    }
    for (i, p) in paths.iter().enumerate() {
        if p.remote.is_some() || p.remote_host.is_some() {
            ctx.error(
                None,
                &format!("path[{}].remote", i + 1),
                "a concentrator's paths are its sockets; each client's addresses are learned, so leave remote out",
            );
        }
    }
}

pub use remote::{parse_remote, pick as pick_remote, RemoteSpec};

#[cfg(test)]
mod peers_tests;
#[cfg(test)]
mod servers_tests;
#[cfg(test)]
mod tests;
