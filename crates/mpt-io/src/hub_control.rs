//! A concentrator's answers to control requests (`mpt status`, `mpt
//! peer`, `mpt path --peer`, `mpt capture`, `mpt reload`): each typed
//! request of `mpt-control` is served here by the leader shard, which asks
//! the shard that owns a peer for what only it has.
//!
//! Invariants: every change is logged with who asked; a peer is named by
//! its name or its public key; a refusal is an `{"error": ...}` answer that
//! names what there is, and changes nothing.

use mpt_control::Request;
use mpt_core::concentrator::{PeerConfig, PeerId};
use mpt_core::crypto::keys::{self, PresharedKey, PublicKey};
use serde_json::{json, Value};
use tracing::{info, warn};

use super::{HubDriver, Reread};
use crate::capture::Tap;
use crate::driver::STATUS_SCHEMA;
use crate::pathctl::PathChange;
use crate::seam::Clock;
use crate::shards::{self, Op};
use mpt_control::status::{ConcentratorDoc, IoDoc, ShardDoc, ShardPart};

/// A typed answer as the control socket's JSON, or its refusal.
fn typed<T: serde::Serialize>(r: Result<T, String>) -> Value {
    match r {
        Ok(a) => serde_json::to_value(a).unwrap_or_default(),
        Err(e) => mpt_control::error(e),
    }
}

/// The refusal for a peer command that names no peer of this daemon.
fn no_such_peer(who: &str) -> Value {
    mpt_control::error(format!("no peer named or keyed '{who}'"))
}

/// Parse `peer add`'s JSON into a peer and its routes.
fn parse_peer(v: &Value) -> Result<(PeerConfig, Vec<ipnet::IpNet>), String> {
    let key = v
        .get("public_key")
        .and_then(Value::as_str)
        .ok_or("peer add: public_key is missing")?;
    let key =
        PublicKey(keys::decode(key).map_err(|e| format!("peer add: public_key: the key {e}"))?);
    let psk = match v.get("preshared_key").and_then(Value::as_str) {
        Some(s) => PresharedKey(
            keys::decode(s).map_err(|e| format!("peer add: preshared_key: the key {e}"))?,
        ),
        None => PresharedKey([0; 32]),
    };
    let nets = |k: &str| -> Result<Vec<ipnet::IpNet>, String> {
        let list = v
            .get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        list.iter()
            .map(|x| {
                let s = x.as_str().unwrap_or_default();
                s.parse::<ipnet::IpNet>()
                    .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| format!("peer add: {k}: '{s}' is not an address or prefix"))
            })
            .collect()
    };
    let mut allowed = nets("allowed_ips")?;
    if allowed.is_empty() {
        return Err("peer add: allowed_ips is missing or empty".into());
    }
    let routes = nets("routes")?;
    allowed.extend(routes.iter().copied());
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .map_or_else(|| keys::encode(&key.0)[..8].to_string(), str::to_string);
    Ok((
        PeerConfig {
            name,
            public_key: key,
            psk,
            allowed_ips: allowed,
            limits: Default::default(),
        },
        routes,
    ))
}

impl HubDriver {
    pub(super) fn find(&self, who: &str) -> Option<PeerId> {
        let c = self.hub.concentrator();
        c.peer_ids().find(|&id| {
            c.peer(id)
                .is_some_and(|p| p.cfg.name == who || keys::encode(&p.cfg.public_key.0) == who)
        })
    }

