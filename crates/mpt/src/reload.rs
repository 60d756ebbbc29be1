//! Reloading the configuration of a running tunnel (SIGHUP, `mpt reload`).
//!
//! The file is read and validated again. What can change without touching
//! the interface, the sockets or the session is applied at once:
//!
//! * per path (matched by name): `rate_mbit`, `backup`, `keepalive_ms`,
//!   `dead_ms`;
//! * `[scheduler] queue_ms`;
//! * `[qos]`: the classes (what waits is classified again into the new
//!   ones).
//!
//! Everything else (the tunnel's name, addresses and MTU, the role, keys,
//! paths added, removed or moved, routes, the reorder buffer, the
//! scheduler's mode, metrics) is listed as needing a restart and left as it
//! runs.
//!
//! Invariants: a file with any error changes nothing (the errors are
//! reported, the tunnel goes on); `running` is always what is in effect,
//! so a later reload reports again what still waits for a restart.

use mpt_config::{Config, PathSection};
use mpt_core::tunnel::Tunnel;
use mpt_core::{Nanos, NANOS_PER_MS};
use serde_json::{json, Value};
use tracing::{info, warn};

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Changes in effect now, as `key: old -> new`.
    pub applied: Vec<String>,
    /// Keys that differ from the running tunnel and need a restart.
    pub needs_restart: Vec<String>,
}

impl Outcome {
    pub fn to_json(&self) -> Value {
        json!({ "ok": true, "applied": self.applied, "needs_restart": self.needs_restart })
    }
}

/// The running configuration and where it came from.
pub struct Reloader {
    running: Config,
}

/// A path as far as a reload cannot change it.
fn fixed(p: &PathSection) -> PathSection {
    PathSection {
        // A remote given as a hostname is compared as written: a reload
        // does not resolve it again.
        remote: if p.remote_host.is_some() {
            None
        } else {
            p.remote
        },
        rate_mbit: None,
        backup: false,
        keepalive_ms: 0,
        dead_ms: 0,
        ..p.clone()
    }
}

impl Reloader {
    pub fn new(running: Config) -> Self {
        Self { running }
    }

