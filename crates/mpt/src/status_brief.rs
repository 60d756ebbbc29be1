//! `mpt status` without `-v`: one screen for a tunnel.
//!
//! It answers "is it working, and how fast is each link": the tunnel's
//! state and session age, one line per path (state, rate each way over the
//! last second, RTT, loss each way), the total, and then only what needs
//! attention: every drop counter that counted, and warnings (a path down or
//! not yet validated, a peer that does not hear a path, peer paths with no
//! match, plaintext). `-v` prints the full view (`status::render`), `--json`
//! the document.
//!
//! Invariants: the view is at most 2 + paths + 1 + 3 + warnings lines, each
//! under 100 columns for names up to 12 characters; missing fields show as
//! `-` (a newer daemon never breaks an older CLI); nothing here reads a
//! clock or a socket.

use std::fmt::Write as _;

use mpt_control::status::TunnelDoc;
use mpt_core::path::PathStatus;
use mpt_core::rates::Rates;

/// Mbit/s of a rates object's transmit or receive side.
fn mbit(rates: Option<&Rates>, tx: bool) -> String {
    rates.map_or("-".into(), |r| {
        format!("{:.1}", if tx { r.tx_bps } else { r.rx_bps } / 1e6)
    })
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Seconds as the largest unit that keeps it short: 42 s, 7 min, 3.2 h, 5.1 d.
pub(crate) fn age(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

/// Silence on a path the peer still hears us on after which the one-screen
/// view warns that one direction is out (tuning knob: past the dead
/// interval's default, a second).
const ONE_WAY_WARN_MS: f64 = 1_000.0;

/// The warnings a path's fields raise.
fn path_warnings(p: &PathStatus, w: &mut Vec<String>) {
    let name = &p.name;
    if p.admin_down {
        w.push(format!(
            "path {name} is down by command (`mpt path {name} up`)"
        ));
    } else if p.state != "up" {
        let heard = p.last_heard_ms.map_or("never heard".into(), |x| {
            format!("last heard {} ago", age(x / 1e3))
        });
        w.push(format!("path {name} is {} ({heard})", p.state));
    } else if !p.peer_hears_us {
        w.push(format!("path {name}: the peer does not hear us on it"));
    } else if !p.receiving && p.last_heard_ms.is_some_and(|ms| ms >= ONE_WAY_WARN_MS) {
        // Heard before, silent now, and the peer still hears us: one
        // direction is out (not a path that just came up).
        w.push(format!(
            "path {name}: we do not hear the peer on it (its reports come on another path)"
        ));
    }
    if p.validating.is_some() {
        w.push(format!("path {name}: validating a new peer address"));
    }
}

/// The one-screen view of a tunnel's status document.
#[cfg(test)] // the daemons' documents are read once, [`Document::read`]
pub fn render(v: &serde_json::Value) -> String {
    use mpt_control::status::Document;
    match Document::read(v) {
        Document::Tunnel(d) => render_doc(&d),
        Document::Concentrator(d) => crate::peercmd::render_doc(&d),
    }
}

/// The output, from the typed document the daemon sent (`render` is its
/// tests' form, from untyped JSON).
pub fn render_doc(d: &TunnelDoc) -> String {
    let t = &d.tunnel;
    let mut o = String::new();
    let up = t.paths_up;
    let session = match &t.security {
        Some(sec) => match sec.session_age_s {
            Some(a) => format!(
                "session {} old ({})",
                age(a),
                sec.cipher.as_deref().unwrap_or("-")
            ),
            None => "no session yet".into(),
        },
        None => "plaintext".into(),
    };
    let _ = writeln!(
        o,
        "tunnel {} ({}): {}, up {}, {session}, {up}/{} paths up",
        crate::status::dash(&d.name),
        crate::status::dash(&d.role),
        if up > 0 { "working" } else { "DOWN" },
        age(d.uptime_s),
        t.paths.len(),
    );
    let _ = writeln!(
        o,
        "{:<12} {:<5} {:>10} {:>10} {:>8} {:>7} {:>7}",
        "PATH", "STATE", "TX Mbit/s", "RX Mbit/s", "RTT ms", "TXLOSS", "RXLOSS"
    );
    let mut warnings = vec![];
    for p in &t.paths {
        let _ = writeln!(
            o,
            "{:<12} {:<5} {:>10} {:>10} {:>8} {:>7} {:>7}",
            p.name,
            p.state,
            mbit(p.rates.as_ref(), true),
            mbit(p.rates.as_ref(), false),
            crate::status::ms(p.rtt_ms),
            pct(p.tx_loss),
            pct(p.rx_loss),
        );
        path_warnings(p, &mut warnings);
    }
    let _ = writeln!(
        o,
        "{:<12} {:<5} {:>10} {:>10}",
        "total",
        "",
        mbit(d.rates.as_ref(), true),
        mbit(d.rates.as_ref(), false),
    );
    let drops: Vec<String> = t
        .drops
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    if !drops.is_empty() {
        let _ = writeln!(o, "drops: {}", drops.join(" "));
    }
    if t.security.is_none() {
        warnings.push("no encryption (insecure_no_encryption): anyone on a path can inject".into());
    }
    if !t.unmatched_peer_paths.is_empty() {
        let names: Vec<&str> = t
            .unmatched_peer_paths
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        warnings.push(format!(
            "peer paths with no match here: {} (paths pair by name)",
            names.join(", ")
        ));
    }
    for w in &warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let _ = writeln!(
        o,
        "(-v: estimators, queues, QoS classes, workers; --json: the document)"
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> serde_json::Value {
        json!({
            "name": "site-a", "role": "client", "uptime_s": 3725.0, "paths_up": 2,
            "security": {"session_age_s": 80.0, "cipher": "chacha20poly1305"},
            "rates": {"tx_bps": 98.5e6, "rx_bps": 1.2e6},
            "paths": [
                {"name": "wifi", "state": "up", "rtt_ms": 12.34, "tx_loss": 0.001,
                 "rx_loss": 0.0, "rates": {"tx_bps": 60e6, "rx_bps": 0.8e6},
                 "peer_hears_us": true, "receiving": true},
                {"name": "lte", "state": "up", "rtt_ms": 48.0, "tx_loss": 0.0,
                 "rx_loss": 0.02, "rates": {"tx_bps": 38.5e6, "rx_bps": 0.4e6},
                 "peer_hears_us": true, "receiving": true},
                {"name": "dsl", "state": "down", "last_heard_ms": 9000.0}
            ],
            "drops": {"aqm": 9, "replay": 0},
            "unmatched_peer_paths": [],
        })
    }

    #[test]
    fn one_screen_with_paths_total_drops_and_warnings() {
        let out = render(&doc());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "tunnel site-a (client): working, up 62 min, session 80 s old (chacha20poly1305), 2/3 paths up"
        );
        assert!(
            lines[2].starts_with("wifi") && lines[2].contains("60.0") && lines[2].contains("12.34")
        );
        assert!(lines[2].contains("0.1%"), "{}", lines[2]);
        assert!(lines[3].contains("38.5") && lines[3].contains("2.0%"));
        assert!(lines[4].starts_with("dsl") && lines[4].contains(" - "));
        assert!(
            lines[5].starts_with("total") && lines[5].contains("98.5") && lines[5].contains("1.2")
        );
        assert_eq!(lines[6], "drops: aqm=9");
        assert_eq!(lines[7], "warning: path dsl is down (last heard 9 s ago)");
        assert_eq!(lines.len(), 9);
        assert!(lines.iter().all(|l| l.len() < 100), "{out}");
    }

    #[test]
    fn a_healthy_tunnel_shows_no_drops_line_and_an_empty_one_no_panic() {
        let mut d = doc();
        d["paths"].as_array_mut().unwrap().pop();
        d["drops"] = json!({"aqm": 0});
        let out = render(&d);
        assert!(!out.contains("drops:") && !out.contains("warning"), "{out}");
        let bare = render(&json!({}));
        assert!(
            bare.starts_with("tunnel - (-): DOWN, up 0 s, plaintext, 0/0 paths up"),
            "{bare}"
        );
        assert!(bare.contains("warning: no encryption"));
    }

    #[test]
    fn a_path_heard_one_way_only_is_named() {
        let mut d = doc();
        d["paths"][1]["receiving"] = json!(false);
        // Never heard yet: a path coming up, no warning.
        assert!(!render(&d).contains("we do not hear"));
        d["paths"][1]["last_heard_ms"] = json!(4_000.0);
        let out = render(&d);
        assert!(
            out.contains(
                "warning: path lte: we do not hear the peer on it (its reports come on another path)"
            ),
            "{out}"
        );
        d["paths"][1]["peer_hears_us"] = json!(false);
        let out = render(&d);
        assert!(
            out.contains("warning: path lte: the peer does not hear us on it"),
            "{out}"
        );
    }

    #[test]
    fn ages_pick_a_short_unit() {
        assert_eq!(age(42.0), "42 s");
        assert_eq!(age(600.0), "10 min");
        assert_eq!(age(3.0 * 3600.0), "3.0 h");
        assert_eq!(age(5.0 * 86400.0), "5.0 d");
    }
}
