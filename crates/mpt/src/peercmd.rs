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

use serde_json::json;

use crate::status::{ask, bytes};
use mpt_control::status::{ConcentratorDoc, PeerDoc, ShardDoc, TunnelDoc};

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
    let doc: PeerDoc = serde_json::from_value(v).unwrap_or_default();
    let mut o = String::new();
    let _ = writeln!(o, "{}", peer_line(&doc));
    let _ = writeln!(o, "  key {}\n", crate::status::dash(&doc.public_key));
    // The peer's tunnel in the very view of a single tunnel's status.
    match doc.tunnel {
        Some(tunnel) => {
            let view = TunnelDoc {
                name: doc.name.clone(),
                role: "peer of this concentrator".into(),
                addresses: doc.allowed_ips.clone(),
                tunnel,
                ..TunnelDoc::default()
            };
            let _ = write!(o, "{}", crate::status::render_doc(&view));
        }
        None => {
            let _ = writeln!(o, "  no tunnel yet (the peer never connected)");
        }
    }
    print!("{o}");
    Ok(())
}

fn peer_line(p: &PeerDoc) -> String {
    format!(
        "peer {} [{}]: {}, paths {}/{} up, tx {} ({} packets), rx {} ({} packets), drops {}, source not allowed {}",
        crate::status::dash(&p.name),
        p.allowed_ips.join(" "),
        if p.connected {
            "connected"
        } else {
            "not connected"
        },
        p.paths_up,
        p.paths,
        bytes(p.tx_bytes),
        p.tx_packets,
        bytes(p.rx_bytes),
        p.rx_packets,
        p.drops,
        p.source_not_allowed,
    )
}

/// `mpt status` of a concentrator: a header, then one line per peer.
#[cfg(test)] // the daemons' documents are read once, [`Document::read`]
pub fn render(v: &serde_json::Value) -> String {
    render_doc(&serde_json::from_value(v.clone()).unwrap_or_default())
}

/// The output, from the typed document the daemon sent (`render` is its
/// tests' form, from untyped JSON).
pub fn render_doc(d: &ConcentratorDoc) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "concentrator {}: {} of {} peers connected, up {:.0} s, addresses {}",
        crate::status::dash(&d.name),
        d.peers_connected,
        d.peers_configured,
        d.uptime_s,
        d.addresses.join(" "),
    );
    if !d.drops.is_empty() {
        let list: Vec<String> = d.drops.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(o, "  dropped before any peer: {}", list.join(", "));
    }
    let _ = write!(o, "{}", shards_line(&d.shards));
    if let Some(io) = &d.io {
        let _ = writeln!(o, "  {}", crate::status::io_line(io));
    }
    for p in &d.peers {
        let _ = writeln!(o, "  {}", peer_line(p));
    }
    o
}

/// The threads a concentrator spreads its peers over (none with one).
fn shards_line(list: &[ShardDoc]) -> String {
    if list.len() < 2 {
        return String::new();
    }
    let packets: u64 = list.iter().map(|s| s.handoffs.packets_out).sum();
    let datagrams: u64 = list.iter().map(|s| s.handoffs.datagrams_out).sum();
    let mut o = format!(
        "  shards: {} threads, peer id mod {}; read by one shard for another: {packets} packets, {datagrams} datagrams\n",
        list.len(),
        list.len(),
    );
    for s in list {
        if let Some(e) = &s.error {
            let _ = writeln!(o, "  shard {}: {e}", s.shard);
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
