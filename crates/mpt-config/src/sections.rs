//! Readers of `[reorder]`, `[metrics]`, `[scheduler]` and `[[route]]`, and
//! the tunnel MTU's resolution against the paths: each returns its typed
//! part of [`crate::Config`].
//!
//! Invariants: a reader reads only its own table(s) and reports every
//! error with its key; every default is filled in here (`defaults`), so
//! `build` only assembles; a value that is wrong is reported, never
//! replaced silently by another meaning.

use std::net::SocketAddr;

use ipnet::IpNet;
use mpt_core::wire::{FRAGMENT_HEADER_LEN, IPV6_MIN_MTU, MAX_FRAGMENTS};

use crate::reader::{Ctx, TableReader};
use crate::tunnel_section::TunnelRead;
use crate::{
    defaults, overhead, table, tables, PathSection, Release, ReorderSection, RouteSection,
    SchedulerMode, Share,
};

const METRICS_KEYS: &[&str] = &["listen"];
const SCHEDULER_KEYS: &[&str] = &[
    "mode",
    "share",
    "adapt_to_loss",
    "queue_ms",
    "local_queue_ms",
];
const REORDER_KEYS: &[&str] = &["window", "max_delay_ms", "release", "recover", "fec"];
const ROUTE_KEYS: &[&str] = &["network", "metric"];

/// `[reorder]`; `recover` is left `None` when not written (its default
/// depends on the scheduler, see `build`).
pub(crate) fn read_reorder(
    ctx: &mut Ctx<'_>,
    root: &toml_edit::Table,
) -> (ReorderSection, Option<bool>) {
    let empty = toml_edit::Table::new();
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
    let fec = !matches!(rr.choice(ctx, "fec", &["auto", "off"]), Some("off"));
    rr.finish(ctx);
    let section = ReorderSection {
        window,
        max_delay_ms,
        release,
        recover: recover_set.unwrap_or(false),
        fec,
    };
    (section, recover_set)
}

/// `[metrics] listen`.
pub(crate) fn read_metrics(ctx: &mut Ctx<'_>, root: &toml_edit::Table) -> Option<SocketAddr> {
    let empty = toml_edit::Table::new();
    let m = table(ctx, root, "metrics");
    let mr = TableReader::new(m.unwrap_or(&empty), "metrics", METRICS_KEYS);
    let listen = mr.parsed(
        ctx,
        "listen",
        "an address:port to listen on (e.g. \"127.0.0.1:9586\")",
        |s: &str| s.parse::<SocketAddr>(),
    );
    mr.finish(ctx);
    listen
}

/// What `[scheduler]` says, checked against the paths' keys.
pub(crate) struct SchedulerRead {
    pub mode: SchedulerMode,
    pub share: Share,
    pub adapt_to_loss: bool,
    pub queue_ms: u64,
    pub local_queue_ms: u64,
}

/// `[scheduler]`: path-aware sending (`ecf`, the default) or static
/// weights (`wrr`, the default when a path sets a `weight`); the keys of
/// one mode are errors in the other.
pub(crate) fn read_scheduler(
    ctx: &mut Ctx<'_>,
    root: &toml_edit::Table,
    paths: &[PathSection],
) -> SchedulerRead {
    let empty = toml_edit::Table::new();
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
    let mode = match sr.choice(ctx, "mode", &["ecf", "wrr"]) {
        Some("ecf") => SchedulerMode::Ecf,
        Some(_) => SchedulerMode::Wrr,
        None if weighted.is_empty() => SchedulerMode::Ecf,
        None => SchedulerMode::Wrr,
    };
    let queue_ms = sr
        .int(ctx, "queue_ms", (1, 10_000))
        .map_or(defaults::QUEUE_MS, |v| v as u64);
    let local_queue_ms = sr
        .int(ctx, "local_queue_ms", (0, 100))
        .map_or(0, |v| v as u64);
    match mode {
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
            if sr.span("local_queue_ms").is_some() {
                ctx.error(
                    sr.span("local_queue_ms"),
                    "scheduler.local_queue_ms",
                    "local push-back sizes each path's socket from the rate path-aware sending (mode = \"ecf\") measures; static weights measure none",
                );
            }
        }
    }
    sr.finish(ctx);
    SchedulerRead {
        mode,
        share,
        adapt_to_loss,
        queue_ms,
        local_queue_ms,
    }
}

/// `[[route]]`s: networks in CIDR notation without host bits, of a family
/// the tunnel has an address of.
pub(crate) fn read_routes(
    ctx: &mut Ctx<'_>,
    root: &toml_edit::Table,
    addresses: &[IpNet],
) -> Vec<RouteSection> {
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
    routes
}

/// The tunnel MTU against the paths: the one-datagram body (the smallest
/// path MTU less encapsulation), the default of
/// [`defaults::MTU_DATAGRAMS`] fragments' worth, a configured MTU checked
/// against [`MAX_FRAGMENTS`] pieces and IPv6's minimum. Returns (MTU,
/// datagram body).
pub(crate) fn resolve_mtu(ctx: &mut Ctx<'_>, t: &TunnelRead, paths: &[PathSection]) -> (u32, u32) {
    let derived = paths
        .iter()
        .map(|p| p.mtu.saturating_sub(overhead(&p.local)))
        .min();
    let has_v6 = t.addresses.iter().any(|a| matches!(a, IpNet::V6(_)));
    let datagram_body = derived.unwrap_or(defaults::DATAGRAM_BODY_BYTES);
    // Room for inner bytes in one piece of a fragment.
    let piece = datagram_body.saturating_sub(FRAGMENT_HEADER_LEN as u32);
    let default_mtu = (piece * defaults::MTU_DATAGRAMS).clamp(datagram_body, 65_535);
    let eff_mtu = t.mtu.unwrap_or(default_mtu);
    if let Some(m) = t.mtu {
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
                t.mtu_span.clone(),
                "tunnel.mtu",
                format!(
                    "{m} is more than {MAX_FRAGMENTS} fragments of {piece} bytes: at most {most}{which}"
                ),
            );
        }
    }
    if has_v6 && (eff_mtu as usize) < IPV6_MIN_MTU {
        ctx.error(t.mtu_span.clone(), "tunnel.mtu", format!("{eff_mtu} is below 1280, the minimum MTU for IPv6 (RFC 8200); raise the paths' mtu or remove the IPv6 addresses"));
    }
    (eff_mtu, datagram_body)
}
