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

use mpt_control::status::{Document, IoDoc, TunnelDoc};
use mpt_core::path::PathStatus;
use mpt_core::qos::ClassStatus;
use mpt_core::rates::Rates;
use mpt_core::tunnel::TunnelStatus;
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
    if let Some(e) = mpt_control::refusal(&v) {
        return Err(io::Error::other(format!("daemon: {e}")));
    }
    Ok(v)
}

/// The human view: one screen (a concentrator: one line per peer), or
/// with `verbose` everything.
pub fn view(v: &Value, verbose: bool) -> String {
    match Document::read(v) {
        Document::Concentrator(d) => crate::peercmd::render_doc(&d),
        Document::Tunnel(d) if verbose => render_doc(&d),
        Document::Tunnel(d) => crate::status_brief::render_doc(&d),
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
fn owd_note(p: &PathStatus) -> String {
    match (p.owd_clocks.as_deref(), p.owd_min_ms, p.rtt_min_ms) {
        (Some("consistent"), Some(m), _) => format!("min {m:.3} ms"),
        (Some(_), _, Some(r)) => format!(
            "clocks differ: only its changes count; one-way about RTT/2 = {:.3} ms",
            r / 2.0
        ),
        _ => "no samples yet".into(),
    }
}

/// "tx 12.3 Mbit/s 1050 pkt/s, rx ..." from a rates object.
pub(crate) fn rates(r: Option<&Rates>) -> String {
    let Some(r) = r else {
        return "(measuring)".into();
    };
    format!(
        "tx {:.2} Mbit/s {:.0} pkt/s, rx {:.2} Mbit/s {:.0} pkt/s",
        r.tx_bps / 1e6,
        r.tx_pps,
        r.rx_bps / 1e6,
        r.rx_pps
    )
}

/// A value of milliseconds, two decimals, or "-".
pub(crate) fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2}"))
}

/// A text, or "-" for none.
pub(crate) fn dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// A value of Mbit/s, one decimal, or "-".
fn mbit(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.1}"))
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

