//! The `[qos]` section and its `[[qos.class]]` blocks (schema in
//! `docs/config.md`).
//!
//! ```toml
//! [qos]
//! enabled = true              # default; false: one FIFO per path
//!
//! [[qos.class]]
//! name = "voip"
//! dscp = ["EF", 44]           # names (EF, VA, CSn, AFxy) or 0-63
//! protocol = "udp"            # "tcp", "udp", "icmp", "icmpv6" or 0-255
//! ports = ["5060", "10000-20000"]   # source or destination
//! source = ["10.0.0.0/8"]
//! destination = ["192.0.2.0/24"]
//! priority = 0                # 0 is served first
//! realtime = true             # lowest-delay path, no reordering wait
//! redundant = true            # real-time on the two best paths
//! max_mbit = 2                # input policer
//! min_mbit = 0.5              # served ahead of precedence while under
//! queue_ms = 50               # longest wait (ordered classes)
//! aqm = "codel"               # or "none" (ordered classes)
//! outer_dscp = "inner"        # or a DSCP; default "inner" if realtime, else 0
//! ```
//!
//! Invariants of the result: class names are unique; at most one class
//! matches everything (the default; `besteffort` is added at the lowest
//! precedence if none does); `redundant` only with `realtime`; rates are
//! positive and a class's guarantee is not above its ceiling.

use std::net::IpAddr;

use ipnet::IpNet;
use mpt_core::qos::classify::{ClassMatch, Prefix};
use mpt_core::qos::{ClassConfig, OuterDscp, QosConfig, MAX_CLASSES};
use mpt_core::NANOS_PER_MS;
use toml_edit::{Table, Value};

use crate::reader::{Ctx, TableReader};
use crate::tables;

pub const QOS_KEYS: &[&str] = &["enabled", "class"];
pub const CLASS_KEYS: &[&str] = &[
    "name",
    "dscp",
    "protocol",
    "ports",
    "source",
    "destination",
    "priority",
    "realtime",
    "redundant",
    "max_mbit",
    "min_mbit",
    "queue_ms",
    "aqm",
    "outer_dscp",
];

/// Largest rate accepted, Mbit/s (a typo guard).
const MAX_MBIT: f64 = 1_000_000.0;

/// A DSCP name (RFC 2474 class selectors, RFC 2597 AF, RFC 3246 EF,
/// RFC 5865 VOICE-ADMIT) or number.
fn dscp_of(s: &str) -> Option<u8> {
    let u = s.to_ascii_uppercase();
    match u.as_str() {
        "EF" => return Some(46),
        "VA" | "VOICE-ADMIT" => return Some(44),
        "BE" | "DF" => return Some(0),
        _ => {}
    }
    if let Some(n) = u.strip_prefix("CS") {
        return n.parse::<u8>().ok().filter(|n| *n <= 7).map(|n| n * 8);
    }
    if let Some(xy) = u.strip_prefix("AF") {
        let b = xy.as_bytes();
        if b.len() == 2 && (b'1'..=b'4').contains(&b[0]) && (b'1'..=b'3').contains(&b[1]) {
            return Some((b[0] - b'0') * 8 + (b[1] - b'0') * 2);
        }
        return None;
    }
    u.parse::<u8>().ok().filter(|n| *n <= 63)
}

/// `outer_dscp`: "inner", a DSCP name or a number 0-63.
fn outer(ctx: &mut Ctx<'_>, r: &TableReader<'_>, t: &Table) -> Option<OuterDscp> {
    let item = t.get("outer_dscp")?;
    let s = item
        .as_str()
        .map(str::to_string)
        .or_else(|| item.as_integer().map(|i| i.to_string()))
        .unwrap_or_else(|| item.to_string().trim().to_string());
    if s.eq_ignore_ascii_case("inner") {
        return Some(OuterDscp::Inner);
    }
    match dscp_of(&s) {
        Some(0) => Some(OuterDscp::Zero),
        Some(d) => Some(OuterDscp::Fixed(d)),
        None => {
            ctx.error(
                r.span("outer_dscp"),
                &r.key("outer_dscp"),
                format!(
                    "'{s}' is not an outer DSCP: \"inner\" (copy the packet's), a name (EF, VA, CS0-CS7, AF11-AF43) or 0 to 63"
                ),
            );
            None
        }
    }
}

