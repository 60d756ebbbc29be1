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
use std::path::{Path, PathBuf};

use mpt_config::{overhead, Config, Role, SchedulerMode, Security};
use mpt_core::crypto::aead::Cipher;
use mpt_core::crypto::state::CipherPref;
use serde_json::Value;

/// The control socket to use when none was named: the only one in the
/// default directory.
pub fn default_socket() -> io::Result<PathBuf> {
    let dir = Path::new(mpt_config::defaults::CONTROL_DIR);
    let socks: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default();
    match socks.len() {
        1 => Ok(socks[0].clone()),
        0 => Err(io::Error::other(format!(
            "no running tunnel found in {}; name one with -c FILE or -s SOCKET",
            dir.display()
        ))),
        _ => Err(io::Error::other(format!(
            "several tunnels run ({}); name one with -c FILE or -s SOCKET",
            socks
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

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
        let _ = writeln!(
            o,
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
        );
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
            "  {} (precedence {}, {kind}{outer}): sent {} packets ({}), waiting {} ({} of at most {}) in {} flows, fair share {} Mbit/s over {} flows, delay p50 {} / p99 {} / max {} ms, dropped {} over rate / {} class full / {} over a flow's share / {} by CoDel / {} waited too long, {} marked CE by CoDel",
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
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn a_path_shows_its_weight_or_its_cap() {
        assert_eq!(share(&json!({"weight": 3, "sending": null})), "weight 3  ");
        assert_eq!(
            share(&json!({"weight": 1, "sending": {"cap_mbps": null}})),
            ""
        );
        assert_eq!(
            share(&json!({"weight": 1, "sending": {"cap_mbps": 5.0}})),
            "cap 5 Mbit/s  "
        );
    }

    #[test]
    fn one_way_delay_is_absolute_only_when_the_clocks_are_consistent() {
        let ok = json!({"owd_clocks": "consistent", "owd_min_ms": 10.0021, "rtt_min_ms": 20.1});
        assert_eq!(owd_note(&ok), "min 10.002 ms");
        let off = json!({"owd_clocks": "offset", "owd_min_ms": -3.0, "rtt_min_ms": 20.0});
        assert!(owd_note(&off).contains("clocks differ"));
        assert!(owd_note(&off).contains("RTT/2 = 10.000 ms"));
        assert_eq!(owd_note(&json!({})), "no samples yet");
    }
}
