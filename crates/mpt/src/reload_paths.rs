//! The paths part of a reload: paths matched by name between the running
//! configuration and the file, added, removed, moved, or changed in
//! place.
//!
//! Order: new paths first (bound and added), then removals, then moves
//! (the new socket bound before the path leaves the old one), then changes
//! in place (primary paths before backups), so that a file that swaps one
//! path for another never leaves the tunnel without a primary path.
//!
//! Invariants: `running.paths` lists exactly the paths in effect, with the
//! values in effect; a step that fails (a bind, a refused change) is
//! reported in `failed` and leaves that path as it runs (a move whose new
//! address cannot be bound keeps the path on its old socket); hostnames are
//! resolved only for paths whose `remote` as written changed (the
//! resolver may block the loop for that long).

use mpt_config::{Config, PathSection};
use mpt_core::NANOS_PER_MS;
use mpt_io::driver::ReloadCtx;
use mpt_io::udp::PathBind;

use crate::reload::{Outcome, Reloader};

fn show(m: Option<u64>) -> String {
    m.map_or("none".into(), |m| m.to_string())
}

/// Where a path is bound: a change of either means a new socket.
fn binding(p: &PathSection) -> (std::net::SocketAddr, Option<&str>) {
    (p.local, p.interface.as_deref())
}

/// The path with its remote hostname (if any) resolved by the system
/// resolver.
fn resolved(p: &PathSection) -> Result<PathSection, String> {
    let mut sys =
        |host: &str| std::net::ToSocketAddrs::to_socket_addrs(host).map(Iterator::collect);
    let mut p = p.clone();
    if let Some(a) = mpt_config::resolve_path(&p, &mut sys)? {
        p.remote = Some(a);
    }
    Ok(p)
}

impl Reloader {
    /// Apply the file's paths (module documentation).
    pub(crate) fn apply_paths(&mut self, new: &Config, ctx: &mut ReloadCtx<'_>, out: &mut Outcome) {
        let named = |list: &[PathSection], n: &str| list.iter().position(|p| p.name == n);
        // Moved paths (new socket) go as a removal and an addition.
        let moved: Vec<String> = new
            .paths
            .iter()
            .filter(|p| {
                named(&self.running.paths, &p.name)
                    .is_some_and(|i| binding(&self.running.paths[i]) != binding(p))
            })
            .map(|p| p.name.clone())
            .collect();
        let added: Vec<&PathSection> = new
            .paths
            .iter()
            .filter(|p| named(&self.running.paths, &p.name).is_none())
            .collect();
        for p in added {
            if let Some((p, key)) = self.prepare(p, ctx, out) {
                self.attach(p, key, ctx, out, "added");
            }
        }
        let gone: Vec<String> = self
            .running
            .paths
            .iter()
            .filter(|p| named(&new.paths, &p.name).is_none())
            .map(|p| p.name.clone())
            .collect();
        for name in gone {
            match ctx.tunnel.remove_path(&name, ctx.now) {
                Ok(_) => {
                    self.running.paths.retain(|p| p.name != name);
                    out.applied.push(format!("path {name}: removed"));
                }
                Err(e) => out
                    .failed
                    .push(format!("path {name}: cannot remove it: {e}")),
            }
        }
        for name in &moved {
            if let Some(p) = new.paths.iter().find(|p| &p.name == name) {
                self.move_path(p, ctx, out);
            }
        }
        // Changes in place, primary paths first: the last primary never
        // turns backup before another has turned primary.
        let mut order: Vec<&PathSection> = new.paths.iter().collect();
        order.sort_by_key(|p| p.backup);
        for p in order {
            if let Some(i) = named(&self.running.paths, &p.name) {
                self.change(i, p, ctx, out);
            }
        }
    }

    /// Resolve the path's remote and bind (or reuse) its socket: what a
    /// path needs before the tunnel is touched. `None` (reported in
    /// `failed`) when either fails.
    fn prepare(
        &mut self,
        p: &PathSection,
        ctx: &mut ReloadCtx<'_>,
        out: &mut Outcome,
    ) -> Option<(PathSection, usize)> {
        let name = &p.name;
        let p = match resolved(p) {
            Ok(p) => p,
            Err(e) => {
                out.failed.push(format!("path {name}: {e}"));
                return None;
            }
        };
        let bind = PathBind {
            name,
            local: p.local,
            interface: p.interface.as_deref(),
        };
        match ctx.socket_for(&bind) {
            Ok(k) => Some((p, k)),
            Err(e) => {
                out.failed.push(format!("path {name}: {e}"));
                None
            }
        }
    }