fn protocol_of(s: &str) -> Option<u8> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Some(6),
        "udp" => Some(17),
        "icmp" => Some(1),
        "icmpv6" => Some(58),
        other => other.parse().ok(),
    }
}

fn port_range_of(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let (lo, hi) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
    (lo <= hi).then_some((lo, hi))
}

/// The values of an array key whose entries may be strings or integers,
/// as strings; errors name the entry.
fn list(ctx: &mut Ctx<'_>, r: &TableReader<'_>, t: &Table, k: &str) -> Vec<String> {
    let Some(item) = t.get(k) else {
        return vec![];
    };
    let Some(arr) = item.as_array() else {
        ctx.error(
            r.span(k),
            &r.key(k),
            "expected an array, like [\"a\", \"b\"]",
        );
        return vec![];
    };
    arr.iter()
        .map(|v| match v {
            Value::String(s) => s.value().clone(),
            Value::Integer(i) => i.value().to_string(),
            _ => String::new(),
        })
        .collect()
}

/// A rate in Mbit/s (integer or decimal) as bits per second.
fn mbit(ctx: &mut Ctx<'_>, r: &TableReader<'_>, t: &Table, k: &str) -> Option<u64> {
    let v = t.get(k)?;
    let x = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    match x {
        Some(x) if x > 0.0 && x <= MAX_MBIT => Some((x * 1e6) as u64),
        Some(x) => {
            ctx.error(
                r.span(k),
                &r.key(k),
                format!("{x} is out of range (above 0, at most {MAX_MBIT})"),
            );
            None
        }
        None => {
            ctx.error(
                r.span(k),
                &r.key(k),
                "expected a number of Mbit/s, like 2 or 0.5",
            );
            None
        }
    }
}

fn prefixes(ctx: &mut Ctx<'_>, r: &TableReader<'_>, t: &Table, k: &str) -> Vec<Prefix> {
    let mut out = vec![];
    for (i, s) in list(ctx, r, t, k).iter().enumerate() {
        let parsed = s
            .parse::<IpNet>()
            .or_else(|_| s.parse::<IpAddr>().map(IpNet::from));
        match parsed {
            Ok(n) => out.push(Prefix {
                addr: n.network(),
                len: n.prefix_len(),
            }),
            Err(_) => ctx.error(
                r.span(k),
                &format!("{}[{}]", r.key(k), i + 1),
                format!("'{s}' is not an address or network, like 10.0.0.0/8 or 2001:db8::/32"),
            ),
        }
    }
    out
}

