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
mod security;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use mpt_core::wire::{
    FRAGMENT_HEADER_LEN, HEADER_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN, IPV6_MIN_MTU, MAX_FRAGMENTS,
    TAG_RESERVE_LEN, UDP_HEADER_LEN,
};
pub use mpt_core::MAX_PATHS;
use path::{read_path, PATH_KEYS};
pub use peers::PeerSection;
pub use reader::ConfigError;
use reader::{suggest, Ctx, TableReader};
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
    /// Threads sealing and opening packets; `None`: one per CPU core.
    pub workers: Option<usize>,
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
const METRICS_KEYS: &[&str] = &["listen"];
const SCHEDULER_KEYS: &[&str] = &["mode", "share", "adapt_to_loss", "queue_ms"];
const TUNNEL_KEYS: &[&str] = &[
    "name",
    "addresses",
    "mtu",
    "control_socket",
    "offload",
    "mss_clamp",
    "workers",
    "parallel",
    "peers_dir",
    "announce_table",
];
/// Upper bound for `tunnel.workers` (a typo guard, not a hardware limit).
const MAX_WORKERS: i64 = 256;
const PEER_KEYS: &[&str] = &["role"];
const REORDER_KEYS: &[&str] = &["window", "max_delay_ms", "release", "recover"];
const ROUTE_KEYS: &[&str] = &["network", "metric"];

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

