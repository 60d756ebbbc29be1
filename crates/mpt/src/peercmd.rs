//! A concentrator's peers from the command line: `mpt peer add|remove`
//! over the control socket, and the human views of `mpt status` for a
//! concentrator (one line per peer; `--peer KEY|NAME` for one in full).
//!
//! Invariants: a daemon's refusal (a clash of keys or prefixes, an unknown
//! peer) comes back as an error and exits 1; a pre-shared key file is read
//! here with the same mode check as the configuration's, and only the key
//! crosses the control socket (mode 0600, root's).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use serde_json::{json, Value};

use crate::status::{ask, bytes};

/// `mpt peer add`: a new peer of a running concentrator.
pub fn add(
    sock: &Path,
    name: Option<&str>,
    public_key: &str,
    allowed_ips: &[String],
    routes: &[String],
    psk_file: Option<&Path>,
    json_out: bool,
) -> io::Result<()> {
    let mut spec = json!({
        "public_key": public_key,
        "allowed_ips": allowed_ips,
        "routes": routes,
    });
    if let Some(n) = name {
        spec["name"] = json!(n);
    }
    if let Some(f) = psk_file {
        mpt_config::check_private_mode(f, "a pre-shared key").map_err(io::Error::other)?;
        let text = std::fs::read_to_string(f)
            .map_err(|e| io::Error::other(format!("cannot read {}: {e}", f.display())))?;
        spec["preshared_key"] = json!(text.trim());
    }
    let v = ask(sock, &mpt_control::Request::PeerAdd { peer: spec })?;
    if json_out {
        println!("{v}");
    } else {
        let a: mpt_control::PeerAdded = mpt_control::answer(v).map_err(io::Error::other)?;
        println!("peer {} added (id {})", a.name, a.id);
    }
    Ok(())
}

/// `mpt peer remove KEY|NAME`.
pub fn remove(sock: &Path, who: &str, json_out: bool) -> io::Result<()> {
    let v = ask(sock, &mpt_control::Request::PeerRemove { peer: who.into() })?;
    if json_out {
        println!("{v}");
    } else {
        let r: mpt_control::PeerRemoved = mpt_control::answer(v).map_err(io::Error::other)?;
        println!("peer {} removed", r.removed);
    }
    Ok(())
}

/// `mpt status --peer KEY|NAME`.
pub fn show_peer(sock: &Path, who: &str, json_out: bool) -> io::Result<()> {
    let v = ask(sock, &mpt_control::Request::PeerStatus { peer: who.into() })?;
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
        );
        return Ok(());
    }
    let mut o = String::new();
    let _ = writeln!(o, "{}", peer_line(&v));
    let _ = writeln!(o, "  key {}\n", v["public_key"].as_str().unwrap_or("-"));
    // The peer's tunnel in the very view of a single tunnel's status.
    if let Value::Object(mut doc) = v["tunnel"].clone() {
        doc.insert("name".into(), v["name"].clone());
        doc.insert("role".into(), Value::from("peer of this concentrator"));
        doc.insert("addresses".into(), v["allowed_ips"].clone());
        let _ = write!(o, "{}", crate::status::render(&Value::Object(doc)));
    } else {
        let _ = writeln!(o, "  no tunnel yet (the peer never connected)");
    }
    print!("{o}");
    Ok(())
}

