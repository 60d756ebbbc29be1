//! Prometheus metrics of a concentrator: its own counters, and per peer
//! (label `peer`, the peer's name) its state and counters. Read from the
//! same document as `mpt status --json`.
//!
//! Invariant: a peer that is configured but never connected still has its
//! samples (zeros), so that a dashboard sees it missing rather than absent.

use serde_json::Value;

use crate::metrics::Metrics;

const PEER_FAMILIES: [(&str, &str, &str, &str); 8] = [
    (
        "mpt_peer_connected",
        "gauge",
        "connected",
        "1 while the peer has a session",
    ),
    (
        "mpt_peer_paths_up",
        "gauge",
        "paths_up",
        "The peer's paths that are up",
    ),
    (
        "mpt_peer_transmit_packets_total",
        "counter",
        "tx_packets",
        "Inner packets sent to the peer",
    ),
    (
        "mpt_peer_transmit_bytes_total",
        "counter",
        "tx_bytes",
        "Inner bytes sent to the peer",
    ),
    (
        "mpt_peer_receive_packets_total",
        "counter",
        "rx_packets",
        "Inner packets from the peer",
    ),
    (
        "mpt_peer_receive_bytes_total",
        "counter",
        "rx_bytes",
        "Inner bytes from the peer",
    ),
    (
        "mpt_peer_drops_total",
        "counter",
        "drops",
        "Packets of the peer's tunnel dropped, all reasons",
    ),
    (
        "mpt_peer_source_not_allowed_total",
        "counter",
        "source_not_allowed",
        "Inner packets from the peer with a source outside its allowed IPs",
    ),
];

fn value(p: &Value, key: &str) -> f64 {
    match p.get(key) {
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(v) => v.as_f64().unwrap_or(0.0),
        None => 0.0,
    }
}

/// The concentrator's status document as Prometheus text.
pub fn render(v: &Value, tunnel: &str) -> String {
    let mut o = String::new();
    let mut m = Metrics::new(&mut o, tunnel);
    m.family(
        "mpt_up",
        "gauge",
        "1 while the daemon answers its control socket",
    );
    m.sample("mpt_up", &[], 1.0);
    m.family(
        "mpt_peers_configured",
        "gauge",
        "Peers in the concentrator's configuration",
    );
    m.sample("mpt_peers_configured", &[], value(v, "peers_configured"));
    m.family("mpt_peers_connected", "gauge", "Peers with a session");
    m.sample("mpt_peers_connected", &[], value(v, "peers_connected"));
    m.family(
        "mpt_drops_total",
        "counter",
        "Datagrams and packets dropped before reaching any peer, by reason",
    );
    for (reason, n) in v["drops"].as_object().into_iter().flatten() {
        m.sample(
            "mpt_drops_total",
            &[("reason", reason)],
            n.as_f64().unwrap_or(0.0),
        );
    }
    let peers: Vec<&Value> = v["peers"].as_array().into_iter().flatten().collect();
    for (name, kind, key, help) in PEER_FAMILIES {
        m.family(name, kind, help);
        for p in &peers {
            let peer = p["name"].as_str().unwrap_or("");
            m.sample(name, &[("peer", peer)], value(p, key));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn every_peer_has_its_samples_with_a_peer_label() {
        let v = json!({
            "role": "concentrator", "peers_configured": 2, "peers_connected": 1,
            "drops": {"unknown_peer": 3},
            "peers": [
                {"name": "site-1", "connected": true, "paths_up": 2, "tx_bytes": 100},
                {"name": "site-2", "connected": false}
            ]
        });
        let t = crate::metrics::render(&v, "mpc0");
        assert!(
            t.contains("mpt_peers_connected{tunnel=\"mpc0\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("mpt_drops_total{tunnel=\"mpc0\",reason=\"unknown_peer\"} 3\n"));
        assert!(t.contains("mpt_peer_connected{tunnel=\"mpc0\",peer=\"site-1\"} 1\n"));
        assert!(t.contains("mpt_peer_connected{tunnel=\"mpc0\",peer=\"site-2\"} 0\n"));
        assert!(t.contains("mpt_peer_transmit_bytes_total{tunnel=\"mpc0\",peer=\"site-1\"} 100\n"));
        assert!(t.contains("mpt_peer_paths_up{tunnel=\"mpc0\",peer=\"site-2\"} 0\n"));
    }
}
