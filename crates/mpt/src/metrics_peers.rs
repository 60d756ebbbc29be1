//! Prometheus metrics of a concentrator: its own counters, and per peer
//! (label `peer`, the peer's name) its state and counters. Read from the
//! same document as `mpt status --json`.
//!
//! Invariant: a peer that is configured but never connected still has its
//! samples (zeros), so that a dashboard sees it missing rather than absent.

use mpt_control::status::{ConcentratorDoc, PeerDoc};

use crate::metrics::Metrics;

type Get = fn(&PeerDoc) -> f64;

const PEER_FAMILIES: [(&str, &str, &str, Get); 8] = [
    (
        "mpt_peer_connected",
        "gauge",
        "1 while the peer has a session",
        |p| f64::from(u8::from(p.connected)),
    ),
    (
        "mpt_peer_paths_up",
        "gauge",
        "The peer's paths that are up",
        |p| p.paths_up as f64,
    ),
    (
        "mpt_peer_transmit_packets_total",
        "counter",
        "Inner packets sent to the peer",
        |p| p.tx_packets as f64,
    ),
    (
        "mpt_peer_transmit_bytes_total",
        "counter",
        "Inner bytes sent to the peer",
        |p| p.tx_bytes as f64,
    ),
    (
        "mpt_peer_receive_packets_total",
        "counter",
        "Inner packets from the peer",
        |p| p.rx_packets as f64,
    ),
    (
        "mpt_peer_receive_bytes_total",
        "counter",
        "Inner bytes from the peer",
        |p| p.rx_bytes as f64,
    ),
    (
        "mpt_peer_drops_total",
        "counter",
        "Packets of the peer's tunnel dropped, all reasons",
        |p| p.drops as f64,
    ),
    (
        "mpt_peer_source_not_allowed_total",
        "counter",
        "Inner packets from the peer with a source outside its allowed IPs",
        |p| p.source_not_allowed as f64,
    ),
];

/// The output, from the typed document the daemon sent (`render` is its
/// tests' form, from untyped JSON).
pub fn render_doc(d: &ConcentratorDoc, tunnel: &str) -> String {
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
    m.sample("mpt_peers_configured", &[], d.peers_configured as f64);
    m.family("mpt_peers_connected", "gauge", "Peers with a session");
    m.sample("mpt_peers_connected", &[], d.peers_connected as f64);
    m.family(
        "mpt_drops_total",
        "counter",
        "Datagrams and packets dropped before reaching any peer, by reason",
    );
    for (reason, n) in &d.drops {
        m.sample("mpt_drops_total", &[("reason", reason)], *n as f64);
    }
    for (name, kind, help, get) in PEER_FAMILIES {
        m.family(name, kind, help);
        for p in &d.peers {
            m.sample(name, &[("peer", &p.name)], get(p));
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