fn peer_line(p: &Value) -> String {
    let n = |k: &str| p.get(k).and_then(Value::as_u64).unwrap_or(0);
    format!(
        "peer {} [{}]: {}, paths {}/{} up, tx {} ({} packets), rx {} ({} packets), drops {}, source not allowed {}",
        p["name"].as_str().unwrap_or("-"),
        p["allowed_ips"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        if p["connected"] == json!(true) {
            "connected"
        } else {
            "not connected"
        },
        n("paths_up"),
        n("paths"),
        bytes(n("tx_bytes")),
        n("tx_packets"),
        bytes(n("rx_bytes")),
        n("rx_packets"),
        n("drops"),
        n("source_not_allowed"),
    )
}

/// `mpt status` of a concentrator: a header, then one line per peer.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "concentrator {}: {} of {} peers connected, up {:.0} s, addresses {}",
        v["name"].as_str().unwrap_or("-"),
        v["peers_connected"],
        v["peers_configured"],
        v["uptime_s"].as_f64().unwrap_or(0.0),
        v["addresses"]
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default(),
    );
    if let Some(d) = v["drops"].as_object().filter(|d| !d.is_empty()) {
        let list: Vec<String> = d.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(o, "  dropped before any peer: {}", list.join(", "));
    }
    let _ = write!(o, "{}", shards_line(v));
    if v["io"].is_object() {
        let _ = writeln!(o, "  {}", crate::status::io_line(&v["io"]));
    }
    for p in v["peers"].as_array().into_iter().flatten() {
        let _ = writeln!(o, "  {}", peer_line(p));
    }
    o
}

/// The threads a concentrator spreads its peers over (none with one).
fn shards_line(v: &Value) -> String {
    let list = v["shards"].as_array().cloned().unwrap_or_default();
    if list.len() < 2 {
        return String::new();
    }
    let sum = |k: &str| -> u64 { list.iter().filter_map(|s| s["handoffs"][k].as_u64()).sum() };
    let mut o = format!(
        "  shards: {} threads, peer id mod {}; read by one shard for another: {} packets, {} datagrams\n",
        list.len(),
        list.len(),
        sum("packets_out"),
        sum("datagrams_out"),
    );
    for s in &list {
        if let Some(e) = s["error"].as_str() {
            let _ = writeln!(o, "  shard {}: {e}", s["shard"]);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_summed_on_one_line_and_a_silent_one_is_named() {
        let v = json!({
            "name": "mpt0", "peers_connected": 0, "peers_configured": 0, "uptime_s": 1.0,
            "addresses": [], "drops": {}, "peers": [],
            "shards": [
                {"shard": 0, "handoffs": {"packets_out": 3, "datagrams_out": 1, "taken": 2}},
                {"shard": 1, "handoffs": {"packets_out": 2, "datagrams_out": 1, "taken": 4}},
                {"shard": 2, "error": "shard 2 did not answer within 2s"}
            ]
        });
        let text = render(&v);
        assert!(
            text.contains("shards: 3 threads, peer id mod 3; read by one shard for another: 5 packets, 2 datagrams"),
            "{text}"
        );
        assert!(text.contains("shard 2: shard 2 did not answer"), "{text}");
    }

    #[test]
    fn one_line_per_peer_with_its_state() {
        let v = json!({
            "name": "mpt0", "peers_connected": 1, "peers_configured": 2, "uptime_s": 3.0,
            "addresses": ["10.200.0.1/16"], "drops": {"unknown_peer": 4},
            "peers": [
                {"name": "a", "allowed_ips": ["10.200.1.2/32"], "connected": true,
                 "paths_up": 2, "paths": 2, "tx_bytes": 2048, "tx_packets": 2,
                 "rx_bytes": 0, "rx_packets": 0, "drops": 0, "source_not_allowed": 1},
                {"name": "b", "allowed_ips": ["10.200.2.2/32"], "connected": false}
            ]
        });
        let text = render(&v);
        assert!(text.contains("1 of 2 peers connected"), "{text}");
        assert!(
            !text.contains("shards"),
            "one shard is not worth a line: {text}"
        );
        assert!(
            text.contains("dropped before any peer: unknown_peer 4"),
            "{text}"
        );
        assert!(
            text.contains("peer a [10.200.1.2/32]: connected, paths 2/2 up"),
            "{text}"
        );
        assert!(text.contains("source not allowed 1"), "{text}");
        assert!(
            text.contains("peer b [10.200.2.2/32]: not connected, paths 0/0 up"),
            "{text}"
        );
    }
}
