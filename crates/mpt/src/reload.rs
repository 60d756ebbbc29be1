//! Reloading the configuration of a running tunnel (SIGHUP, `mpt reload`).
//!
//! The file is read and validated again. What can change without touching
//! the interface or the session is applied at once:
//!
//! * paths (matched by name; see `reload_paths.rs`): added (a socket bound
//!   for a new local address), removed (its traffic moves to the others
//!   first), moved to another `local` or `interface` (removed and added),
//!   and per path `remote`, `weight`, `rate_mbit`, `backup`,
//!   `keepalive_ms`, `dead_ms`;
//! * `[[route]]`: routes added and removed;
//! * `[scheduler] queue_ms` and `local_queue_ms`;
//! * `[qos]`: the classes (what waits is classified again into the new
//!   ones).
//!
//! Everything else (the tunnel's name, addresses and MTU, the role, keys,
//! the reorder buffer, the scheduler's mode, metrics) is listed as needing
//! a restart and left as it runs.
//!
//! Invariants: a file with any error changes nothing (the errors are
//! reported, the tunnel goes on); `running` is always what is in effect
//! (a change that failed, such as a socket that cannot be bound, keeps
//! the old value and is reported), so a later reload tries again what did
//! not take.

use mpt_config::Config;
use mpt_core::NANOS_PER_MS;
use mpt_io::driver::ReloadCtx;
use mpt_io::netcfg::Routes;
use serde_json::{json, Value};
use tracing::{info, warn};

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Changes in effect now, as `key: old -> new`.
    pub applied: Vec<String>,
    /// Keys that differ from the running tunnel and need a restart.
    pub needs_restart: Vec<String>,
    /// Changes that were tried and failed (the old value runs on).
    pub failed: Vec<String>,
}

impl Outcome {
    pub fn to_json(&self) -> Value {
        let r = mpt_control::Reloaded {
            ok: true,
            applied: self.applied.clone(),
            needs_restart: self.needs_restart.clone(),
            failed: self.failed.clone(),
            ..Default::default()
        };
        serde_json::to_value(r).unwrap_or_default()
    }
}

/// The running configuration and where it came from.
pub struct Reloader {
    pub(crate) running: Config,
    pub(crate) routes: Routes,
    /// The paths whose hostnames are resolved again while down.
    watched: crate::resolve::Watched,
}

impl Reloader {
    pub fn new(running: Config, routes: Routes, watched: crate::resolve::Watched) -> Self {
        Self {
            running,
            routes,
            watched,
        }
    }