/// The output, from the typed document the daemon sent (`render` is its
/// tests' form, from untyped JSON).
pub fn render_doc(d: &TunnelDoc) -> String {
    let t = &d.tunnel;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "tunnel {} ({}), pid {}, up {:.0} s, mtu {}{}, {}/{} paths up",
        dash(&d.name),
        dash(&d.role),
        d.pid,
        d.uptime_s,
        t.mtu,
        fragments_line(t),
        t.paths_up,
        t.paths.len()
    );
    let _ = writeln!(o, "addresses {}", d.addresses.join(", "));
    let _ = writeln!(
        o,
        "scheduler {}, reorder release {}",
        t.scheduler, t.release_policy
    );
    let _ = writeln!(o, "rates (last second): {}\n", rates(d.rates.as_ref()));
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
    for p in &t.paths {
        let pct = |x: f64| format!("{:.2}%", x * 100.0);
        let _ = writeln!(
            o,
            "{:<12} {:<5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7} {:>7} {:>9}",
            p.name,
            p.state,
            p.tx_packets,
            bytes(p.tx_bytes),
            p.rx_packets,
            bytes(p.rx_bytes),
            ms(p.rtt_ms),
            ms(p.jitter_ms),
            pct(p.tx_loss),
            pct(p.rx_loss),
            p.last_heard_ms
                .map_or("never".into(), |x| format!("{x:.0}")),
        );
    }
    for p in &t.paths {
        let _ = writeln!(
            o,
            "  {}{}: {} -> {}  {}owd {} ms ({})  rtt min {} ms  up/down {}/{}",
            p.name,
            if p.backup {
                " (backup: data only while no other path is up)"
            } else {
                ""
            },
            p.local,
            p.remote,
            share(p),
            ms(p.owd_ms),
            owd_note(p),
            ms(p.rtt_min_ms),
            p.ups,
            p.downs,
        );
        let _ = writeln!(o, "    rates: {}", rates(p.rates.as_ref()));
        if p.stalls > 0 {
            let _ = writeln!(
                o,
                "    stalled {} times (data went unreported past its round trips; what it carried last was sent again on another path){}",
                p.stalls,
                if p.stalled { ", stalled now" } else { "" },
            );
        }
        if p.reports_carried_out + p.reports_carried_in > 0 {
            let _ = writeln!(
                o,
                "    reports carried on another path (one direction out): {} sent, {} received",
                p.reports_carried_out, p.reports_carried_in,
            );
        }
        if let Some(a) = &p.owd_above_min {
            let q = &a.percentiles;
            let _ = writeln!(
                o,
                "    one-way delay above its minimum: mean {:.2} ms, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} packets)",
                a.mean_ms, q.p50_ms, q.p90_ms, q.p99_ms, q.max_ms, a.samples,
            );
        }
        let _ = writeln!(
            o,
            "    received: {} Mbit/s delivery rate, {} ms queueing, lost {} on the link / {} at a queue",
            mbit(p.rx_rate_mbps),
            ms(p.rx_queueing_ms),
            p.rx_lost_by_cause.link,
            p.rx_lost_by_cause.congestion,
        );
        if let Some(s) = &p.sending {
            let _ = writeln!(
                o,
                "    sending: {} ({} samples, {} cuts{}), capacity {} Mbit/s, paced at {} Mbit/s{}, peer received {} Mbit/s{} with {} ms queueing (target {} ms{}; {} ms of standing queue expected now), {} ms jitter{}",
                s.control,
                s.samples,
                s.cuts,
                s.random_loss_pct.filter(|&l| l > 0.0).map_or(String::new(), |l| {
                    format!(
                        "; random loss {l:.2} %, {} losses at a queue taken for it",
                        s.losses_excused
                    )
                }),
                mbit(s.bandwidth_mbps),
                mbit(s.pacing_mbps),
                s.cap_mbps.map_or(String::new(), |c| format!(" (cap {c:.0})")),
                mbit(s.delivered_mbps),
                s.sent_then_mbps
                    .map_or(String::new(), |v| format!(" of {v:.1} sent")),
                ms(s.queueing_ms),
                ms(s.target_ms),
                s.link_queue_ms.filter(|&l| l > 0.0).map_or(String::new(), |l| {
                    format!(" above the link's own {l:.1} ms")
                }),
                ms(s.queue_ahead_ms),
                ms(s.jitter_ms),
                s.fill_ms.map_or(String::new(), |f| {
                    format!("; holds up to {f:.1} ms before the QoS stage")
                }),
            );
        }
    }
    if let Some(q) = &t.queue {
        let st = &q.stats;
        let mean = if st.released > 0 {
            st.wait_ns_total as f64 / st.released as f64 / 1e6
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "\nsend queue: {} waiting now ({} of at most {}; bound {} ms), {} waited, mean wait {:.2} ms, max {:.2} ms, {} moved off a failed path",
            q.packets_now,
            bytes(q.bytes_now as u64),
            bytes(q.bytes_max as u64),
            q.max_ms,
            st.queued,
            mean,
            st.max_wait_ns as f64 / 1e6,
            st.rerouted,
        );
    }
    render_classes(&mut o, t.qos.as_deref());
    let c = &t.counters;
    let _ = writeln!(
        o,
        "\ntotals: sent {} packets ({}), delivered {} packets ({})",
        c.tx_packets,
        bytes(c.tx_bytes),
        c.rx_packets,
        bytes(c.rx_bytes)
    );
    let r = &t.reorder;
    let _ = writeln!(
        o,
        "reorder: window {}, held now {} ({} of at most {}), in order {}, reordered {}, lost {} (by policy {} / timeout {} / limits {}; came late and delivered {}), released by policy {} / timeout {} / overflow {} / bytes {}, max held {} ({}), margin {:.2} ms, hold {:.0} ms",
        r.window,
        r.held_now,
        bytes(r.held_bytes as u64),
        bytes(r.bytes_max as u64),
        r.stats.in_order,
        r.stats.reordered,
        r.stats.lost,
        r.stats.lost_by_policy,
        r.stats.lost_by_timeout,
        r.stats.lost_by_limits,
        r.stats.late_delivered,
        r.stats.policy_releases,
        r.stats.timeout_releases,
        r.stats.overflow_releases,
        r.stats.bytes_releases,
        r.stats.max_held,
        bytes(r.stats.max_held_bytes),
        r.late_margin_ms,
        r.hold_ms,
    );
    let e = &t.ecn;
    let _ = writeln!(
        o,
        "ecn (RFC 6040): outer CE received {}, carried into inner packets {} (ECT(1) {}), not carried {}, waiting with a piece {}, dropped as not ECN-capable {}",
        e.outer_ce,
        e.ce_carried,
        e.ect1_carried,
        e.ce_not_carried,
        e.ce_waiting,
        t.drops
            .get(mpt_core::stats::DropReason::EcnCeNotEct.as_str())
            .copied()
            .unwrap_or(0),
    );
    match &t.security {
        Some(sec) => {
            let _ = writeln!(
                o,
                "security: {} ({}), cipher {}, session age {} s, handshakes {} ok / {} failed, rekeys {}, rate-limited initiations {}",
                sec.mode,
                sec.role,
                sec.cipher.as_deref().unwrap_or("none yet"),
                sec.session_age_s.map_or("-".into(), |x| format!("{x:.0}")),
                sec.stats.handshakes_completed,
                sec.stats.handshake_failures,
                sec.stats.rekeys,
                sec.stats.initiations_rate_limited,
            );
            let st = &sec.stats;
            let found = st.session_unknown_handshakes + st.silence_handshakes;
            if st.peer_restarts + found + st.session_unknown_sent > 0 {
                let _ = writeln!(
                    o,
                    "  restarts of the peer: {}; new handshakes on its word: {}, after silence: {}; its datagrams naming a session we did not hold, answered: {}",
                    st.peer_restarts,
                    st.session_unknown_handshakes,
                    st.silence_handshakes,
                    st.session_unknown_sent,
                );
            }
        }
        None => {
            let _ = writeln!(o, "security: NONE — plaintext (insecure_no_encryption)");
        }
    }
    if let Some(io) = &d.io {
        let _ = writeln!(o, "{}", io_line(io));
    }
    if let Some(r) = &t.recovery {
        let _ = writeln!(
            o,
            "recovery: asked for {} path losses and {} gaps in {} NACKs, {} gaps recovered, {} given up, {} of them answered late (answers took {} ms, waited for up to {} ms, backed off {}x); resent {} of {} asked by the peer ({} no longer held, {} already on their way, {} too late to send); holding {} of {} for resending, each for {} ms",
            r.path_losses_requested,
            r.gaps_requested,
            r.nacks_sent,
            r.recovered,
            r.gave_up,
            r.late_answers,
            r.answer_ms,
            r.answer_wait_ms,
            r.wait_backoff,
            r.retransmitted,
            r.requests_received,
            r.not_available,
            r.resend_in_flight,
            r.resends_expired,
            bytes(r.ring_bytes),
            bytes(r.ring_bytes_max),
            r.ring_keep_ms,
        );
    }
    if let Some(f) = &t.fec {
        let _ = writeln!(o, "{}", fec_line(f));
    }
    if let Some(w) = &d.workers {
        let _ = writeln!(
            o,
            "workers: {} (helpers {}: {}; loop demand {:.2} cores, spare {:.2})",
            w.workers,
            w.engage,
            if w.engaged { "working" } else { "idle" },
            w.demand_cores,
            w.spare_cores,
        );
        for x in &w.per_worker {
            let per_job = if x.jobs == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", x.packets as f64 / x.jobs as f64)
            };
            let _ = writeln!(
                o,
                "  worker {}: {} packets ({}) in {} pieces of batches, {} per piece (max {}), busy {} ms",
                x.id,
                x.packets,
                bytes(x.bytes),
                x.jobs,
                per_job,
                x.max_job,
                x.busy_ms,
            );
        }
    }
    // Only the counters that counted (all of them are in --json).
    let drops: Vec<String> = t
        .drops
        .iter()
        .filter(|(_, n)| **n != 0)
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    let shown = if drops.is_empty() {
        "none".to_string()
    } else {
        drops.join(" ")
    };
    let _ = writeln!(o, "drops: {shown}");
    if !t.unmatched_peer_paths.is_empty() {
        let names: Vec<&str> = t
            .unmatched_peer_paths
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        let _ = writeln!(
            o,
            "peer paths with no match here: {} (paths pair by name; their packets are dropped as unknown_path)",
            names.join(", ")
        );
    }
    o
}

