//! The single tunnel's control answers: `mpt status`, `mpt path`,
//! `mpt capture`, reloads (the control socket's and SIGHUP's), each
//! logged with who asked.
//!
//! Invariants: every request gets one answer, an error document when the
//! request does not apply to one tunnel (a peer named, a concentrator's
//! command); nothing here blocks the loop longer than one status
//! document takes to build.

use std::io::Read;

use serde_json::{json, Value};
use tracing::info;

use super::*;

impl Driver {
    /// SIGHUP: reload the configuration (the hook logs what it did).
    pub(super) fn hangup(&mut self) {
        let mut buf = [0u8; 64];
        while matches!(self.hangup_rx.read(&mut buf), Ok(n) if n > 0) {}
        info!(tunnel = %self.identity.name, "SIGHUP received: reloading the configuration");
        self.reload_now("SIGHUP");
    }

    fn reload_now(&mut self, who: &str) -> Value {
        let now = self.engine.clock.now();
        let Some(r) = self.reload.as_mut() else {
            return json!({ "error": "this daemon cannot reload its configuration" });
        };
        let (tunnel, paths) = self.engine.tunnel_and_paths();
        let mut ctx = ReloadCtx {
            tunnel,
            now,
            sockets: Sockets {
                paths,
                poll: &self.poll,
                ready: &mut self.ready,
            },
        };
        r(&mut ctx, who)
    }

    pub(super) fn answer_control(&mut self) {
        while let Ok(req) = self.control_rx.try_recv() {
            let who = req.who.as_str();
            let answer = match Request::parse(&req.command) {
                Err(e) => mpt_control::error(e),
                Ok(Request::Status) => self.status_json(),
                Ok(Request::PathAdmin {
                    peer: None,
                    path,
                    down,
                }) => self.path_change(&path, &PathChange::Admin { down }, who),
                Ok(Request::PathSet {
                    peer: None,
                    path,
                    key,
                    value,
                }) => self.path_change(&path, &PathChange::Set { key, value }, who),
                Ok(Request::Reload) => self.reload_now(who),
                Ok(Request::CaptureStart(spec)) if spec.peer.is_none() => {
                    self.capture_start(&spec, who)
                }
                Ok(Request::CaptureStatus) => self.capture_status(),
                Ok(Request::CaptureStop) => {
                    if let Some(t) = self.engine.capture.as_mut() {
                        t.stop();
                        info!(tunnel = %self.identity.name, by = %who, "capture stopped over the control socket");
                    }
                    self.capture_status()
                }
                Ok(
                    Request::PathAdmin { peer: Some(_), .. }
                    | Request::PathSet { peer: Some(_), .. }
                    | Request::CaptureStart(_),
                ) => mpt_control::error("this daemon is one tunnel: it has no peers to name"),
                Ok(
                    Request::PeerStatus { .. }
                    | Request::PeerAdd { .. }
                    | Request::PeerRemove { .. },
                ) => mpt_control::error(
                    "this daemon is one tunnel, not a concentrator: it has no peers",
                ),
            };
            let _ = req.reply.send(answer.to_string());
        }
    }

    /// `mpt capture`: write what the tunnel does to a pcapng file (see
    /// `capture.rs`). One capture at a time.
    fn capture_start(&mut self, v: &mpt_control::CaptureSpec, who: &str) -> Value {
        if self.engine.capture.as_ref().is_some_and(Tap::active_now) {
            return json!({ "error": "a capture is under way (mpt capture --stop ends it)" });
        }
        let t = self.engine.tunnel();
        let names: Vec<String> = (0..t.path_count())
            .map(|i| {
                t.path(i as u8)
                    .map(|p| p.cfg.name.clone())
                    .unwrap_or_default()
            })
            .collect();
        let active = t
            .active_paths()
            .filter_map(|i| t.path(i))
            .map(|p| (p.cfg.name.as_str(), p.cfg.local_key, p.cfg.local))
            .collect::<Vec<_>>();
        let spec = match crate::capture::spec_for(v, &active) {
            Ok(s) => s,
            Err(e) => return json!({ "error": e }),
        };
        let file = v.file.as_str();
        let now = self.engine.clock.now();
        match Tap::start(&spec, &self.identity.name, now, names) {
            Ok(tap) => {
                info!(tunnel = %self.identity.name, file = %file, by = %who, "capture started over the control socket");
                let st = tap.status();
                self.engine.capture = Some(tap);
                st
            }
            Err(e) => json!({ "error": e.to_string() }),
        }
    }

    fn capture_status(&self) -> Value {
        crate::capture::status_answer(self.engine.capture.as_ref())
    }

    /// `mpt path NAME up|down|set KEY VALUE`: an operator's change to a
    /// path (`pathctl.rs`; logged with who asked; the control socket is
    /// root's, mode 0600).
    fn path_change(&mut self, name: &str, change: &PathChange, who: &str) -> Value {
        match pathctl::apply(self.engine.tunnel_mut(), name, change) {
            Ok(v) => {
                let tunnel = &self.identity.name;
                match change {
                    PathChange::Admin { down } => {
                        let word = if *down { "down" } else { "up" };
                        info!(%tunnel, path = %name, by = %who, "path set administratively {word} over the control socket");
                    }
                    PathChange::Set { key, value } => {
                        info!(%tunnel, path = %name, %key, %value, by = %who, "path setting changed over the control socket");
                    }
                }
                v
            }
            Err(e) => json!({ "error": e }),
        }
    }

    /// The full status document (`mpt status --json`), typed.
    pub fn status_doc(&self) -> TunnelDoc {
        let e = &self.engine;
        let now = e.clock.now();
        let mut tunnel = e.tunnel().status(now);
        for p in &mut tunnel.paths {
            // By the path's id: removed paths are not listed.
            p.rates = self.rates.path(p.id as usize);
        }
        if let Ok(n) = crate::netcfg::tun_queue_drops(&self.identity.name) {
            // Before mpt: the kernel's, at the TUN's full queue.
            tunnel.drops.insert("tun_queue_full".into(), n);
        }
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let last_handshake_unix_s = tunnel
            .security
            .as_ref()
            .and_then(|s| s.session_age_s)
            .map(|age| wall - age);
        TunnelDoc {
            schema: STATUS_SCHEMA,
            name: self.identity.name.clone(),
            role: self.identity.role.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            peer_public_key: self.identity.peer_public_key.clone(),
            last_handshake_unix_s,
            addresses: self.identity.addresses.clone(),
            control_socket: self.identity.control_socket.clone(),
            sockets: e
                .paths
                .sockets
                .iter()
                .map(|s| SocketDoc {
                    local: s.local.to_string(),
                    paths: s.paths.clone(),
                })
                .collect(),
            rates: self.rates.total(),
            io: Some(IoDoc {
                io: e.io_stats().clone(),
                writes: e.write_stats().clone(),
            }),
            workers: Some(e.workers().pool_status()),
            tunnel,
        }
    }

    /// [`Driver::status_doc`] as JSON.
    pub fn status_json(&self) -> Value {
        serde_json::to_value(self.status_doc()).unwrap_or(Value::Null)
    }
}
