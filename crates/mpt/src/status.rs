//! `mpt status -v` and `mpt check` output (the one-screen view is
//! `status_brief`).
//!
//! The daemon answers with a JSON document; `--json` prints it as is, and
//! the default view renders it as tables. Rendering reads fields leniently
//! (missing fields show as `-`) so that a newer daemon never breaks an older
//! CLI. Invariant: the human view shows per path: state, packets and bytes
//! each way, RTT, loss and time since last heard; then totals, reorder
//! statistics and every drop counter.

use mpt_control::Request;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use serde_json::Value;

/// `mpt status --watch`: the human view, redrawn in place every
/// `interval` until interrupted (or `count` times).
pub fn watch(
    sock: &Path,
    interval: std::time::Duration,
    count: Option<u64>,
    verbose: bool,
) -> io::Result<()> {
    let mut shown = 0;
    loop {
        let v = fetch(sock)?;
        // Home and clear the screen, then draw.
        print!("\x1b[H\x1b[2J{}", view(&v, verbose));
        use std::io::Write;
        io::stdout().flush()?;
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
        std::thread::sleep(interval);
    }
}

/// The daemon's status document, or why there is none.
pub(crate) fn fetch(sock: &Path) -> io::Result<Value> {
    ask(sock, &Request::Status)
}

/// The daemon's answer to `request`, or its refusal as an error.
pub(crate) fn ask(sock: &Path, request: &Request) -> io::Result<Value> {
    let line = mpt_io::control::request(sock, request)?;
    let v: Value = serde_json::from_str(&line)
        .map_err(|e| io::Error::other(format!("daemon sent invalid JSON: {e}")))?;
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return Err(io::Error::other(format!("daemon: {e}")));
    }
    Ok(v)
}

/// The human view: one screen (a concentrator: one line per peer), or
/// with `verbose` everything.
pub fn view(v: &Value, verbose: bool) -> String {
    let concentrator = v.get("role").and_then(Value::as_str) == Some("concentrator");
    if verbose || concentrator {
        render(v)
    } else {
        crate::status_brief::render(v)
    }
}

pub fn show(sock: &Path, json: bool, verbose: bool) -> io::Result<()> {
    let v = fetch(sock)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
        );
    } else {
        print!("{}", view(&v, verbose));
    }
    Ok(())
}

/// How to read a path's one-way delay: absolute when the clocks are
/// consistent with the RTT, else only as a bound (RTT/2) and differences.
fn owd_note(p: &Value) -> String {
    let f = |k: &str| p.get(k).and_then(Value::as_f64);
    match (
        p.get("owd_clocks").and_then(Value::as_str),
        f("owd_min_ms"),
        f("rtt_min_ms"),
    ) {
        (Some("consistent"), Some(m), _) => format!("min {m:.3} ms"),
        (Some(_), _, Some(r)) => format!(
            "clocks differ: only its changes count; one-way about RTT/2 = {:.3} ms",
            r / 2.0
        ),
        _ => "no samples yet".into(),
    }
}
/// "tx 12.3 Mbit/s 1050 pkt/s, rx ..." from a rates object.
pub(crate) fn rates(r: Option<&Value>) -> String {
    let Some(r) = r.filter(|r| r.is_object()) else {
        return "(measuring)".into();
    };
    let f = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    format!(
        "tx {:.2} Mbit/s {:.0} pkt/s, rx {:.2} Mbit/s {:.0} pkt/s",
        f("tx_bps") / 1e6,
        f("tx_pps"),
        f("rx_bps") / 1e6,
        f("rx_pps")
    )
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

pub(crate) fn ms(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_f64)
        .map_or("-".into(), |x| format!("{x:.2}"))
}

pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// Render the status document as text, in full (`mpt status -v`).
pub fn render(v: &Value) -> String {
    if v.get("role").and_then(Value::as_str) == Some("concentrator") {
        return crate::peercmd::render(v);
    }
    let mut o = String::new();
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
    let paths = v
        .get("paths")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "tunnel {} ({}), pid {}, up {:.0} s, mtu {}{}, {}/{} paths up",
        s("name"),
        s("role"),
        num(v, "pid"),
        v.get("uptime_s").and_then(Value::as_f64).unwrap_or(0.0),
        num(v, "mtu"),
        fragments_line(v),
        num(v, "paths_up"),
        paths.len()
    );
    let addrs: Vec<String> = v
        .get("addresses")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(o, "addresses {}", addrs.join(", "));
    let _ = writeln!(
        o,
        "scheduler {}, reorder release {}",
        s("scheduler"),
        s("release_policy")
    );
    let _ = writeln!(o, "rates (last second): {}\n", rates(v.get("rates")));
    let _ = writeln!(
        o,
        "{:<12} {:<5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7} {:>7} {:>9}",
        "PATH",
        "STATE",
        "TX PKTS",
        "TX BYTES",
        "RX PKTS",
        "RX BYTES",
        "RTT ms",
        "JIT ms",
        "TXLOSS",
        "RXLOSS",
        "HEARD ms"
    );
    for p in &paths {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("-");
        let state = p.get("state").and_then(Value::as_str).unwrap_or("-");
        let pct = |k: &str| {
            p.get(k)
                .and_then(Value::as_f64)
                .map_or("-".into(), |x| format!("{:.2}%", x * 100.0))
        };
        let _ = writeln!(
            o,
            "{:<12} {:<5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7} {:>7} {:>9}",
            name,
            state,
            num(p, "tx_packets"),
            bytes(num(p, "tx_bytes")),
            num(p, "rx_packets"),
            bytes(num(p, "rx_bytes")),
            ms(p, "rtt_ms"),
            ms(p, "jitter_ms"),
            pct("tx_loss"),
            pct("rx_loss"),
            p.get("last_heard_ms")
                .and_then(Value::as_f64)
                .map_or("never".into(), |x| format!("{x:.0}")),
        );
    }
    for p in &paths {
        let _ = writeln!(
            o,
            "  {}{}: {} -> {}  {}owd {} ms ({})  rtt min {} ms  up/down {}/{}",
            p.get("name").and_then(Value::as_str).unwrap_or("-"),
            if p.get("backup").and_then(Value::as_bool) == Some(true) {
                " (backup: data only while no other path is up)"
            } else {
                ""
            },
            p.get("local").and_then(Value::as_str).unwrap_or("-"),
            p.get("remote").and_then(Value::as_str).unwrap_or("-"),
            share(p),
            ms(p, "owd_ms"),
            owd_note(p),
            ms(p, "rtt_min_ms"),
            num(p, "ups"),
            num(p, "downs"),
        );
        let _ = writeln!(o, "    rates: {}", rates(p.get("rates")));
        if let Some(d) = p.get("owd_above_min").filter(|d| !d.is_null()) {
            let _ = writeln!(
                o,
                "    one-way delay above its minimum: mean {} ms, p50 {} ms, p90 {} ms, p99 {} ms, max {} ms ({} packets)",
                ms(d, "mean_ms"),
                ms(d, "p50_ms"),
                ms(d, "p90_ms"),
                ms(d, "p99_ms"),
                ms(d, "max_ms"),
                num(d, "samples"),
            );
        }
        let cause = p.get("rx_lost_by_cause").cloned().unwrap_or(Value::Null);
        let _ = writeln!(
            o,
            "    received: {} Mbit/s delivery rate, {} ms queueing, lost {} on the link / {} at a queue",
            p.get("rx_rate_mbps")
                .and_then(Value::as_f64)
                .map_or("-".into(), |x| format!("{x:.1}")),
            ms(p, "rx_queueing_ms"),
            num(&cause, "link"),
            num(&cause, "congestion"),
        );
        if let Some(s) = p.get("sending").filter(|s| !s.is_null()) {
            let mbit = |k: &str| {
                s.get(k)
                    .and_then(Value::as_f64)
                    .map_or("-".into(), |x| format!("{x:.1}"))
            };
            let _ = writeln!(
                o,
                "    sending: {} ({} samples, {} cuts), capacity {} Mbit/s, paced at {} Mbit/s{}, peer received {} Mbit/s with {} ms queueing, {} ms jitter{}",
                s.get("control").and_then(Value::as_str).unwrap_or("-"),
                num(s, "samples"),
                num(s, "cuts"),
                mbit("bandwidth_mbps"),
                mbit("pacing_mbps"),
                s.get("cap_mbps")
                    .and_then(Value::as_f64)
                    .map_or(String::new(), |c| format!(" (cap {c:.0})")),
                mbit("delivered_mbps"),
                ms(s, "queueing_ms"),
                ms(s, "jitter_ms"),
                s.get("fill_ms")
                    .and_then(Value::as_f64)
                    .map_or(String::new(), |f| format!("; holds up to {f:.1} ms before the QoS stage")),
            );
        }
    }
    if let Some(q) = v.get("queue").filter(|q| !q.is_null()) {
        let released = num(q, "released") as f64;
        let total = q
            .get("wait_ns_total")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let _ = writeln!(
            o,
            "\nsend queue: {} waiting now ({} of at most {}; bound {} ms), {} waited, mean wait {:.2} ms, max {:.2} ms, {} moved off a failed path",
            num(q, "packets_now"),
            bytes(num(q, "bytes_now")),
            bytes(num(q, "bytes_max")),
            q.get("max_ms").and_then(Value::as_f64).unwrap_or(0.0),
            num(q, "queued"),
            if released > 0.0 { total / released / 1e6 } else { 0.0 },
            q.get("max_wait_ns").and_then(Value::as_f64).unwrap_or(0.0) / 1e6,
            num(q, "rerouted"),
        );
    }
    render_classes(&mut o, v);
    let c = v.get("counters").cloned().unwrap_or(Value::Null);
    let _ = writeln!(
        o,
        "\ntotals: sent {} packets ({}), delivered {} packets ({})",
        num(&c, "tx_packets"),
        bytes(num(&c, "tx_bytes")),
        num(&c, "rx_packets"),
        bytes(num(&c, "rx_bytes"))
    );
    let r = v.get("reorder").cloned().unwrap_or(Value::Null);
    let _ = writeln!(
        o,
        "reorder: window {}, held now {} ({} of at most {}), in order {}, reordered {}, lost {} (came late and delivered {}), released by policy {} / timeout {} / overflow {} / bytes {}, max held {} ({}), margin {} ms",
        num(&r, "window"),
        num(&r, "held_now"),
        bytes(num(&r, "held_bytes")),
        bytes(num(&r, "bytes_max")),
        num(&r, "in_order"),
        num(&r, "reordered"),
        num(&r, "lost"),
        num(&r, "late_delivered"),
        num(&r, "policy_releases"),
        num(&r, "timeout_releases"),
        num(&r, "overflow_releases"),
        num(&r, "bytes_releases"),
        num(&r, "max_held"),
        bytes(num(&r, "max_held_bytes")),
        ms(&r, "late_margin_ms"),
    );
    if let Some(e) = v.get("ecn").filter(|e| e.is_object()) {
        let _ = writeln!(
            o,
            "ecn (RFC 6040): outer CE received {}, carried into inner packets {} (ECT(1) {}), not carried {}, dropped as not ECN-capable {}",
            num(e, "outer_ce"),
            num(e, "ce_carried"),
            num(e, "ect1_carried"),
            num(e, "ce_not_carried"),
            v.get("drops").map_or(0, |d| num(d, "ecn_ce_not_ect")),
        );
    }
    match v.get("security").filter(|s| !s.is_null()) {
        Some(sec) => {
            let _ = writeln!(
                o,
                "security: {} ({}), cipher {}, session age {} s, handshakes {} ok / {} failed, rekeys {}, rate-limited initiations {}",
                sec.get("mode").and_then(Value::as_str).unwrap_or("-"),
                sec.get("role").and_then(Value::as_str).unwrap_or("-"),
                sec.get("cipher").and_then(Value::as_str).unwrap_or("none yet"),
                sec.get("session_age_s").and_then(Value::as_f64).map_or("-".into(), |x| format!("{x:.0}")),
                num(sec, "handshakes_completed"),
                num(sec, "handshake_failures"),
                num(sec, "rekeys"),
                num(sec, "initiations_rate_limited"),
            );
        }
        None => {
            let _ = writeln!(o, "security: NONE — plaintext (insecure_no_encryption)");
        }
    }
    if let Some(io) = v.get("io").filter(|x| x.is_object()) {
        let _ = writeln!(o, "{}", io_line(io));
    }
    if let Some(r) = v.get("recovery").filter(|x| x.is_object()) {
        let _ = writeln!(
            o,
            "recovery: asked for {} path losses and {} gaps in {} NACKs, {} gaps recovered, {} given up; resent {} of {} asked by the peer ({} no longer held, {} already on their way); holding {} of {} for resending, each for {} ms",
            num(r, "path_losses_requested"),
            num(r, "gaps_requested"),
            num(r, "nacks_sent"),
            num(r, "recovered"),
            num(r, "gave_up"),
            num(r, "retransmitted"),
            num(r, "requests_received"),
            num(r, "not_available"),
            num(r, "resend_in_flight"),
            bytes(num(r, "ring_bytes")),
            bytes(num(r, "ring_bytes_max")),
            num(r, "ring_keep_ms"),
        );
    }
    if let Some(w) = v.get("workers").filter(|x| x.is_object()) {
        let engaged = w.get("engaged").and_then(Value::as_bool).unwrap_or(false);
        let _ = writeln!(
            o,
            "workers: {} (helpers {}: {}; loop demand {:.2} cores, spare {:.2})",
            num(w, "workers"),
            w.get("engage").and_then(Value::as_str).unwrap_or("?"),
            if engaged { "working" } else { "idle" },
            w.get("demand_cores").and_then(Value::as_f64).unwrap_or(0.0),
            w.get("spare_cores").and_then(Value::as_f64).unwrap_or(0.0),
        );
        for x in w
            .get("per_worker")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (p, j) = (num(x, "packets"), num(x, "jobs"));
            let per_job = if j == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", p as f64 / j as f64)
            };
            let _ = writeln!(
                o,
                "  worker {}: {} packets ({}) in {} pieces of batches, {} per piece (max {}), busy {} ms",
                num(x, "id"),
                p,
                bytes(num(x, "bytes")),
                j,
                per_job,
                num(x, "max_job"),
                num(x, "busy_ms"),
            );
        }
    }
    let drops: Vec<String> = v
        .get("drops")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, x)| x.as_u64() != Some(0))
                .map(|(k, x)| format!("{k}={}", x.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    // Only the counters that counted (all of them are in --json).
    let shown = if drops.is_empty() {
        "none".to_string()
    } else {
        drops.join(" ")
    };
    let _ = writeln!(o, "drops: {shown}");
    let unmatched: Vec<&str> = v
        .get("unmatched_peer_paths")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|p| p.get("name")?.as_str()).collect())
        .unwrap_or_default();
    if !unmatched.is_empty() {
        let _ = writeln!(
            o,
            "peer paths with no match here: {} (paths pair by name; their packets are dropped as unknown_path)",
            unmatched.join(", ")
        );
    }
    o
}