    /// Read the file again and apply what can be applied.
    pub fn reload(&mut self, ctx: &mut ReloadCtx<'_>) -> Result<Outcome, String> {
        let new = Config::load(&self.running.file).map_err(|errs| {
            let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
            format!(
                "{} error(s); nothing changed:\n{}",
                list.len(),
                list.join("\n")
            )
        })?;
        if new.is_concentrator() {
            return Err(format!(
                "{} now lists [[peer]] blocks or a peers_dir (a concentrator), which this daemon cannot become by a reload; nothing changed",
                self.running.file.display()
            ));
        }
        let mut out = Outcome::default();
        self.restart_keys(&new, &mut out);
        let scheduler_same = !out.needs_restart.iter().any(|k| k == "scheduler");
        if scheduler_same {
            self.apply_paths(&new, ctx, &mut out);
            if let Ok(mut w) = self.watched.lock() {
                *w = crate::resolve::named(&self.running.paths);
            }
        }
        self.apply_routes(&new, &mut out);
        let t = &mut *ctx.tunnel;
        if scheduler_same {
            let r = &mut self.running;
            if let Some(ms) = changed_ms("queue_ms", new.queue_ms, &mut r.queue_ms, &mut out) {
                t.set_queue_max(ms * NANOS_PER_MS);
            }
            let local = &mut r.local_queue_ms;
            if let Some(ms) = changed_ms("local_queue_ms", new.local_queue_ms, local, &mut out) {
                t.set_local_queue(ms * NANOS_PER_MS);
            }
        }
        if new.qos != self.running.qos && scheduler_same {
            t.set_qos(new.qos.clone(), ctx.now);
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
        differs("metrics", r.metrics_listen == new.metrics_listen);
        differs(
            "scheduler",
            r.scheduler == new.scheduler
                && r.share == new.share
                && r.adapt_to_loss == new.adapt_to_loss,
        );
    }

    /// Routes added to and removed from the file.
    fn apply_routes(&mut self, new: &Config, out: &mut Outcome) {
        let key = |r: &mpt_config::RouteSection| (r.network, r.metric);
        let show = |(n, m): (ipnet::IpNet, Option<u32>)| {
            m.map_or(n.to_string(), |m| format!("{n} metric {m}"))
        };
        let wanted: Vec<_> = new.routes.iter().map(key).collect();
        for r in self.routes.installed().to_vec() {
            if !wanted.contains(&r) {
                match self.routes.remove(r.0, r.1) {
                    Ok(()) => out.applied.push(format!("route: removed {}", show(r))),
                    Err(e) => out.failed.push(format!("route {}: {e}", show(r))),
                }
            }
        }
        for (i, r) in new.routes.iter().enumerate() {
            if self.routes.installed().contains(&key(r)) {
                continue;
            }
            let at = r.line.map_or(String::new(), |l| format!(":{l}"));
            let label = format!("{}{at}: route[{}]", new.file.display(), i + 1);
            match self.routes.add(r.network, r.metric, &label) {
                Ok(()) => out.applied.push(format!("route: added {}", show(key(r)))),
                Err(e) => out.failed.push(e.to_string()),
            }
        }
        let installed = self.routes.installed();
        self.running.routes = new
            .routes
            .iter()
            .filter(|r| installed.contains(&key(r)))
            .cloned()
            .collect();
    }
}

/// The daemon's reload hook for the event loop: reload, log what happened
/// (naming the tunnel), answer as the control protocol's JSON.
pub fn hook(
    cfg: Config,
    routes: Routes,
    watched: crate::resolve::Watched,
) -> mpt_io::driver::Reload {
    let name = cfg.tunnel.name.clone();
    let mut r = Reloader::new(cfg, routes, watched);
    Box::new(move |ctx, who| match r.reload(ctx) {
        Ok(o) => {
            for a in &o.applied {
                info!(tunnel = %name, change = %a, by = %who, "configuration reloaded: applied");
            }
            for k in &o.needs_restart {
                warn!(tunnel = %name, key = %k, by = %who, "configuration reloaded: this change needs a restart; the tunnel keeps the running value");
            }
            for f in &o.failed {
                warn!(tunnel = %name, by = %who, "configuration reloaded: a change failed, the old value runs on: {f}");
            }
            if o.applied.is_empty() && o.needs_restart.is_empty() && o.failed.is_empty() {
                info!(tunnel = %name, by = %who, "configuration reloaded: nothing changed");
            }
            o.to_json()
        }
        Err(e) => {
            warn!(tunnel = %name, by = %who, "configuration reload refused, nothing changed: {e}");
            json!({ "error": e })
        }
    })
}

/// Exit status of `mpt reload` when everything it could apply was applied
/// but some differences need a restart (the daemon runs the old values).
pub const EXIT_NEEDS_RESTART: u8 = 3;

/// `mpt reload`: ask the daemon to read its file again; print what it did.
/// The exit status: 0 all applied (or nothing changed), 1 a change failed
/// or the file has errors, [`EXIT_NEEDS_RESTART`] some change needs a
/// restart.
pub fn ask(sock: &std::path::Path, json_out: bool) -> std::io::Result<u8> {
    let v = crate::status::ask(sock, &mpt_control::Request::Reload)?;
    let r: mpt_control::Reloaded = mpt_control::answer(v.clone()).map_err(std::io::Error::other)?;
    let (mut applied, restart, mut failed) = (r.applied, r.needs_restart, r.failed);
    // A concentrator answers with the peers it added, removed and changed.
    for (list, what) in [(r.added, "peer added"), (r.removed, "peer removed")] {
        applied.extend(list.into_iter().map(|n| format!("{what}: {n}")));
    }
    applied.extend(r.changed.into_iter().map(|n| format!("peer changed: {n}")));
    failed.extend(r.errors);
    let code = if !failed.is_empty() {
        1
    } else if !restart.is_empty() {
        EXIT_NEEDS_RESTART
    } else {
        0
    };
    if json_out {
        println!("{v}");
        return Ok(code);
    }
    if applied.is_empty() && restart.is_empty() && failed.is_empty() {
        println!("configuration reloaded: nothing changed");
    }
    for a in applied {
        println!("applied: {a}");
    }
    for k in &restart {
        println!("needs a restart (still running the old value): {k}");
    }
    for f in &failed {
        println!("failed (still running the old value): {f}");
    }
    if !failed.is_empty() {
        eprintln!("mpt: {} change(s) of the reload failed", failed.len());
    } else if !restart.is_empty() {
        eprintln!(
            "mpt: {} change(s) need a restart (systemctl restart); exit {EXIT_NEEDS_RESTART}",
            restart.len()
        );
    }
    Ok(code)
}

/// A `[scheduler]` time in ms that the new file changes: recorded as
/// applied and as running; the new value, if it changed.
fn changed_ms(key: &str, new: u64, running: &mut u64, out: &mut Outcome) -> Option<u64> {
    if new == *running {
        return None;
    }
    out.applied
        .push(format!("scheduler.{key}: {} -> {new}", *running));
    *running = new;
    Some(new)
}
