//! `mpt path`: an operator's changes to one path of a running tunnel (take
//! it out of use and back, or change one of its settings), the same for
//! the daemon of one tunnel and for a concentrator's peer.
//!
//! Invariants: values are checked here whatever the CLI checked; a
//! refusal names what is allowed; the tunnel is changed only when the
//! whole request is valid.

use mpt_core::tunnel::Tunnel;
use serde_json::{json, Value};

/// What to change on a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathChange {
    /// Out of use (`down`: it carries no data, keeps its probes) or back.
    Admin { down: bool },
    /// `rate_mbit N|none`, `weight N`, `backup true|false`, `remote ADDR:PORT`.
    Set { key: String, value: String },
}

/// Apply `change` to the path named `name` of `t`: the answer to send, or
/// the refusal.
pub fn apply(t: &mut Tunnel, name: &str, change: &PathChange) -> Result<Value, String> {
    match change {
        PathChange::Admin { down } => {
            t.set_admin_down(name, *down)?;
            let word = if *down { "down" } else { "up" };
            Ok(json!({ "ok": true, "path": name, "admin": word }))
        }
        PathChange::Set { key, value } => {
            match (key.as_str(), value.as_str()) {
                ("rate_mbit", "none") => t.set_rate_cap(name, None),
                ("rate_mbit", v) => match v.parse::<u64>() {
                    Ok(m) if (1..=1_000_000).contains(&m) => {
                        t.set_rate_cap(name, Some(m * 1_000_000))
                    }
                    _ => Err(format!("rate_mbit '{v}' is not 1 to 1000000 or none")),
                },
                ("remote", v) => match v.parse::<std::net::SocketAddr>() {
                    Ok(a) => t.set_remote(name, a),
                    Err(_) => Err(format!("remote '{v}' is not an address:port")),
                },
                ("weight", v) => match v.parse::<u32>() {
                    Ok(w) => t.set_weight(name, w),
                    Err(_) => Err(format!("weight '{v}' is not 1 to 1000")),
                },
                ("backup", "true") => t.set_backup(name, true),
                ("backup", "false") => t.set_backup(name, false),
                _ => Err(format!(
                    "cannot set '{key}' to '{value}' (rate_mbit N|none, weight N, backup true|false, remote ADDR:PORT)"
                )),
            }?;
            Ok(json!({ "ok": true, "path": name, key.as_str(): value }))
        }
    }
}
