//! Prometheus metrics (`[metrics] listen`): a small HTTP endpoint that
//! answers `GET /metrics` with the daemon's status in the Prometheus text
//! exposition format (version 0.0.4), named after Prometheus conventions
//! (`mpt_path_transmit_bytes_total{path="wifi"}`, seconds and bits per
//! second as base units).
//!
//! The endpoint runs on its own thread and asks the daemon's control
//! socket for the status document at each scrape, as `mpt status` does, so
//! the event loop holds no HTTP state and a slow scraper cannot stall it.
//!
//! Why no `prometheus-client` crate: that crate keeps a registry of live
//! metric objects that the instrumented code updates as it runs. Here
//! every figure already lives in the status document (the same one `mpt
//! status --json` shows), and a scrape is a snapshot of it; a registry
//! would mean either atomics updated per packet in the data plane, or a
//! registry rebuilt from the document at each scrape, which is what this
//! module does without one. The text format is small (names, labels with
//! escaping, `# HELP`/`# TYPE`, counters with `_total`); its output is
//! checked by the reference parser of the Prometheus project (Python
//! `prometheus-client`, `tests/e2e/test_metrics.py`) and scraped by a real
//! Prometheus server in `test_monitoring.py`.
//!
//! Invariants: many connections at once, each bounded by a deadline for
//! its whole request and answer (`metrics_http.rs`), so a slow or idle
//! client never delays a scrape; every response closes its connection;
//! anything but `GET /metrics` is a 404 or 405; a daemon that does not
//! answer yields a 503 with the reason, and `mpt_up 0`; a `listen` that is
//! not a loopback address is warned about at start (no authentication).

use std::fmt::Write as _;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

use mpt_control::status::{Document, TunnelDoc};
use mpt_core::path::PathStatus;
use mpt_core::qos::ClassStatus;
use serde_json::Value;
use tracing::{info, warn};

/// Bind `listen` now (so that a taken port fails the start) and serve
/// scrapes from a thread for the daemon's lifetime.
pub fn spawn(listen: SocketAddr, control: PathBuf, tunnel: String) -> io::Result<()> {
    let l = TcpListener::bind(listen).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("metrics.listen {listen}: cannot listen: {e}"),
        )
    })?;
    if let Some(w) = exposure_warning(&listen) {
        warn!(tunnel = %tunnel, %listen, "{w}");
    }
    info!(tunnel = %tunnel, %listen, "serving Prometheus metrics at /metrics");
    std::thread::Builder::new()
        .name("mpt-metrics".into())
        .spawn(move || {
            let answer = |method: &str, path: &str| match (method, path) {
                ("GET", "/metrics") => match crate::status::fetch(&control) {
                    Ok(v) => ("200 OK", render(&v, &tunnel)),
                    Err(e) => ("503 Service Unavailable", unavailable(&tunnel, &e)),
                },
                (_, "/metrics") => ("405 Method Not Allowed", "only GET\n".into()),
                _ => ("404 Not Found", "metrics are at /metrics\n".into()),
            };
            if let Err(e) = crate::metrics_http::serve(l, &tunnel, answer) {
                warn!(tunnel = %tunnel, "metrics endpoint stopped: {e}");
            }
        })?;
    Ok(())
}

/// What to say of a `listen` address that others can reach: the endpoint
/// has no authentication, and what it serves (paths, peers' names and
/// addresses, counters) the root-only control socket otherwise protects.
pub fn exposure_warning(listen: &SocketAddr) -> Option<String> {
    (!listen.ip().is_loopback()).then(|| {
        format!(
            "metrics.listen {listen} is not a loopback address: anyone who reaches it reads the tunnel's status (paths, peers and their addresses, counters) without authentication; listen on 127.0.0.1 or a management address, or filter the port (docs/config.md, [metrics])"
        )
    })
}

fn unavailable(tunnel: &str, e: &io::Error) -> String {
    let mut o = String::new();
    let mut m = Metrics::new(&mut o, tunnel);
    m.family(
        "mpt_up",
        "gauge",
        "1 while the daemon answers its control socket",
    );
    m.sample("mpt_up", &[], 0.0);
    let _ = writeln!(
        o,
        "# daemon not answering: {}",
        e.to_string().replace('\n', " ")
    );
    o
}

/// Label value escaping of the text format: backslash, quote, newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes families and samples with the tunnel label on each.
pub(crate) struct Metrics<'a> {
    out: &'a mut String,
    tunnel: String,
}

impl<'a> Metrics<'a> {
    pub(crate) fn new(out: &'a mut String, tunnel: &str) -> Self {
        Self {
            out,
            tunnel: escape(tunnel),
        }
    }