/// How a path's share is set: its static weight, or (path-aware sending,
/// where weights do not apply) its configured cap if any.
fn share(p: &PathStatus) -> String {
    match &p.sending {
        Some(s) => match s.cap_mbps {
            Some(c) => format!("cap {c} Mbit/s  "),
            None => String::new(),
        },
        None => format!("weight {}  ", p.weight),
    }
}

/// The QoS classes: traffic, what waits, delay percentiles, drops.
fn render_classes(o: &mut String, classes: Option<&[ClassStatus]>) {
    let Some(classes) = classes else {
        return;
    };
    let _ = writeln!(o, "\nQoS classes (precedence 0 first):");
    for c in classes {
        let kind = match (c.realtime, c.redundant) {
            (true, true) => "real-time, redundant",
            (true, false) => "real-time",
            _ => "ordered",
        };
        let outer = match c.outer_dscp.as_str() {
            "inner" => ", outer DSCP copied".to_string(),
            "" | "0" => String::new(),
            d => format!(", outer DSCP {d}"),
        };
        let k = &c.counters;
        let _ = writeln!(
            o,
            "  {} (precedence {}, {kind}{outer}): sent {} packets ({}), waiting {} ({} of at most {}) in {} flows, fair share {} Mbit/s over {} flows ({} held to it so far), delay p50 {:.2} / p99 {:.2} / max {:.2} ms, dropped {} over rate / {} class full / {} over a flow's share / {} by CoDel / {} waited too long, {} marked CE by CoDel",
            c.name,
            c.priority,
            k.packets,
            bytes(k.bytes),
            c.queued_packets,
            bytes(c.queued_bytes as u64),
            bytes(c.queued_bytes_max as u64),
            c.flows_now,
            c.fair_share_mbps.map_or("–".to_string(), |m| format!("{m:.1}")),
            c.sharing_flows,
            c.policed_flows,
            c.delay.p50_ms,
            c.delay.p99_ms,
            c.delay.max_ms,
            k.dropped_rate,
            k.dropped_full,
            k.dropped_share,
            k.dropped_aqm,
            k.dropped_expired,
            k.marked_aqm,
        );
    }
}