    pub(super) fn answer_control(&mut self) {
        while let Ok(req) = self.control_rx.try_recv() {
            let answer = match Request::parse(&req.command) {
                Err(e) => mpt_control::error(e),
                Ok(Request::Status) => self.status_json(),
                Ok(Request::PeerStatus { peer }) => match self.find(&peer) {
                    Some(id) => self.peer_detail(id),
                    None => no_such_peer(&peer),
                },
                Ok(Request::PeerAdd { peer }) => match parse_peer(&peer) {
                    Ok((cfg, routes)) => typed(self.add(cfg, routes, &req.who)),
                    Err(e) => mpt_control::error(e),
                },
                Ok(Request::PeerRemove { peer }) => match self.find(&peer) {
                    Some(id) => typed(self.remove(id, &req.who)),
                    None => no_such_peer(&peer),
                },
                Ok(Request::Reload) => self.reload(&req.who),
                Ok(Request::PathAdmin {
                    peer: Some(peer),
                    path,
                    down,
                }) => self.path_change(&peer, &path, PathChange::Admin { down }, &req.who),
                Ok(Request::PathSet {
                    peer: Some(peer),
                    path,
                    key,
                    value,
                }) => self.path_change(&peer, &path, PathChange::Set { key, value }, &req.who),
                Ok(Request::PathAdmin { peer: None, .. } | Request::PathSet { peer: None, .. }) => {
                    mpt_control::error(
                        "a concentrator's paths are its peers': name the peer (mpt path --peer NAME|KEY PATH ...)",
                    )
                }
                Ok(Request::CaptureStart(spec)) => self.capture_start(&spec, &req.who),
                Ok(Request::CaptureStatus) => self.capture_status(),
                Ok(Request::CaptureStop) => {
                    if let Some(t) = self.hub.capture.as_mut() {
                        t.stop();
                        info!(tunnel = %self.name, by = %req.who, "capture stopped over the control socket");
                    }
                    if let Some(l) = self.link.as_mut() {
                        l.ask_others(&Op::Capture(None));
                    }
                    self.capture_status()
                }
            };
            let _ = req.reply.send(answer.to_string());
        }
    }

    pub(super) fn add(
        &mut self,
        cfg: PeerConfig,
        routes: Vec<ipnet::IpNet>,
        who: &str,
    ) -> Result<mpt_control::PeerAdded, String> {
        match self.hub.concentrator_mut().add_peer(cfg.clone()) {
            Ok(id) => {
                if let Some(l) = self.link.as_mut() {
                    for a in l.ask_others(&Op::Add(cfg.clone())) {
                        if a["id"] != json!(id) {
                            warn!(tunnel = %self.name, peer = %cfg.name, "a shard added the peer as {a} (here {id})");
                        }
                    }
                }
                if self.routes.len() <= id as usize {
                    self.routes.resize(id as usize + 1, vec![]);
                }
                if let Some(h) = self.hooks.as_mut() {
                    h.added(&cfg, &routes);
                }
                self.routes[id as usize] = routes;
                info!(tunnel = %self.name, peer = %cfg.name, by = %who, "peer added");
                Ok(mpt_control::PeerAdded {
                    ok: true,
                    id,
                    name: cfg.name.clone(),
                })
            }
            Err(e) => Err(format!("peer {}: {e}", cfg.name)),
        }
    }

    pub(super) fn remove(
        &mut self,
        id: PeerId,
        who: &str,
    ) -> Result<mpt_control::PeerRemoved, String> {
        match self.hub.concentrator_mut().remove_peer(id) {
            Some(cfg) => {
                let mut was_live = self.hub.forget(id);
                if let Some(l) = self.link.as_mut() {
                    let others = l.ask_others(&Op::Remove(id));
                    was_live |= others.iter().any(|a| a["was_live"] == json!(true));
                }
                if was_live {
                    if let Some(h) = self.hooks.as_mut() {
                        h.live(&cfg, false);
                    }
                }
                let routes = self
                    .routes
                    .get_mut(id as usize)
                    .map(std::mem::take)
                    .unwrap_or_default();
                if let Some(h) = self.hooks.as_mut() {
                    h.removed(&cfg, &routes);
                }
                info!(tunnel = %self.name, peer = %cfg.name, by = %who, "peer removed");
                Ok(mpt_control::PeerRemoved {
                    ok: true,
                    removed: cfg.name.clone(),
                })
            }
            None => Err(format!("no peer {id}")),
        }
    }