    pub(crate) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    pub(crate) fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let _ = write!(self.out, "{name}{{tunnel=\"{}\"", self.tunnel);
        for (k, val) in labels {
            let _ = write!(self.out, ",{k}=\"{}\"", escape(val));
        }
        let _ = writeln!(self.out, "}} {v}");
    }
}

fn n(x: u64) -> Option<f64> {
    Some(x as f64)
}

/// Per-path families: (metric name, type, help, value from the path's
/// status).
type PathMetric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PathStatus) -> Option<f64>,
);

const PATH_METRICS: &[PathMetric] = &[
    (
        "mpt_path_up",
        "gauge",
        "1 while the path carries traffic",
        |p| Some(f64::from(u8::from(p.state == "up"))),
    ),
    (
        "mpt_path_transmit_packets_total",
        "counter",
        "Packets sent on the path",
        |p| n(p.tx_packets),
    ),
    (
        "mpt_path_transmit_bytes_total",
        "counter",
        "Bytes sent on the path (datagrams)",
        |p| n(p.tx_bytes),
    ),
    (
        "mpt_path_receive_packets_total",
        "counter",
        "Packets received on the path",
        |p| n(p.rx_packets),
    ),
    (
        "mpt_path_receive_bytes_total",
        "counter",
        "Bytes received on the path (datagrams)",
        |p| n(p.rx_bytes),
    ),
    (
        "mpt_path_receive_lost_packets_total",
        "counter",
        "Packets the peer sent on the path that never arrived",
        |p| n(p.rx_lost),
    ),
    (
        "mpt_path_ups_total",
        "counter",
        "Times the path came up",
        |p| n(p.ups),
    ),
    (
        "mpt_path_downs_total",
        "counter",
        "Times the path went down",
        |p| n(p.downs),
    ),
    (
        "mpt_path_rtt_seconds",
        "gauge",
        "Smoothed round-trip time (RFC 6298)",
        |p| p.rtt_ms.map(|x| x / 1e3),
    ),
    (
        "mpt_path_rtt_min_seconds",
        "gauge",
        "Lowest round-trip time measured",
        |p| p.rtt_min_ms.map(|x| x / 1e3),
    ),
    (
        "mpt_path_jitter_seconds",
        "gauge",
        "RFC 3550 interarrival jitter, peer to us",
        |p| p.jitter_ms.map(|x| x / 1e3),
    ),
    (
        "mpt_path_queueing_delay_seconds",
        "gauge",
        "One-way delay above its floor, peer to us",
        |p| p.rx_queueing_ms.map(|x| x / 1e3),
    ),
    (
        "mpt_path_receive_rate_bits_per_second",
        "gauge",
        "Delivery rate peer to us",
        |p| p.rx_rate_mbps.map(|x| x * 1e6),
    ),
    (
        "mpt_path_capacity_bits_per_second",
        "gauge",
        "Estimated capacity us to peer (path-aware sending)",
        |p| p.sending.as_ref()?.bandwidth_mbps.map(|x| x * 1e6),
    ),
    (
        "mpt_path_pacing_rate_bits_per_second",
        "gauge",
        "Rate the path is paced at",
        |p| p.sending.as_ref()?.pacing_mbps.map(|x| x * 1e6),
    ),
];

/// The status document as Prometheus text.
pub fn render(v: &Value, tunnel: &str) -> String {
    match Document::read(v) {
        Document::Concentrator(d) => crate::metrics_peers::render_doc(&d, tunnel),
        Document::Tunnel(d) => render_doc(&d, tunnel),
    }
}

