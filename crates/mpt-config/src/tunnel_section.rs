//! Readers of the `[tunnel]` section, of the peer side (`[peer]`, or a
//! concentrator's `[[peer]]` blocks) and of the `[[path]]` list: each
//! reads its own table(s), reports every error with its key, and returns
//! what [`crate::Config`] and the cross-checks of `build` need.
//!
//! Invariants: a reader never reads another section's table; a value that
//! is wrong is reported and left out (`None`), never replaced silently;
//! errors come in the order of the keys within a section, as before the
//! readers were split out of one function.

use std::ops::Range;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use toml_edit::Item;

use crate::path::{read_path, PATH_KEYS};
use crate::reader::{Ctx, TableReader};
use crate::{peers, table, tables, valid_ifname, PathSection, PeerSection, Role, MAX_PATHS};

const TUNNEL_KEYS: &[&str] = &[
    "name",
    "addresses",
    "mtu",
    "control_socket",
    "offload",
    "mss_clamp",
    "workers",
    "shards",
    "parallel",
    "peers_dir",
    "announce_table",
];
/// Upper bound for `tunnel.workers` and `tunnel.shards` (a typo guard,
/// not a hardware limit).
const MAX_WORKERS: i64 = 256;
const PEER_KEYS: &[&str] = &["role"];

/// What `[tunnel]` says, before the cross-checks (the MTU is resolved
/// against the paths by `build`).
pub(crate) struct TunnelRead {
    pub name: Option<String>,
    pub addresses: Vec<IpNet>,
    /// `mtu` as written, and where (for the MTU's cross-check).
    pub mtu: Option<u32>,
    pub mtu_span: Option<Range<usize>>,
    pub control_socket: Option<PathBuf>,
    pub offload: bool,
    pub mss_clamp: bool,
    pub workers: Option<usize>,
    /// A concentrator's threads, each a shard of its peers, as written.
    pub shards: Option<usize>,
    pub shards_span: Option<Range<usize>>,
    /// `peers_dir` as written (relative to the file).
    pub peers_dir: Option<String>,
    pub announce_table: Option<u32>,
    pub parallel_always: bool,
}

pub(crate) fn read_tunnel(ctx: &mut Ctx<'_>, root: &toml_edit::Table) -> TunnelRead {
    let empty = toml_edit::Table::new();
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
    let shards = tr.int(ctx, "shards", (1, MAX_WORKERS)).map(|v| v as usize);
    let shards_span = tr.span("shards");
    let peers_dir = tr.string(ctx, "peers_dir");
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
    TunnelRead {
        name,
        addresses,
        mtu,
        mtu_span: tr.span("mtu"),
        control_socket,
        offload,
        mss_clamp,
        workers,
        shards,
        shards_span,
        peers_dir,
        announce_table,
        parallel_always,
    }
}

/// The peer side: a concentrator (`[[peer]]` blocks or `tunnel.peers_dir`)
/// is a server holding those peers; otherwise `[peer] role` says which
/// end this is. Returns the role, the blocks' peers, and whether this is
/// a concentrator.
pub(crate) fn read_peer_side(
    ctx: &mut Ctx<'_>,
    root: &toml_edit::Table,
    peers_dir: bool,
    file: &Path,
) -> (Option<Role>, Vec<PeerSection>, bool) {
    let blocks = matches!(root.get("peer"), Some(Item::ArrayOfTables(_)));
    let concentrator = blocks || peers_dir;
    let mut peers = vec![];
    if concentrator {
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
        return (Some(Role::Server), peers, true);
    }
    let empty = toml_edit::Table::new();
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
    (role, peers, false)
}

/// The `[[path]]` list: 1 to [`MAX_PATHS`] paths with unique names and
/// distinct address pairs, not all of them backups. `learns`: the remote
/// addresses may be left out (a server that learns its client's).
pub(crate) fn read_paths(
    ctx: &mut Ctx<'_>,
    root: &toml_edit::Table,
    learns: bool,
) -> Vec<PathSection> {
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
    paths
}