    /// Add a prepared path (socket `key`) to the tunnel.
    fn attach(
        &mut self,
        p: PathSection,
        key: usize,
        ctx: &mut ReloadCtx<'_>,
        out: &mut Outcome,
        verb: &str,
    ) -> bool {
        let name = &p.name;
        match ctx
            .tunnel
            .add_path(crate::daemon::path_config(&p, key), ctx.now)
        {
            Ok(_) => {
                let to = p.remote.map_or("(learned)".into(), |r| r.to_string());
                out.applied
                    .push(format!("path {name}: {verb} ({} -> {to})", p.local));
                self.running.paths.push(p);
                true
            }
            Err(e) => {
                out.failed.push(format!("path {name}: {e}"));
                false
            }
        }
    }

    /// A path whose `local` or `interface` changed: its new socket is bound
    /// first, and only then is the path taken off the old one and put on
    /// the new one. A bind that fails leaves the path exactly as it runs.
    fn move_path(&mut self, p: &PathSection, ctx: &mut ReloadCtx<'_>, out: &mut Outcome) {
        let Some(i) = self.running.paths.iter().position(|r| r.name == p.name) else {
            return;
        };
        let old = self.running.paths[i].clone();
        let Some((moved, key)) = self.prepare(p, ctx, out) else {
            if let Some(f) = out.failed.last_mut() {
                f.push_str(&format!("; the path stays on {}", old.local));
            }
            return;
        };
        let name = &p.name;
        if let Err(e) = ctx.tunnel.remove_path(name, ctx.now) {
            out.failed.push(format!(
                "path {name}: cannot move it: {e}; it stays on {}",
                old.local
            ));
            return;
        }
        self.running.paths.remove(i);
        if self.attach(moved, key, ctx, out, "moved") {
            return;
        }
        // Put it back where it was (its old socket is still bound).
        let back = PathBind {
            name,
            local: old.local,
            interface: old.interface.as_deref(),
        };
        if let Ok(k) = ctx.socket_for(&back) {
            if ctx
                .tunnel
                .add_path(crate::daemon::path_config(&old, k), ctx.now)
                .is_ok()
            {
                self.running.paths.push(old);
            }
        }
    }

    /// Per-path settings of a path that stays where it is.
    fn change(&mut self, i: usize, p: &PathSection, ctx: &mut ReloadCtx<'_>, out: &mut Outcome) {
        let t = &mut *ctx.tunnel;
        let old = self.running.paths[i].clone();
        let run = &mut self.running.paths[i];
        let mut did = |r: Result<u8, String>, key: &str, change: String| match r {
            Ok(_) => {
                out.applied
                    .push(format!("path {}: {key}: {change}", p.name));
                true
            }
            Err(e) => {
                out.failed.push(format!("path {}: {key}: {e}", p.name));
                false
            }
        };
        if old.remote_host != p.remote_host || (p.remote_host.is_none() && old.remote != p.remote) {
            let show_r = |x: &PathSection| {
                x.remote_host
                    .clone()
                    .or(x.remote.map(|r| r.to_string()))
                    .unwrap_or_else(|| "(learned)".into())
            };
            let change = format!("{} -> {}", show_r(&old), show_r(p));
            match resolved(p) {
                Ok(r) => match r.remote {
                    Some(addr) => {
                        if did(t.set_remote(&p.name, addr), "remote", change) {
                            (run.remote, run.remote_host) = (r.remote, r.remote_host);
                        }
                    }
                    None => {
                        let e = "a path in use keeps its remote; remove the path and add it again to have it learned".to_string();
                        did(Err(e), "remote", change);
                    }
                },
                Err(e) => {
                    did(Err(e), "remote", change);
                }
            }
        }
        if old.weight != p.weight
            && did(
                t.set_weight(&p.name, p.weight),
                "weight",
                format!("{} -> {}", old.weight, p.weight),
            )
        {
            (run.weight, run.weight_set) = (p.weight, p.weight_set);
        }
        if old.rate_mbit != p.rate_mbit
            && did(
                t.set_rate_cap(&p.name, p.rate_mbit.map(|m| m * 1_000_000)),
                "rate_mbit",
                format!("{} -> {}", show(old.rate_mbit), show(p.rate_mbit)),
            )
        {
            run.rate_mbit = p.rate_mbit;
        }
        if old.backup != p.backup
            && did(
                t.set_backup(&p.name, p.backup),
                "backup",
                format!("{} -> {}", old.backup, p.backup),
            )
        {
            run.backup = p.backup;
        }
        if (old.keepalive_ms, old.dead_ms) != (p.keepalive_ms, p.dead_ms)
            && did(
                t.set_path_timers(
                    &p.name,
                    p.keepalive_ms * NANOS_PER_MS,
                    p.dead_ms * NANOS_PER_MS,
                ),
                "keepalive_ms/dead_ms",
                format!(
                    "{}/{} -> {}/{} ms",
                    old.keepalive_ms, old.dead_ms, p.keepalive_ms, p.dead_ms
                ),
            )
        {
            (run.keepalive_ms, run.dead_ms) = (p.keepalive_ms, p.dead_ms);
        }
    }
}