/// [`render`] of a typed document.
pub fn render_doc(d: &TunnelDoc, tunnel: &str) -> String {
    let t = &d.tunnel;
    let mut o = String::new();
    let mut m = Metrics::new(&mut o, tunnel);
    m.family(
        "mpt_up",
        "gauge",
        "1 while the daemon answers its control socket",
    );
    m.sample("mpt_up", &[], 1.0);
    m.family(
        "mpt_build_info",
        "gauge",
        "The daemon's version, as a label",
    );
    m.sample("mpt_build_info", &[("version", &d.version)], 1.0);
    let c = &t.counters;
    for (name, x, help) in [
        (
            "mpt_transmit_packets_total",
            c.tx_packets,
            "Inner packets sent into the tunnel",
        ),
        (
            "mpt_transmit_bytes_total",
            c.tx_bytes,
            "Inner bytes sent into the tunnel",
        ),
        (
            "mpt_receive_packets_total",
            c.rx_packets,
            "Inner packets delivered from the tunnel",
        ),
        (
            "mpt_receive_bytes_total",
            c.rx_bytes,
            "Inner bytes delivered from the tunnel",
        ),
    ] {
        m.family(name, "counter", help);
        m.sample(name, &[], x as f64);
    }
    if !t.drops.is_empty() {
        m.family(
            "mpt_drops_total",
            "counter",
            "Packets dropped, by reason (docs/protocol.md)",
        );
        for (reason, x) in &t.drops {
            m.sample("mpt_drops_total", &[("reason", reason)], *x as f64);
        }
    }
    for (name, x, help) in [
        (
            "mpt_ecn_outer_ce_total",
            t.ecn.outer_ce,
            "Data datagrams whose outer header arrived CE (a path marked them, RFC 6040)",
        ),
        (
            "mpt_ecn_ce_carried_total",
            t.ecn.ce_carried,
            "Outer CE marks carried into the inner packets",
        ),
        (
            "mpt_ecn_ce_not_carried_total",
            t.ecn.ce_not_carried,
            "Outer CE marks on pieces of a packet completed late, or dropped again",
        ),
    ] {
        m.family(name, "counter", help);
        m.sample(name, &[], x as f64);
    }
    m.family(
        "mpt_ecn_ce_waiting",
        "gauge",
        "Outer CE marks on pieces still waiting for their release",
    );
    m.sample("mpt_ecn_ce_waiting", &[], t.ecn.ce_waiting as f64);
    m.family("mpt_paths_up", "gauge", "Paths that carry traffic");
    m.sample("mpt_paths_up", &[], t.paths_up as f64);
    let queue = t.queue.as_ref();
    for (x, name, help) in [
        (
            queue.map(|q| q.packets_now),
            "mpt_send_queue_packets",
            "Packets waiting in the send queue",
        ),
        (
            queue.map(|q| q.bytes_now),
            "mpt_send_queue_bytes",
            "Bytes waiting in the send queue",
        ),
        (
            Some(t.reorder.held_now),
            "mpt_reorder_held_packets",
            "Packets held to restore order",
        ),
        (
            Some(t.reorder.held_bytes),
            "mpt_reorder_held_bytes",
            "Bytes of packets held to restore order",
        ),
    ] {
        if let Some(x) = x {
            m.family(name, "gauge", help);
            m.sample(name, &[], x as f64);
        }
    }
    for (name, kind, help, get) in PATH_METRICS {
        let values: Vec<(&str, f64)> = t
            .paths
            .iter()
            .filter_map(|p| get(p).map(|x| (p.name.as_str(), x)))
            .collect();
        if values.is_empty() {
            continue;
        }
        m.family(name, kind, help);
        for (path, x) in values {
            m.sample(name, &[("path", path)], x);
        }
    }
    let owd: Vec<_> = t
        .paths
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.owd_above_min.as_ref()?)))
        .collect();
    if !owd.is_empty() {
        m.family(
            "mpt_path_owd_above_min_seconds",
            "gauge",
            "One-way delay peer to us above the path's minimum, by quantile since start (independent of clock offsets)",
        );
        for (path, a) in &owd {
            let q = &a.percentiles;
            for (quantile, x) in [
                ("0.5", q.p50_ms),
                ("0.9", q.p90_ms),
                ("0.99", q.p99_ms),
                ("1", q.max_ms),
            ] {
                m.sample(
                    "mpt_path_owd_above_min_seconds",
                    &[("path", path), ("quantile", quantile)],
                    x / 1e3,
                );
            }
        }
    }
    if !t.paths.is_empty() {
        m.family(
            "mpt_path_receive_lost_by_cause_packets_total",
            "counter",
            "Packets lost on the path toward us, by the receiver's judgement of the cause: link (random loss) or congestion (a queue overflowed)",
        );
        for p in &t.paths {
            let c = &p.rx_lost_by_cause;
            for (cause, x) in [("link", c.link), ("congestion", c.congestion)] {
                m.sample(
                    "mpt_path_receive_lost_by_cause_packets_total",
                    &[("path", &p.name), ("cause", cause)],
                    x as f64,
                );
            }
        }
    }
    if let Some(classes) = &t.qos {
        render_classes(&mut m, classes);
    }
    o
}