/// The data plane's batching and offloads (`io` of a status document, a
/// single tunnel's or a concentrator's).
pub fn io_line(d: &IoDoc) -> String {
    let (io, w) = (&d.io, &d.writes);
    let on = |x: bool| if x { "on" } else { "off" };
    let ratio = |x: u64, y: u64| {
        if y == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", x as f64 / y as f64)
        }
    };
    format!(
        "io: tun offload {} (uso {}), udp gso {}, udp gro {}; datagrams per sendmmsg {}, per recvmmsg {}; segments per TSO read {}, per USO read {}; TCP segments per GRO write {}, UDP datagrams per GRO write {}",
        on(io.tun_offload),
        on(io.tun_uso),
        on(io.udp_gso),
        on(io.udp_gro),
        ratio(io.udp_datagrams_sent, io.udp_send_calls),
        ratio(io.udp_datagrams_received, io.udp_recv_calls),
        ratio(io.tso_segments, io.tso_super_packets),
        ratio(io.uso_segments, io.uso_super_packets),
        ratio(w.gro_segments, w.gro_super_packets),
        ratio(w.udp_gro_segments, w.udp_gro_super_packets),
    )
}

/// How the tunnel MTU relates to one datagram: " (fragments above N bytes:
/// sent S, received R, reassembled K)", or nothing when nothing is cut.
fn fragments_line(t: &TunnelStatus) -> String {
    let f = &t.fragments;
    if f.datagram_body == 0 || f.datagram_body >= t.mtu {
        return String::new();
    }
    let clamp = match f.mss_clamp {
        Some((v4, v6)) => format!(
            "; routed TCP clamped to MSS {v4}/{v6} (IPv4/IPv6), {} SYNs",
            f.mss_clamped
        ),
        None => String::new(),
    };
    format!(
        " (fragments above {} bytes: {} pieces sent, {} received, {} packets reassembled, {} held of at most {}{clamp})",
        f.datagram_body,
        f.tx_pieces,
        f.rx_pieces,
        f.reassembled,
        bytes(f.held_bytes as u64),
        bytes(f.held_bytes_max as u64),
    )
}

/// The `fec:` line: what forward error correction sent and rebuilt.
fn fec_line(f: &mpt_core::tunnel::FecStats) -> String {
    format!(
        "fec: sent {} repairs for {} blocks; received {}, rebuilt {} packets ({} blocks lost more than their repairs, {} repairs inconsistent); {} losses waited for repairs, {} of them rebuilt in time, {} asked for after",
        f.repairs_sent,
        f.blocks,
        f.repairs_received,
        f.rebuilt,
        f.unrecoverable,
        f.inconsistent,
        f.losses_deferred,
        f.nacks_saved,
        f.nacks_after_wait,
    )
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