/// How a path's share is set: its static weight, or (path-aware sending,
/// where weights do not apply) its configured cap if any.
fn share(p: &Value) -> String {
    match p.get("sending").filter(|s| s.is_object()) {
        Some(s) => match s.get("cap_mbps").and_then(Value::as_f64) {
            Some(c) => format!("cap {c} Mbit/s  "),
            None => String::new(),
        },
        None => format!("weight {}  ", num(p, "weight")),
    }
}

/// The QoS classes: traffic, what waits, delay percentiles, drops.
fn render_classes(o: &mut String, v: &Value) {
    let Some(classes) = v.get("qos").and_then(Value::as_array) else {
        return;
    };
    let _ = writeln!(o, "\nQoS classes (precedence 0 first):");
    for c in classes {
        let d = c.get("delay").cloned().unwrap_or(Value::Null);
        let kind = match (
            c.get("realtime").and_then(Value::as_bool),
            c.get("redundant").and_then(Value::as_bool),
        ) {
            (Some(true), Some(true)) => "real-time, redundant",
            (Some(true), _) => "real-time",
            _ => "ordered",
        };
        let outer = match c.get("outer_dscp").and_then(Value::as_str) {
            Some("inner") => ", outer DSCP copied".to_string(),
            Some(d) if d != "0" => format!(", outer DSCP {d}"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  {} (precedence {}, {kind}{outer}): sent {} packets ({}), waiting {} ({} of at most {}) in {} flows, fair share {} Mbit/s over {} flows ({} held to it so far), delay p50 {} / p99 {} / max {} ms, dropped {} over rate / {} class full / {} over a flow's share / {} by CoDel / {} waited too long, {} marked CE by CoDel",
            c.get("name").and_then(Value::as_str).unwrap_or("?"),
            num(c, "priority"),
            num(c, "packets"),
            bytes(num(c, "bytes")),
            num(c, "queued_packets"),
            bytes(num(c, "queued_bytes")),
            bytes(num(c, "queued_bytes_max")),
            num(c, "flows_now"),
            c.get("fair_share_mbps")
                .and_then(Value::as_f64)
                .map_or("–".to_string(), |m| format!("{m:.1}")),
            num(c, "sharing_flows"),
            num(c, "policed_flows"),
            ms(&d, "p50_ms"),
            ms(&d, "p99_ms"),
            ms(&d, "max_ms"),
            num(c, "dropped_rate"),
            num(c, "dropped_full"),
            num(c, "dropped_share"),
            num(c, "dropped_aqm"),
            num(c, "dropped_expired"),
            num(c, "marked_aqm"),
        );
    }
}

/// The data plane's batching and offloads (`io` of a status document, a
/// single tunnel's or a concentrator's).
pub fn io_line(io: &Value) -> String {
    let on = |k: &str| {
        if io.get(k).and_then(Value::as_bool).unwrap_or(false) {
            "on"
        } else {
            "off"
        }
    };
    let ratio = |a: &str, b: &str| {
        let (x, y) = (num(io, a), num(io, b));
        if y == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", x as f64 / y as f64)
        }
    };
    format!(
        "io: tun offload {} (uso {}), udp gso {}, udp gro {}; datagrams per sendmmsg {}, per recvmmsg {}; segments per TSO read {}, per USO read {}; TCP segments per GRO write {}, UDP datagrams per GRO write {}",
        on("tun_offload"),
        on("tun_uso"),
        on("udp_gso"),
        on("udp_gro"),
        ratio("udp_datagrams_sent", "udp_send_calls"),
        ratio("udp_datagrams_received", "udp_recv_calls"),
        ratio("tso_segments", "tso_super_packets"),
        ratio("uso_segments", "uso_super_packets"),
        ratio("gro_segments", "gro_super_packets"),
        ratio("udp_gro_segments", "udp_gro_super_packets"),
    )
}

/// How the tunnel MTU relates to one datagram: " (fragments above N bytes:
/// sent S, received R, reassembled K)", or nothing when nothing is cut.
fn fragments_line(v: &Value) -> String {
    let Some(f) = v.get("fragments") else {
        return String::new();
    };
    let body = num(f, "datagram_body");
    if body >= num(v, "mtu") {
        return String::new();
    }
    let clamp = match f.get("mss_clamp").and_then(Value::as_array) {
        Some(b) if b.len() == 2 => format!(
            "; routed TCP clamped to MSS {}/{} (IPv4/IPv6), {} SYNs",
            b[0],
            b[1],
            num(f, "mss_clamped")
        ),
        _ => String::new(),
    };
    format!(
        " (fragments above {body} bytes: {} pieces sent, {} received, {} packets reassembled, {} held of at most {}{clamp})",
        num(f, "tx_pieces"),
        num(f, "rx_pieces"),
        num(f, "reassembled"),
        bytes(num(f, "held_bytes")),
        bytes(num(f, "held_bytes_max")),
    )
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