/// Per-class families of the QoS stage (`class` label).
fn render_classes(m: &mut Metrics<'_>, classes: &[ClassStatus]) {
    type Get = fn(&ClassStatus) -> u64;
    let families: [(&str, &str, &str, Get); 4] = [
        (
            "mpt_class_transmit_packets_total",
            "counter",
            "Inner packets of the class sent",
            |c| c.counters.packets,
        ),
        (
            "mpt_class_transmit_bytes_total",
            "counter",
            "Inner bytes of the class sent",
            |c| c.counters.bytes,
        ),
        (
            "mpt_class_queued_packets",
            "gauge",
            "Packets of the class waiting",
            |c| c.queued_packets as u64,
        ),
        (
            "mpt_class_ecn_marks_total",
            "counter",
            "Packets of the class that CoDel marked CE instead of dropping",
            |c| c.counters.marked_aqm,
        ),
    ];
    for (name, kind, help, get) in families {
        m.family(name, kind, help);
        for c in classes {
            m.sample(name, &[("class", &c.name)], get(c) as f64);
        }
    }
    m.family(
        "mpt_class_drops_total",
        "counter",
        "Packets of the class dropped, by reason (rate, full, share, aqm, expired)",
    );
    for c in classes {
        let k = &c.counters;
        for (reason, x) in [
            ("rate", k.dropped_rate),
            ("full", k.dropped_full),
            ("share", k.dropped_share),
            ("aqm", k.dropped_aqm),
            ("expired", k.dropped_expired),
        ] {
            m.sample(
                "mpt_class_drops_total",
                &[("class", &c.name), ("reason", reason)],
                x as f64,
            );
        }
    }
    m.family(
        "mpt_class_queueing_delay_seconds",
        "gauge",
        "Time from the TUN to the socket of the class's packets, by quantile since start",
    );
    for c in classes {
        let d = &c.delay;
        for (q, x) in [("0.5", d.p50_ms), ("0.99", d.p99_ms), ("1", d.max_ms)] {
            m.sample(
                "mpt_class_queueing_delay_seconds",
                &[("class", &c.name), ("quantile", q)],
                x / 1e3,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_counters_drops_and_paths_with_escaped_labels() {
        let v = json!({
            "version": "0.1.0",
            "counters": {"tx_packets": 10, "tx_bytes": 1500, "rx_packets": 7, "rx_bytes": 900},
            "drops": {"replay": 3, "bad_tag": 0},
            "paths_up": 1,
            "paths": [
                {"name": "wi\"fi", "state": "up", "tx_bytes": 100, "rtt_ms": 12.5,
                 "sending": {"bandwidth_mbps": 40.0, "pacing_mbps": null}},
                {"name": "lte", "state": "down", "tx_bytes": 5, "rtt_ms": null,
                 "rx_lost_by_cause": {"link": 4, "congestion": 1}},
            ],
        });
        let t = render(&v, "mpt0");
        assert!(t.contains(
            "mpt_path_receive_lost_by_cause_packets_total{tunnel=\"mpt0\",path=\"lte\",cause=\"link\"} 4\n"
        ), "{t}");
        assert!(t.contains("mpt_up{tunnel=\"mpt0\"} 1\n"), "{t}");
        assert!(t.contains("mpt_transmit_bytes_total{tunnel=\"mpt0\"} 1500\n"));
        assert!(t.contains("mpt_drops_total{tunnel=\"mpt0\",reason=\"replay\"} 3\n"));
        assert!(t.contains("mpt_path_up{tunnel=\"mpt0\",path=\"wi\\\"fi\"} 1\n"));
        assert!(t.contains("mpt_path_up{tunnel=\"mpt0\",path=\"lte\"} 0\n"));
        assert!(t.contains("mpt_path_rtt_seconds{tunnel=\"mpt0\",path=\"wi\\\"fi\"} 0.0125\n"));
        assert!(!t.contains("mpt_path_rtt_seconds{tunnel=\"mpt0\",path=\"lte\"}"));
        assert!(t.contains(
            "mpt_path_capacity_bits_per_second{tunnel=\"mpt0\",path=\"wi\\\"fi\"} 40000000\n"
        ));
        assert!(
            !t.contains("mpt_path_pacing_rate_bits_per_second"),
            "no value, no family"
        );
        // Every family is declared once, before its samples.
        assert_eq!(t.matches("# TYPE mpt_path_up gauge").count(), 1);
        assert!(!t.contains("mpt_class_"), "no QoS, no class families");
    }

    #[test]
    fn renders_classes() {
        let v = json!({
            "qos": [
                {"name": "voip", "packets": 5, "bytes": 800, "queued_packets": 0,
                 "dropped_rate": 2, "dropped_full": 0, "dropped_aqm": 0, "dropped_expired": 0,
                 "delay": {"p50_ms": 0.5, "p99_ms": 2.0, "max_ms": 3.0}},
            ],
        });
        let t = render(&v, "mpt0");
        assert!(
            t.contains("mpt_class_transmit_bytes_total{tunnel=\"mpt0\",class=\"voip\"} 800\n"),
            "{t}"
        );
        assert!(
            t.contains("mpt_class_drops_total{tunnel=\"mpt0\",class=\"voip\",reason=\"rate\"} 2\n")
        );
        assert!(t.contains(
            "mpt_class_queueing_delay_seconds{tunnel=\"mpt0\",class=\"voip\",quantile=\"0.99\"} 0.002\n"
        ));
    }

    #[test]
    fn escape_follows_the_text_format() {
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
