//! A client's further servers, in order of preference, and when to move
//! between them (more than one concentrator, `docs/deploy.md`).
//!
//! ```toml
//! [[server]]                    # tried after the one of [security]/[[path]]
//! name = "dc2"
//! public_key = "base64"         # that server's `mpt pubkey`
//! preshared_key_file = "psk2"   # optional
//! remotes = ["203.0.113.1:5001", "[2001:db8::2]:5002"]   # one per [[path]], in order
//!
//! [failover]
//! after_ms = 1000               # no session or no path up this long: next server
//! return_after_s = 0            # on another server this long: try the first again (0: stay)
//! ```
//!
//! Invariants of the result: every server has a valid key and exactly one
//! remote per path, of that path's IP family; `after_ms` exceeds the
//! paths' `dead_ms` is not required (a server that is down stops answering
//! handshakes too), but it is at least 100 ms.

use std::net::SocketAddr;
use std::path::Path;

use mpt_core::crypto::keys::{PresharedKey, PublicKey};
use toml_edit::Table;

use crate::reader::{Ctx, TableReader};
use crate::security::{read_psk, read_public_key};
use crate::PathSection;

pub const SERVER_KEYS: &[&str] = &[
    "name",
    "public_key",
    "preshared_key",
    "preshared_key_file",
    "remotes",
];
pub const FAILOVER_KEYS: &[&str] = &["after_ms", "return_after_s"];

/// Default time without a session or a path up before the next server.
pub const FAILOVER_AFTER_MS: u64 = 1_000;

/// A further server of a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSection {
    pub name: String,
    pub public_key: PublicKey,
    pub psk: Option<PresharedKey>,
    /// One per path, in the order of the `[[path]]` tables.
    pub remotes: Vec<SocketAddr>,
}

/// When to move between servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverSection {
    pub after_ms: u64,
    /// 0: stay on a server while it works.
    pub return_after_s: u64,
}

impl Default for FailoverSection {
    fn default() -> Self {
        Self {
            after_ms: FAILOVER_AFTER_MS,
            return_after_s: 0,
        }
    }
}

/// Read the `[[server]]` tables against the client's `paths`.
pub fn read_servers(
    ctx: &mut Ctx<'_>,
    tables: &[&Table],
    paths: &[PathSection],
    file: &Path,
) -> Vec<ServerSection> {
    let mut out = vec![];
    for (i, t) in tables.iter().enumerate() {
        let r = TableReader::new(t, format!("server[{}]", i + 1), SERVER_KEYS);
        let name = r
            .string(ctx, "name")
            .unwrap_or_else(|| format!("server{}", i + 2));
        let key = read_public_key(ctx, &r);
        let psk = read_psk(ctx, &r, file);
        let texts = r.strings(ctx, "remotes");
        let texts = r.required(ctx, "remotes", texts).unwrap_or_default();
        let mut remotes = vec![];
        for (j, s) in texts.iter().enumerate() {
            let key = format!("{}[{}]", r.key("remotes"), j + 1);
            match s.parse::<SocketAddr>() {
                Ok(a) if a.port() == 0 || a.ip().is_unspecified() => ctx.error(
                    r.span("remotes"),
                    &key,
                    format!("'{s}' needs a specific address and a port"),
                ),
                Ok(a) => {
                    if let Some(p) = paths.get(j) {
                        if p.local.is_ipv4() != a.is_ipv4() {
                            ctx.error(
                                r.span("remotes"),
                                &key,
                                format!(
                                    "'{s}' is not of path '{}''s IP family (local {})",
                                    p.name, p.local
                                ),
                            );
                        }
                    }
                    remotes.push(a);
                }
                Err(_) => ctx.error(
                    r.span("remotes"),
                    &key,
                    format!("'{s}' is not an address:port (a literal address; [v6]:port)"),
                ),
            }
        }
        if !texts.is_empty() && texts.len() != paths.len() {
            ctx.error(
                r.span("remotes"),
                &r.key("remotes"),
                format!(
                    "{} remote(s) for {} path(s): give one per [[path]], in their order",
                    texts.len(),
                    paths.len()
                ),
            );
        }
        r.finish(ctx);
        if let (Some(k), true) = (key, remotes.len() == paths.len()) {
            out.push(ServerSection {
                name,
                public_key: k,
                psk,
                remotes,
            });
        }
    }
    out
}

/// Read `[failover]`.
pub fn read_failover(ctx: &mut Ctx<'_>, t: Option<&Table>) -> FailoverSection {
    let empty = Table::new();
    let r = TableReader::new(t.unwrap_or(&empty), "failover", FAILOVER_KEYS);
    let after_ms = r
        .int(ctx, "after_ms", (100, 600_000))
        .map_or(FAILOVER_AFTER_MS, |v| v as u64);
    let return_after_s = r
        .int(ctx, "return_after_s", (0, 30 * 86_400))
        .map_or(0, |v| v as u64);
    r.finish(ctx);
    FailoverSection {
        after_ms,
        return_after_s,
    }
}