/// One `[[qos.class]]` block.
fn read_class(ctx: &mut Ctx<'_>, t: &Table, i: usize) -> Option<ClassConfig> {
    let r = TableReader::new(t, format!("qos.class[{}]", i + 1), CLASS_KEYS);
    let name = r.string(ctx, "name");
    let name = r.required(ctx, "name", name);
    let mut m = ClassMatch::default();
    for (j, s) in list(ctx, &r, t, "dscp").iter().enumerate() {
        match dscp_of(s) {
            Some(d) => m.dscp.push(d),
            None => ctx.error(
                r.span("dscp"),
                &format!("{}[{}]", r.key("dscp"), j + 1),
                format!("'{s}' is not a DSCP: a name (EF, VA, CS0-CS7, AF11-AF43) or 0 to 63"),
            ),
        }
    }
    if let Some(item) = t.get("protocol") {
        let s = item
            .as_str()
            .map(str::to_string)
            .or_else(|| item.as_integer().map(|i| i.to_string()))
            .unwrap_or_default();
        match protocol_of(&s) {
            Some(p) => m.protocol = Some(p),
            None => ctx.error(
                r.span("protocol"),
                &r.key("protocol"),
                format!(
                    "'{s}' is not a protocol: \"tcp\", \"udp\", \"icmp\", \"icmpv6\" or 0 to 255"
                ),
            ),
        }
    }
    for (j, s) in list(ctx, &r, t, "ports").iter().enumerate() {
        match port_range_of(s) {
            Some(p) => m.ports.push(p),
            None => ctx.error(
                r.span("ports"),
                &format!("{}[{}]", r.key("ports"), j + 1),
                format!("'{s}' is not a port or range, like \"5060\" or \"10000-20000\""),
            ),
        }
    }
    if !m.ports.is_empty() && m.protocol.is_some_and(|p| p != 6 && p != 17) {
        ctx.error(
            r.span("ports"),
            &r.key("ports"),
            "ports apply to tcp and udp only",
        );
    }
    m.source = prefixes(ctx, &r, t, "source");
    m.destination = prefixes(ctx, &r, t, "destination");
    let priority = r.int(ctx, "priority", (0, 15)).map_or(i as u8, |p| p as u8);
    let realtime = r.boolean(ctx, "realtime").unwrap_or(false);
    let redundant = r.boolean(ctx, "redundant").unwrap_or(false);
    if redundant && !realtime {
        ctx.error(
            r.span("redundant"),
            &r.key("redundant"),
            "applies to real-time classes only (add realtime = true)",
        );
    }
    let max_bps = mbit(ctx, &r, t, "max_mbit");
    let min_bps = mbit(ctx, &r, t, "min_mbit");
    if let (Some(lo), Some(hi)) = (min_bps, max_bps) {
        if lo > hi {
            ctx.error(
                r.span("min_mbit"),
                &r.key("min_mbit"),
                "the guaranteed rate is above the class's max_mbit",
            );
        }
    }
    let queue_ns = r
        .int(ctx, "queue_ms", (1, 10_000))
        .map(|v| v as u64 * NANOS_PER_MS);
    let aqm = r
        .choice(ctx, "aqm", &["codel", "none"])
        .is_none_or(|a| a == "codel");
    if realtime {
        for k in ["queue_ms", "aqm", "min_mbit"] {
            if r.span(k).is_some() {
                ctx.error(
                    r.span(k),
                    &r.key(k),
                    "applies to ordered classes only: real-time packets do not wait in the class queue",
                );
            }
        }
    }
    let outer_dscp = outer(ctx, &r, t).unwrap_or(if realtime {
        OuterDscp::Inner
    } else {
        OuterDscp::Zero
    });
    r.finish(ctx);
    Some(ClassConfig {
        name: name?,
        priority,
        realtime,
        redundant,
        matcher: m,
        max_bps,
        min_bps: min_bps.filter(|_| !realtime),
        queue_ns,
        aqm: aqm && !realtime,
        outer_dscp,
    })
}

/// Read `[qos]`: `None` when QoS is off (explicitly, or static weights
/// without configured classes).
pub fn read(ctx: &mut Ctx<'_>, t: Option<&Table>, paced: bool) -> Option<QosConfig> {
    let empty = Table::new();
    let r = TableReader::new(t.unwrap_or(&empty), "qos", QOS_KEYS);
    let enabled = r.boolean(ctx, "enabled");
    let blocks = t.map(|t| tables(ctx, t, "class")).unwrap_or_default();
    if enabled == Some(false) && !blocks.is_empty() {
        ctx.error(
            r.span("enabled"),
            "qos.enabled",
            "is false, but [[qos.class]] blocks are configured; remove them or the line",
        );
    }
    if !paced && (!blocks.is_empty() || enabled == Some(true)) {
        ctx.error(
            r.table_span(),
            "qos",
            "QoS needs path-aware sending (scheduler mode \"ecf\"): static weights send every packet at once, so nothing waits to be prioritised",
        );
    }
    if blocks.len() >= MAX_CLASSES {
        ctx.error(
            r.table_span(),
            "qos.class",
            format!(
                "{} classes configured; at most {} are supported",
                blocks.len(),
                MAX_CLASSES - 1
            ),
        );
    }
    let mut classes: Vec<ClassConfig> = vec![];
    for (i, b) in blocks.iter().enumerate() {
        let Some(c) = read_class(ctx, b, i) else {
            continue;
        };
        let key = format!("qos.class[{}]", i + 1);
        if classes.iter().any(|o| o.name == c.name) {
            ctx.error(
                b.span(),
                &format!("{key}.name"),
                format!("'{}' is already the name of another class", c.name),
            );
        }
        if c.matcher.is_catch_all() {
            if let Some(o) = classes.iter().find(|o| o.matcher.is_catch_all()) {
                ctx.error(
                    b.span(),
                    &key,
                    format!("'{}' matches every packet, as '{}' does; only one class may be the default (give it dscp, protocol, ports, source or destination)", c.name, o.name),
                );
            }
        }
        classes.push(c);
    }
    r.finish(ctx);
    if enabled == Some(false) || !paced {
        return None;
    }
    if blocks.is_empty() {
        return Some(QosConfig::standard());
    }
    Some(QosConfig { classes }.normalized())
}

#[cfg(test)]
#[path = "qos_tests.rs"]
mod tests;
