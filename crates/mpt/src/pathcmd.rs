//! `mpt path`: list the paths of a running tunnel, or take one out of use
//! (`down`: it carries no data, keeps its probes) and back (`up`), over
//! the control socket.
//!
//! Invariants: a daemon's refusal (an unknown path name) comes back as an
//! error naming the paths there are, and exits 1 like any runtime failure;
//! nothing is changed on the client side.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use mpt_control::status::{Document, PeerDoc};
use mpt_core::path::PathStatus;

use crate::status::{ask, fetch, ms, rates};

/// `mpt path list`: one line per path (or the paths' JSON); on a
/// concentrator, of the peer named.
pub fn list(sock: &Path, peer: Option<&str>, json: bool) -> io::Result<()> {
    let paths: Vec<PathStatus> = match peer {
        None => match Document::read(&fetch(sock)?) {
            Document::Concentrator(_) => {
                return Err(io::Error::other(
                    "a concentrator's paths are its peers': name the peer (mpt path --peer NAME|KEY list)",
                ))
            }
            Document::Tunnel(d) => d.tunnel.paths,
        },
        Some(p) => {
            let v = ask(
                sock,
                &mpt_control::Request::PeerStatus { peer: p.into() },
            )?;
            let d: PeerDoc = serde_json::from_value(v).unwrap_or_default();
            d.tunnel.map(|t| t.paths).unwrap_or_default()
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&paths).map_err(io::Error::other)?
        );
    } else {
        print!("{}", render(&paths));
    }
    Ok(())
}

fn render(paths: &[PathStatus]) -> String {
    let mut o = String::new();
    for p in paths {
        let mut state = p.state.to_string();
        if p.admin_down {
            state.push_str(", admin down");
        }
        if p.backup {
            state.push_str(", backup");
        }
        let _ = writeln!(
            o,
            "{:<12} {:<22} {} -> {}  rtt {} ms  {}",
            p.name,
            state,
            p.local,
            p.remote,
            ms(p.rtt_ms),
            rates(p.rates.as_ref()),
        );
    }
    o
}

/// The value of `mpt path NAME set KEY VALUE` as the daemon takes it, or
/// what is wrong with it (a usage error).
pub fn set_value(key: &str, value: &str) -> Result<String, String> {
    match (key, value) {
        ("rate_mbit", "none" | "off") => Ok("none".into()),
        ("rate_mbit", v) => match v.parse::<u64>() {
            Ok(m) if (1..=1_000_000).contains(&m) => Ok(m.to_string()),
            _ => Err(format!(
                "rate_mbit must be 1 to 1000000 (Mbit/s) or none, not '{v}'"
            )),
        },
        ("weight", v) => match v.parse::<u32>() {
            Ok(w) if (1..=1000).contains(&w) => Ok(w.to_string()),
            _ => Err(format!("weight must be 1 to 1000, not '{v}'")),
        },
        ("backup", "true" | "on" | "yes") => Ok("true".into()),
        ("backup", "false" | "off" | "no") => Ok("false".into()),
        ("remote", v) => match v.parse::<std::net::SocketAddr>() {
            Ok(a) => Ok(a.to_string()),
            Err(_) => Err(format!(
                "remote must be an address:port (like 192.0.2.1:5000 or [2001:db8::1]:5000), not '{v}'"
            )),
        },
        (k, v) => Err(format!(
            "'{k} {v}': say `rate_mbit N|none`, `weight N`, `backup true|false` or `remote ADDR:PORT`"
        )),
    }
}

/// "peer NAME: " before a line about a concentrator peer's path.
fn of_peer(peer: Option<&str>) -> String {
    peer.map(|p| format!("peer {p}: ")).unwrap_or_default()
}

/// `mpt path NAME set KEY VALUE` with a value from [`set_value`].
pub fn set(
    sock: &Path,
    peer: Option<&str>,
    name: &str,
    key: &str,
    value: &str,
    json: bool,
) -> io::Result<()> {
    let v = ask(
        sock,
        &mpt_control::Request::PathSet {
            peer: peer.map(str::to_string),
            path: name.into(),
            key: key.into(),
            value: value.into(),
        },
    )?;
    if json {
        println!("{v}");
    } else {
        println!("{}path {name}: {key} set to {value}", of_peer(peer));
    }
    Ok(())
}

/// `mpt path NAME up|down`.
pub fn admin(
    sock: &Path,
    peer: Option<&str>,
    name: &str,
    action: &str,
    json: bool,
) -> io::Result<()> {
    if name.chars().any(char::is_whitespace) || name.is_empty() {
        return Err(io::Error::other(format!(
            "'{name}' cannot be a path name (names have no spaces)"
        )));
    }
    let v = ask(
        sock,
        &mpt_control::Request::PathAdmin {
            peer: peer.map(str::to_string),
            path: name.into(),
            down: action == "down",
        },
    )?;
    if json {
        println!("{v}");
    } else {
        println!("{}path {name} is administratively {action}", of_peer(peer));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_values_are_checked_before_asking() {
        assert_eq!(set_value("rate_mbit", "50").unwrap(), "50");
        assert_eq!(set_value("rate_mbit", "off").unwrap(), "none");
        assert!(set_value("rate_mbit", "0").is_err());
        assert!(set_value("rate_mbit", "fast").is_err());
        assert_eq!(set_value("backup", "on").unwrap(), "true");
        assert_eq!(set_value("weight", "3").unwrap(), "3");
        assert!(set_value("weight", "0").unwrap_err().contains("1 to 1000"));
        assert!(set_value("backup", "maybe")
            .unwrap_err()
            .contains("backup true|false"));
    }

    #[test]
    fn list_shows_admin_and_backup_state() {
        let paths: Vec<PathStatus> = serde_json::from_value(json!([
            {"name": "wifi", "state": "up", "admin_down": true, "backup": false,
             "local": "10.0.0.1:1", "remote": "10.0.0.2:1", "rtt_ms": 5.0},
            {"name": "lte", "state": "down", "admin_down": false, "backup": true,
             "local": "10.1.0.1:1", "remote": "10.1.0.2:1"},
        ]))
        .unwrap();
        let t = render(&paths);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("wifi") && lines[0].contains("up, admin down"),
            "{t}"
        );
        assert!(lines[1].contains("down, backup") && lines[1].contains("10.1.0.1:1 -> 10.1.0.2:1"));
    }
}