    /// Read the file again and apply what can be applied to `t`.
    pub fn reload(&mut self, t: &mut Tunnel, now: Nanos) -> Result<Outcome, String> {
        let new = Config::load(&self.running.file).map_err(|errs| {
            let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
            format!(
                "{} error(s); nothing changed:\n{}",
                list.len(),
                list.join("\n")
            )
        })?;
        let mut out = Outcome::default();
        self.restart_keys(&new, &mut out);
        self.apply_paths(&new, t, &mut out);
        if new.queue_ms != self.running.queue_ms
            && !out.needs_restart.iter().any(|k| k == "scheduler")
        {
            t.set_queue_max(new.queue_ms * NANOS_PER_MS);
            out.applied.push(format!(
                "scheduler.queue_ms: {} -> {}",
                self.running.queue_ms, new.queue_ms
            ));
            self.running.queue_ms = new.queue_ms;
        }
        if new.qos != self.running.qos && !out.needs_restart.iter().any(|k| k == "scheduler") {
            t.set_qos(new.qos.clone(), now);
            let names = |q: &Option<mpt_core::qos::QosConfig>| {
                q.as_ref().map_or("off".to_string(), |q| {
                    q.classes
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
            };
            out.applied.push(format!(
                "qos: {} -> {}",
                names(&self.running.qos),
                names(&new.qos)
            ));
            self.running.qos = new.qos;
        }
        Ok(out)
    }

    /// Sections a reload cannot change.
    fn restart_keys(&self, new: &Config, out: &mut Outcome) {
        let r = &self.running;
        let mut differs = |key: &str, same: bool| {
            if !same {
                out.needs_restart.push(key.to_string());
            }
        };
        differs("tunnel", r.tunnel == new.tunnel);
        differs("peer.role", r.role == new.role);
        differs("security", r.security == new.security);
        differs("reorder", r.reorder == new.reorder);
        differs("route", r.routes == new.routes);
        differs("metrics", r.metrics_listen == new.metrics_listen);
        differs(
            "scheduler",
            r.scheduler == new.scheduler
                && r.share == new.share
                && r.adapt_to_loss == new.adapt_to_loss,
        );
        let same_paths = r.paths.len() == new.paths.len()
            && r.paths
                .iter()
                .zip(&new.paths)
                .all(|(a, b)| fixed(a) == fixed(b));
        differs(
            "path (added, removed or changed beyond rate_mbit, backup, keepalive_ms, dead_ms)",
            same_paths,
        );
    }

    /// Per-path settings, when the paths themselves are the same.
    fn apply_paths(&mut self, new: &Config, t: &mut Tunnel, out: &mut Outcome) {
        if out.needs_restart.iter().any(|k| k.starts_with("path")) {
            return;
        }
        // Primary paths first, so that the last primary never turns backup
        // before another has turned primary.
        let mut order: Vec<usize> = (0..new.paths.len()).collect();
        order.sort_by_key(|i| new.paths[*i].backup);
        for i in order {
            let (old, p) = (self.running.paths[i].clone(), &new.paths[i]);
            let key = |k: &str| format!("path {}: {k}", p.name);
            let run = &mut self.running.paths[i];
            if old.rate_mbit != p.rate_mbit {
                match t.set_rate_cap(&p.name, p.rate_mbit.map(|m| m * 1_000_000)) {
                    Ok(_) => {
                        run.rate_mbit = p.rate_mbit;
                        out.applied.push(format!(
                            "{}: {} -> {}",
                            key("rate_mbit"),
                            show(old.rate_mbit),
                            show(p.rate_mbit)
                        ));
                    }
                    Err(e) => out
                        .needs_restart
                        .push(format!("{} ({e})", key("rate_mbit"))),
                }
            }
            if old.backup != p.backup {
                match t.set_backup(&p.name, p.backup) {
                    Ok(_) => {
                        run.backup = p.backup;
                        out.applied.push(format!(
                            "{}: {} -> {}",
                            key("backup"),
                            old.backup,
                            p.backup
                        ));
                    }
                    Err(e) => out.needs_restart.push(format!("{} ({e})", key("backup"))),
                }
            }
            if (old.keepalive_ms, old.dead_ms) != (p.keepalive_ms, p.dead_ms) {
                match t.set_path_timers(
                    &p.name,
                    p.keepalive_ms * NANOS_PER_MS,
                    p.dead_ms * NANOS_PER_MS,
                ) {
                    Ok(_) => {
                        (run.keepalive_ms, run.dead_ms) = (p.keepalive_ms, p.dead_ms);
                        out.applied.push(format!(
                            "{}: {}/{} -> {}/{} ms",
                            key("keepalive_ms/dead_ms"),
                            old.keepalive_ms,
                            old.dead_ms,
                            p.keepalive_ms,
                            p.dead_ms
                        ));
                    }
                    Err(e) => out
                        .needs_restart
                        .push(format!("{} ({e})", key("keepalive_ms"))),
                }
            }
        }
    }
}

fn show(m: Option<u64>) -> String {
    m.map_or("none".into(), |m| m.to_string())
}

/// The daemon's reload hook for the event loop: reload, log what happened
/// (naming the tunnel), answer as the control protocol's JSON.
pub fn hook(cfg: Config) -> mpt_io::driver::Reload {
    let name = cfg.tunnel.name.clone();
    let mut r = Reloader::new(cfg);
    Box::new(move |t, now| match r.reload(t, now) {
        Ok(o) => {
            for a in &o.applied {
                info!(tunnel = %name, change = %a, "configuration reloaded: applied");
            }
            for k in &o.needs_restart {
                warn!(tunnel = %name, key = %k, "configuration reloaded: this change needs a restart; the tunnel keeps the running value");
            }
            if o.applied.is_empty() && o.needs_restart.is_empty() {
                info!(tunnel = %name, "configuration reloaded: nothing changed");
            }
            o.to_json()
        }
        Err(e) => {
            warn!(tunnel = %name, "configuration reload refused, nothing changed: {e}");
            json!({ "error": e })
        }
    })
}

/// `mpt reload`: ask the daemon to read its file again; print what it did.
pub fn ask(sock: &std::path::Path, json_out: bool) -> std::io::Result<()> {
    let v = crate::status::ask(sock, "reload")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    let list = |k: &str| -> Vec<String> {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (applied, restart) = (list("applied"), list("needs_restart"));
    if applied.is_empty() && restart.is_empty() {
        println!("configuration reloaded: nothing changed");
    }
    for a in applied {
        println!("applied: {a}");
    }
    for k in restart {
        println!("needs a restart (still running the old value): {k}");
    }
    Ok(())
}
