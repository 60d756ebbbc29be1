//! One `[[path]]` table of the configuration: its keys, read and checked
//! one by one (what concerns several paths, such as unique names, is
//! checked by the caller).
//!
//! Invariants of a returned [`PathSection`]: `local` is a specific address
//! with a port; `remote` is absent only when the path names a host
//! (resolved later, [`crate::Config::resolve_remotes`]) or the server
//! learns it; a literal remote is of `local`'s IP family, not unspecified,
//! not port 0; `dead_ms > keepalive_ms`.

use std::net::SocketAddr;

use crate::reader::{Ctx, TableReader};
use crate::{defaults, remote, valid_ifname, PathSection};

pub(crate) const PATH_KEYS: &[&str] = &[
    "name",
    "local",
    "remote",
    "interface",
    "weight",
    "rate_mbit",
    "backup",
    "keepalive_ms",
    "dead_ms",
    "mtu",
];

pub(crate) fn read_path(
    ctx: &mut Ctx<'_>,
    pr: &TableReader<'_>,
    i: usize,
    learns: bool,
) -> Option<PathSection> {
    let name = pr
        .string(ctx, "name")
        .unwrap_or_else(|| format!("path{}", i + 1));
    if name.is_empty() {
        ctx.error(pr.span("name"), &pr.key("name"), "must not be empty");
    }
    if name.len() > mpt_core::wire::PATH_NAME_MAX {
        ctx.error(
            pr.span("name"),
            &pr.key("name"),
            format!(
                "is {} bytes long; at most {} (peers pair their paths by name, and probes carry it)",
                name.len(),
                mpt_core::wire::PATH_NAME_MAX
            ),
        );
    }
    let sock = |s: &str| s.parse::<SocketAddr>().map_err(|e| e.to_string());
    const SOCK: &str = "an address:port (like 192.0.2.1:5000 or [2001:db8::1]:5000)";
    let local = pr.parsed(ctx, "local", SOCK, sock);
    let local = pr.required(ctx, "local", local);
    if let Some(l) = local {
        if l.port() == 0 {
            ctx.error(
                pr.span("local"),
                &pr.key("local"),
                "port 0 is not allowed: give the port the peer sends this path to",
            );
        }
        if l.ip().is_unspecified() {
            ctx.error(
                pr.span("local"),
                &pr.key("local"),
                format!("{} is a wildcard address; give this host's own address on the path's link (a path is one (local, remote) pair, and replies must leave from the address the peer sent to)", l.ip()),
            );
        }
    }
    let spec = pr.parsed(ctx, "remote", remote::REMOTE_EXPECTED, remote::parse_remote);
    let (remote, remote_host) = match spec {
        Some(remote::RemoteSpec::Addr(a)) => (Some(a), None),
        Some(remote::RemoteSpec::Host(h)) => (None, Some(h)),
        None => (None, None),
    };
    if spec_missing(&remote, &remote_host) && !learns && pr.span("remote").is_none() {
        ctx.error(
            pr.table_span(),
            &pr.key("remote"),
            "missing (only an encrypted server may leave it out and learn the client's address)",
        );
    }
    if let Some(r) = remote {
        if r.port() == 0 {
            ctx.error(
                pr.span("remote"),
                &pr.key("remote"),
                "port 0 cannot be a destination",
            );
        }
        if r.ip().is_unspecified() {
            ctx.error(
                pr.span("remote"),
                &pr.key("remote"),
                "an unspecified address (0.0.0.0 or ::) cannot be a destination",
            );
        }
    }
    if let (Some(l), Some(r)) = (local, remote) {
        if l.is_ipv4() != r.is_ipv4() {
            ctx.error(
                pr.span("remote"),
                &pr.key("remote"),
                format!("{r} is not of the same IP version as local {l}"),
            );
        }
    }
    let interface = pr.string(ctx, "interface");
    if let Some(ifn) = &interface {
        if let Err(e) = valid_ifname(ifn) {
            ctx.error(
                pr.span("interface"),
                &pr.key("interface"),
                format!("'{ifn}' {e}"),
            );
        }
    }
    let weight_set = pr.span("weight").is_some();
    let weight = pr
        .int(ctx, "weight", (1, 1000))
        .map_or(defaults::WEIGHT, |v| v as u32);
    let rate_mbit = pr.int(ctx, "rate_mbit", (1, 1_000_000)).map(|v| v as u64);
    let backup = pr.boolean(ctx, "backup").unwrap_or(false);
    let keepalive_ms = pr
        .int(ctx, "keepalive_ms", (10, 60_000))
        .map_or(defaults::KEEPALIVE_MS, |v| v as u64);
    let dead_ms = pr
        .int(ctx, "dead_ms", (20, 600_000))
        .map_or(defaults::DEAD_MS, |v| v as u64);
    if dead_ms <= keepalive_ms {
        ctx.error(
            pr.span("dead_ms").or(pr.span("keepalive_ms")),
            &pr.key("dead_ms"),
            format!("{dead_ms} must be larger than keepalive_ms ({keepalive_ms}); three keepalives or more is usual"),
        );
    }
    let mtu = pr
        .int(ctx, "mtu", (576, 65535))
        .map_or(defaults::PATH_MTU, |v| v as u32);
    Some(PathSection {
        name,
        local: local?,
        remote,
        remote_host,
        interface,
        weight,
        weight_set,
        rate_mbit,
        backup,
        keepalive_ms,
        dead_ms,
        mtu,
    })
}

pub(crate) fn spec_missing(remote: &Option<SocketAddr>, host: &Option<String>) -> bool {
    remote.is_none() && host.is_none()
}