    /// Re-read the configuration's peers: add the new, remove the gone,
    /// update the others in place (their allowed IPs, pre-shared key,
    /// limits, routes: a new pre-shared key ends that peer's sessions) and
    /// leave the unchanged ones (and their sessions) alone. The server's
    /// own sections that differ are listed as needing a restart.
    pub(super) fn reload(&mut self, who: &str) -> Value {
        let Some(h) = self.hooks.as_mut() else {
            return mpt_control::error("this daemon cannot reload");
        };
        let Reread {
            peers: want,
            needs_restart,
        } = match h.reread() {
            Ok(w) => w,
            Err(e) => return mpt_control::error(e),
        };
        let have: Vec<(PeerId, [u8; 32])> = {
            let c = self.hub.concentrator();
            c.peer_ids()
                .filter_map(|id| c.peer(id).map(|p| (id, p.cfg.public_key.0)))
                .collect()
        };
        let mut removed = vec![];
        for (id, key) in &have {
            if !want.iter().any(|(w, _)| w.public_key.0 == *key) {
                if let Ok(r) = self.remove(*id, who) {
                    removed.push(r.removed);
                }
            }
        }
        let mut added = vec![];
        let mut errors = vec![];
        let mut changed = vec![];
        for (cfg, routes) in want {
            if let Some((id, _)) = have.iter().find(|(_, k)| *k == cfg.public_key.0) {
                match self.update(*id, cfg, routes, who) {
                    Ok(Some(c)) => changed.push(c),
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
                continue;
            }
            match self.add(cfg, routes, who) {
                Ok(a) => added.push(a.name),
                Err(e) => errors.push(e),
            }
        }
        for k in &needs_restart {
            warn!(tunnel = %self.name, key = %k, by = %who, "configuration reloaded: this change needs a restart; the concentrator keeps the running value");
        }
        let r = mpt_control::Reloaded {
            ok: errors.is_empty(),
            added,
            removed,
            changed,
            needs_restart,
            errors,
            ..Default::default()
        };
        serde_json::to_value(r).unwrap_or_default()
    }

    /// Update peer `id` to `cfg` with `routes` in every shard; what
    /// changed ("NAME: key, key"), `None` for nothing.
    pub(super) fn update(
        &mut self,
        id: PeerId,
        cfg: PeerConfig,
        routes: Vec<ipnet::IpNet>,
        who: &str,
    ) -> Result<Option<String>, String> {
        let c = self.hub.concentrator();
        let (Some(old), Some(change)) =
            (c.peer(id).map(|p| p.cfg.clone()), c.peer_change(id, &cfg))
        else {
            return Err(format!("peer {}: no longer configured here", cfg.name));
        };
        let old_routes = self.routes.get(id as usize).cloned().unwrap_or_default();
        let routes_changed = old_routes != routes;
        if !change.any() && !routes_changed {
            return Ok(None);
        }
        let now = self.hub.clock.now();
        let mut was_live = false;
        if change.any() {
            self.hub
                .concentrator_mut()
                .update_peer(id, cfg.clone(), now)
                .map_err(|e| format!("peer {}: {e}; it keeps its running settings", cfg.name))?;
            was_live = (change.allowed_ips || change.psk) && self.hub.forget(id);
            if let Some(l) = self.link.as_mut() {
                for a in l.ask_others(&Op::Update(id, cfg.clone())) {
                    was_live |= a["was_live"] == json!(true);
                    if a["ok"] != json!(true) {
                        warn!(tunnel = %self.name, peer = %cfg.name, "a shard did not take the update: {a}");
                    }
                }
            }
        }
        if let Some(h) = self.hooks.as_mut() {
            if was_live {
                // Announced again with its new prefixes once it is live.
                h.live(&old, false);
            }
            if change.allowed_ips || routes_changed {
                h.updated((&old, &old_routes), (&cfg, &routes));
            }
        }
        if self.routes.len() <= id as usize {
            self.routes.resize(id as usize + 1, vec![]);
        }
        self.routes[id as usize] = routes;
        let mut keys = change.keys();
        if routes_changed {
            keys.push("routes");
        }
        let keys = keys.join(", ");
        if change.psk {
            warn!(tunnel = %self.name, peer = %cfg.name, by = %who, "peer changed by reload ({keys}): its sessions ended, it must connect again with the new pre-shared key");
        } else {
            info!(tunnel = %self.name, peer = %cfg.name, by = %who, "peer changed by reload ({keys})");
        }
        Ok(Some(format!("{}: {keys}", cfg.name)))
    }

    /// `mpt capture` on a concentrator: the TUN's inner packets of every
    /// peer (each with its peer in the comment) and the datagrams of the
    /// server's paths named, from every shard into one file.
    pub(super) fn capture_start(&mut self, v: &mpt_control::CaptureSpec, who: &str) -> Value {
        if self.hub.capture.as_ref().is_some_and(Tap::active_now) {
            return mpt_control::error("a capture is under way (mpt capture --stop ends it)");
        }
        if v.peer.is_some() {
            return mpt_control::error("a concentrator captures all its peers: the inner packets name each one (no --peer)");
        }
        let own = self.hub.concentrator().server_paths();
        let names: Vec<String> = own.iter().map(|p| p.name.clone()).collect();
        let paths: Vec<_> = own
            .iter()
            .map(|p| (p.name.as_str(), p.local_key, p.local))
            .collect();
        let spec = match crate::capture::spec_for(v, &paths) {
            Ok(s) => s,
            Err(e) => return mpt_control::error(e),
        };
        let now = self.hub.clock.now();
        match Tap::start(&spec, &self.name, now, names) {
            Ok(tap) => {
                info!(tunnel = %self.name, file = %v.file, by = %who, "capture started over the control socket");
                let st = tap.status();
                if let Some(l) = self.link.as_mut() {
                    l.ask_others(&Op::Capture(Some(tap.clone())));
                }
                self.hub.capture = Some(tap);
                st
            }
            Err(e) => mpt_control::error(e.to_string()),
        }
    }

    pub(super) fn capture_status(&self) -> Value {
        crate::capture::status_answer(self.hub.capture.as_ref())
    }

    /// `mpt path --peer WHO PATH up|down|set KEY VALUE`: at the peer's
    /// shard; logged with the peer and who asked.
    pub(super) fn path_change(
        &mut self,
        who: &str,
        path: &str,
        change: PathChange,
        by: &str,
    ) -> Value {
        let Some(id) = self.find(who) else {
            return no_such_peer(who);
        };
        let op = Op::Path(id, path.to_string(), change.clone());
        let owner = self.hub.concentrator().shard_of(id);
        let v = match self.link.as_mut() {
            Some(l) if owner != 0 => l.ask(owner, op),
            _ => shards::answer(&mut self.hub, &op),
        };
        if mpt_control::refusal(&v).is_none() {
            let peer = self
                .hub
                .concentrator()
                .peer(id)
                .map(|p| p.cfg.name.clone())
                .unwrap_or_default();
            match change {
                PathChange::Admin { down } => {
                    let word = if down { "down" } else { "up" };
                    info!(tunnel = %self.name, %peer, %path, %by, "path set administratively {word} over the control socket");
                }
                PathChange::Set { key, value } => {
                    info!(tunnel = %self.name, %peer, %path, %key, %value, %by, "path setting changed over the control socket");
                }
            }
        }
        v
    }

    pub(super) fn peer_detail(&mut self, id: PeerId) -> Value {
        let owner = self.hub.concentrator().shard_of(id);
        match self.link.as_mut() {
            Some(l) if owner != 0 => l.ask(owner, Op::Detail(id)),
            _ => shards::answer(&mut self.hub, &Op::Detail(id)),
        }
    }

    pub(super) fn status_json(&mut self) -> Value {
        serde_json::to_value(self.status_doc()).unwrap_or(Value::Null)
    }

    /// The concentrator's status document: every shard's part, summed.
    fn status_doc(&mut self) -> ConcentratorDoc {
        let mut parts = vec![shards::status_part(&self.hub)];
        if let Some(l) = self.link.as_mut() {
            parts[0].send_failures = Some(l.send_failures);
            let others = l.ask_others(&Op::Status);
            parts.extend(
                others
                    .into_iter()
                    .map(|v| serde_json::from_value::<ShardPart>(v).unwrap_or_default()),
            );
        }
        let mut doc = ConcentratorDoc {
            schema: STATUS_SCHEMA,
            name: self.name.clone(),
            role: "concentrator".into(),
            addresses: self.addresses.clone(),
            control_socket: self.control_socket.clone(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            peers_configured: self.hub.concentrator().peer_count(),
            ..ConcentratorDoc::default()
        };
        let mut io: Option<IoDoc> = None;
        for p in parts {
            doc.peers.extend(p.peers);
            for (k, n) in p.drops {
                *doc.drops.entry(k).or_default() += n;
            }
            doc.cookies_sent += p.cookies_sent;
            doc.session_unknown_sent += p.session_unknown_sent;
            doc.session_unknown_spaced += p.session_unknown_spaced;
            doc.tun_write_failures += p.tun_write_failures;
            if p.error.is_none() {
                match io.as_mut() {
                    Some(t) => t.add(&p.io),
                    None => io = Some(p.io.clone()),
                }
            }
            doc.shards.push(ShardDoc {
                shard: p.shard,
                handoffs: p.handoffs,
                send_failures: p.send_failures,
                io: p.error.is_none().then_some(p.io),
                error: p.error,
            });
        }
        doc.io = io;
        doc.peers.sort_by_key(|p| p.id);
        doc.peers_connected = doc.peers.iter().filter(|p| p.connected).count();
        if let Ok(n) = crate::netcfg::tun_queue_drops(&self.name) {
            // Before mpt: the kernel's, at the TUN's full queues.
            doc.drops.insert("tun_queue_full".into(), n);
        }
        doc
    }
}