fn build(ctx: &mut Ctx<'_>, root: &toml_edit::Table, file: &Path) -> Option<Config> {
    let empty = toml_edit::Table::new();
    // [tunnel]
    let t = table(ctx, root, "tunnel");
    if t.is_none() && !root.contains_key("tunnel") {
        ctx.error(None, "tunnel", "missing section [tunnel]");
    }
    let tr = TableReader::new(t.unwrap_or(&empty), "tunnel", TUNNEL_KEYS);
    let name = tr.string(ctx, "name");
    let name = tr.required(ctx, "name", name);
    if let Some(n) = &name {
        if let Err(e) = valid_ifname(n) {
            ctx.error(tr.span("name"), "tunnel.name", format!("'{n}' {e}"));
        }
    }
    let addrs = tr.strings(ctx, "addresses");
    let addrs = tr.required(ctx, "addresses", addrs).unwrap_or_default();
    let mut addresses = vec![];
    for (i, a) in addrs.iter().enumerate() {
        match a.parse::<IpNet>() {
            Ok(n) => addresses.push(n),
            Err(_) => ctx.error(
                tr.span("addresses"),
                &format!("tunnel.addresses[{}]", i + 1),
                format!(
                    "'{a}' is not an address with prefix length, like 10.0.0.1/24 or fd00::1/64"
                ),
            ),
        }
    }
    let empty_array = t
        .and_then(|t| t.get("addresses"))
        .and_then(|v| v.as_array())
        .is_some_and(|a| a.is_empty());
    if empty_array {
        ctx.error(
            tr.span("addresses"),
            "tunnel.addresses",
            "needs at least one address",
        );
    }
    let mtu = tr.int(ctx, "mtu", (576, 65535)).map(|v| v as u32);
    let control_socket = tr.string(ctx, "control_socket").map(PathBuf::from);
    let offload = tr.boolean(ctx, "offload").unwrap_or(true);
    let mss_clamp = tr.boolean(ctx, "mss_clamp").unwrap_or(true);
    let workers = tr.int(ctx, "workers", (1, MAX_WORKERS)).map(|v| v as usize);
    let tr_peers_dir = tr.string(ctx, "peers_dir");
    let announce_table = tr
        .int(ctx, "announce_table", (1, 0x7fff_ffff))
        .map(|v| v as u32);
    if let Some(t @ (253..=255)) = announce_table {
        ctx.error(
            tr.span("announce_table"),
            "tunnel.announce_table",
            format!("{t} is one of the kernel's own tables (default 253, main 254, local 255); use another, such as 201"),
        );
    }
    let parallel_always = match tr.string(ctx, "parallel").as_deref() {
        None | Some("auto") => false,
        Some("always") => true,
        Some(other) => {
            ctx.error(
                tr.span("parallel"),
                "tunnel.parallel",
                format!("'{other}' is not a choice: \"auto\" (helpers work while a core is spare) or \"always\""),
            );
            false
        }
    };
    tr.finish(ctx);

    // [peer], or a concentrator's [[peer]] blocks and peers_dir
    let tr_peers_dir_text = tr_peers_dir.clone();
    let peers_dir = tr_peers_dir.map(|d| file.parent().unwrap_or(Path::new(".")).join(d));
    let blocks = matches!(root.get("peer"), Some(Item::ArrayOfTables(_)));
    let concentrator = blocks || peers_dir.is_some();
    let mut peers = vec![];
    let role = if concentrator {
        if let Some(Item::Table(_)) = root.get("peer") {
            ctx.error(
                root.get("peer").and_then(|i| i.span()),
                "peer",
                "a concentrator (tunnel.peers_dir) lists its clients as [[peer]] blocks; remove the [peer] table (the role is server)",
            );
        }
        for (i, t) in tables(ctx, root, "peer").iter().enumerate() {
            let key = format!("peer[{}]", i + 1);
            if let Some(p) = peers::read_peer(ctx, t, key.clone(), &key, file) {
                peers.push(p);
            }
        }
        Some(Role::Server)
    } else {
        let p = table(ctx, root, "peer");
        if p.is_none() && !root.contains_key("peer") {
            ctx.error(
                None,
                "peer",
                "missing section [peer] (with role = \"server\" or \"client\"), or [[peer]] blocks for a concentrator",
            );
        }
        let pr = TableReader::new(p.unwrap_or(&empty), "peer", PEER_KEYS);
        let role = pr.choice(ctx, "role", &["server", "client"]);
        let role = pr.required(ctx, "role", role).map(|r| {
            if r == "server" {
                Role::Server
            } else {
                Role::Client
            }
        });
        pr.finish(ctx);
        role
    };

    // [security]
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

    // [[path]]
    let path_tables = tables(ctx, root, "path");
    if path_tables.is_empty() && !root.contains_key("path") {
        ctx.error(None, "path", "no [[path]] configured (1 to 32 are needed)");
    }
    if path_tables.len() > MAX_PATHS {
        ctx.error(
            root.get("path").and_then(|i| i.span()),
            "path",
            format!(
                "{} paths configured; at most {MAX_PATHS} are supported",
                path_tables.len()
            ),
        );
    }
    let mut paths: Vec<PathSection> = vec![];
    for (i, pt) in path_tables.iter().enumerate() {
        let pr = TableReader::new(pt, format!("path[{}]", i + 1), PATH_KEYS);
        if let Some(p) = read_path(ctx, &pr, i, learns) {
            if let Some(o) = paths.iter().find(|o| o.name == p.name) {
                ctx.error(
                    pr.span("name"),
                    &pr.key("name"),
                    format!("'{}' is already the name of another path", o.name),
                );
            } else if paths.iter().any(|o| {
                o.local == p.local && o.remote == p.remote && o.remote_host == p.remote_host
            }) {
                ctx.error(
                    pr.span("remote"),
                    &pr.key("remote"),
                    "another path has the same local and remote addresses",
                );
            }
            paths.push(p);
        }
        pr.finish(ctx);
    }
    if !paths.is_empty() && paths.iter().all(|p| p.backup) {
        ctx.error(
            None,
            "path.backup",
            "every path is a backup path; at least one must carry data (remove `backup = true` from one)",
        );
    }

    // [reorder]
    let r = table(ctx, root, "reorder");
    let rr = TableReader::new(r.unwrap_or(&empty), "reorder", REORDER_KEYS);
    let window = rr
        .int(ctx, "window", (1, 65536))
        .map_or(defaults::REORDER_WINDOW, |v| v as usize);
    let max_delay_ms = rr
        .int(ctx, "max_delay_ms", (0, 10_000))
        .map_or(defaults::REORDER_MAX_DELAY_MS, |v| v as u64);
    let release = match rr.choice(ctx, "release", &["frontier", "timeout"]) {
        Some("timeout") => Release::Timeout,
        _ => Release::Frontier,
    };
    let recover_set = rr.boolean(ctx, "recover");
    rr.finish(ctx);

    // [metrics]
    let m = table(ctx, root, "metrics");
    let mr = TableReader::new(m.unwrap_or(&empty), "metrics", METRICS_KEYS);
    let metrics_listen = mr.parsed(
        ctx,
        "listen",
        "an address:port to listen on (e.g. \"127.0.0.1:9586\")",
        |s: &str| s.parse::<SocketAddr>(),
    );
    mr.finish(ctx);

    // [scheduler]
    let sc = table(ctx, root, "scheduler");
    let sr = TableReader::new(sc.unwrap_or(&empty), "scheduler", SCHEDULER_KEYS);
    let share = match sr.choice(ctx, "share", &["bytes", "packets"]) {
        Some("packets") => Share::Packets,
        _ => Share::Bytes,
    };
    let adapt_to_loss = sr.boolean(ctx, "adapt_to_loss").unwrap_or(false);
    let weighted: Vec<&str> = paths
        .iter()
        .filter(|p| p.weight_set)
        .map(|p| p.name.as_str())
        .collect();
    let capped: Vec<&str> = paths
        .iter()
        .filter(|p| p.rate_mbit.is_some())
        .map(|p| p.name.as_str())
        .collect();
    let scheduler = match sr.choice(ctx, "mode", &["ecf", "wrr"]) {
        Some("ecf") => SchedulerMode::Ecf,
        Some(_) => SchedulerMode::Wrr,
        None if weighted.is_empty() => SchedulerMode::Ecf,
        None => SchedulerMode::Wrr,
    };
    let queue_ms = sr
        .int(ctx, "queue_ms", (1, 10_000))
        .map_or(defaults::QUEUE_MS, |v| v as u64);
    match scheduler {
        SchedulerMode::Ecf => {
            if !weighted.is_empty() {
                ctx.error(
                    sr.span("mode"),
                    "scheduler.mode",
                    format!(
                        "\"ecf\" learns each path's capacity, but path(s) {} set a static `weight`; remove the weights or use mode = \"wrr\"",
                        weighted.join(", ")
                    ),
                );
            }
            for k in ["share", "adapt_to_loss"] {
                if sr.span(k).is_some() {
                    ctx.error(
                        sr.span(k),
                        &sr.key(k),
                        "applies to static weights only (mode = \"wrr\", or a `weight` on the paths)",
                    );
                }
            }
        }
        SchedulerMode::Wrr => {
            if !capped.is_empty() {
                ctx.error(
                    None,
                    "path.rate_mbit",
                    format!(
                        "path(s) {} set `rate_mbit`, which caps path-aware sending; static weights (mode = \"wrr\" or a `weight`) do not pace",
                        capped.join(", ")
                    ),
                );
            }
            if sr.span("queue_ms").is_some() {
                ctx.error(
                    sr.span("queue_ms"),
                    "scheduler.queue_ms",
                    "the send queue belongs to path-aware sending (mode = \"ecf\"); static weights send at once",
                );
            }
        }
    }
    sr.finish(ctx);

    // [qos]
    let q = table(ctx, root, "qos");
    let qos = qos::read(ctx, q, scheduler == SchedulerMode::Ecf);

    // Recovery resends link losses only when the sender paces (it tells a
    // congested path by its peer's reports); with static weights it would
    // hide congestion from the inner TCP, so it stays opt-in there.
    let recover = recover_set.unwrap_or(scheduler == SchedulerMode::Ecf);

    // [[route]]
    let mut routes = vec![];
    for (i, rt) in tables(ctx, root, "route").iter().enumerate() {
        let rr = TableReader::new(rt, format!("route[{}]", i + 1), ROUTE_KEYS);
        let net = rr.parsed(
            ctx,
            "network",
            "a network in CIDR notation (like 10.9.0.0/16)",
            |s| s.parse::<IpNet>(),
        );
        let net = rr.required(ctx, "network", net);
        let metric = rr
            .int(ctx, "metric", (0, u32::MAX as i64))
            .map(|v| v as u32);
        if let Some(n) = net {
            let family = |a: &IpNet| matches!(a, IpNet::V4(_)) == matches!(n, IpNet::V4(_));
            if !addresses.is_empty() && !addresses.iter().any(family) {
                let v = if matches!(n, IpNet::V4(_)) { 4 } else { 6 };
                ctx.error(
                    rr.span("network"),
                    &rr.key("network"),
                    format!("'{n}' is an IPv{v} network but the tunnel has no IPv{v} address (tunnel.addresses); add one, or remove the route"),
                );
            }
            if n.trunc() != n {
                ctx.error(
                    rr.span("network"),
                    &rr.key("network"),
                    format!("'{n}' has host bits set; did you mean '{}'?", n.trunc()),
                );
            }
            let line = ctx.line_of(rr.span("network"));
            routes.push(RouteSection {
                network: n,
                metric,
                line,
            });
        }
        rr.finish(ctx);
    }

    // Cross-checks: MTU.
    let derived = paths
        .iter()
        .map(|p| p.mtu.saturating_sub(overhead(&p.local)))
        .min();
    let has_v6 = addresses.iter().any(|a| matches!(a, IpNet::V6(_)));
    let datagram_body = derived.unwrap_or(defaults::DATAGRAM_BODY_BYTES);
    // Room for inner bytes in one piece of a fragment.
    let piece = datagram_body.saturating_sub(FRAGMENT_HEADER_LEN as u32);
    let default_mtu = (piece * defaults::MTU_DATAGRAMS).clamp(datagram_body, 65_535);
    let eff_mtu = mtu.unwrap_or(default_mtu);
    if let Some(m) = mtu {
        let most = (piece * MAX_FRAGMENTS as u32).clamp(datagram_body, 65_535);
        if m > most {
            let worst = paths
                .iter()
                .min_by_key(|p| p.mtu.saturating_sub(overhead(&p.local)));
            let which = worst.map_or(String::new(), |w| {
                format!(
                    " (path '{}': link MTU {} minus {} bytes of encapsulation leaves {})",
                    w.name,
                    w.mtu,
                    overhead(&w.local),
                    datagram_body
                )
            });
            ctx.error(
                tr.span("mtu"),
                "tunnel.mtu",
                format!(
                    "{m} is more than {MAX_FRAGMENTS} fragments of {piece} bytes: at most {most}{which}"
                ),
            );
        }
    }
    if has_v6 && (eff_mtu as usize) < IPV6_MIN_MTU {
        ctx.error(tr.span("mtu"), "tunnel.mtu", format!("{eff_mtu} is below 1280, the minimum MTU for IPv6 (RFC 8200); raise the paths' mtu or remove the IPv6 addresses"));
    }
    let name = name?;
    let control_socket = control_socket
        .unwrap_or_else(|| PathBuf::from(format!("{}/{}.sock", defaults::CONTROL_DIR, name)));
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
    if announce_table.is_some() && !concentrator {
        ctx.error(
            None,
            "tunnel.announce_table",
            "announces the peers a concentrator holds; this configuration has no [[peer]] or peers_dir",
        );
    }
    if concentrator {
        if let Some(d) = &tr_peers_dir_text {
            match peers::read_dir(file, d) {
                Ok(more) => peers.extend(more),
                Err(errs) => ctx.errors.extend(errs),
            }
        }
        for m in peers::cross_check(&peers) {
            ctx.error(None, "peer", m);
        }
        let names: Vec<&str> = paths.iter().map(|p| p.name.as_str()).collect();
        for m in peers::check_limits(&peers, &names, scheduler == SchedulerMode::Ecf) {
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
    Some(Config {
        file: file.to_path_buf(),
        tunnel: TunnelSection {
            name,
            addresses,
            mtu: eff_mtu,
            mtu_configured: mtu.is_some(),
            datagram_body,
            workers,
            parallel_always,
            control_socket,
            offload,
            mss_clamp,
        },
        role: role?,
        security: security?,
        share,
        scheduler,
        queue_ms,
        adapt_to_loss,
        paths,
        reorder: ReorderSection {
            window,
            max_delay_ms,
            release,
            recover,
        },
        routes,
        metrics_listen,
        qos,
        peers,
        peers_dir,
        announce_table,
        servers,
        failover,
    })
}

pub use remote::{parse_remote, pick as pick_remote, RemoteSpec};

#[cfg(test)]
mod peers_tests;
#[cfg(test)]
mod servers_tests;
#[cfg(test)]
mod tests;
