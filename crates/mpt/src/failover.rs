//! A client's move between servers (`[[server]]`, `[failover]`; the policy
//! is in `docs/deploy.md`).
//!
//! Server 0 is the one of `[security] peer_public_key` and the paths'
//! `remote`s; servers 1.. are the `[[server]]` tables in order. The client
//! talks to one at a time. When it has had no session, or no path up, for
//! `after_ms`, it moves to the next server (after the last, back to the
//! first): a new tunnel, with that server's key and remotes, on the same
//! sockets, TUN and addresses, so that applications keep their sessions as
//! long as the new server routes the client's prefix. With
//! `return_after_s`, a client that has been on another server that long
//! tries the first again (and moves on after `after_ms` if it still does
//! not answer).
//!
//! Invariants: a move happens at most once per `after_ms`; nothing moves
//! while the current server works (unless `return_after_s` says so); every
//! move is logged with both servers' names.

use mpt_config::{Config, Security};
use mpt_core::crypto::keys::{self, PresharedKey};
use mpt_core::tunnel::Tunnel;
use mpt_core::{Nanos, NANOS_PER_MS};
use tracing::warn;

/// How often the health of the current server is looked at (tuning knob).
const CHECK_EVERY_NS: Nanos = 20 * NANOS_PER_MS;

/// See the module documentation.
pub struct Failover {
    cfg: Config,
    keys: Vec<usize>,
    current: usize,
    switched_at: Nanos,
    unhealthy_since: Option<Nanos>,
    checked_at: Nanos,
    wall_offset: Box<dyn Fn() -> i64 + Send>,
}

impl Failover {
    /// `None` when the client lists no further server.
    pub fn new(
        cfg: &Config,
        keys: &[usize],
        now: Nanos,
        wall_offset: Box<dyn Fn() -> i64 + Send>,
    ) -> Option<Self> {
        (!cfg.servers.is_empty()).then(|| Self {
            cfg: cfg.clone(),
            keys: keys.to_vec(),
            current: 0,
            switched_at: now,
            unhealthy_since: None,
            checked_at: 0,
            wall_offset,
        })
    }

    fn name(&self, i: usize) -> String {
        if i == 0 {
            "the first server".into()
        } else {
            format!("server '{}'", self.cfg.servers[i - 1].name)
        }
    }

    /// The client's configuration aimed at server `i`.
    fn aimed_at(&self, i: usize) -> Config {
        let mut c = self.cfg.clone();
        if i > 0 {
            let s = &self.cfg.servers[i - 1];
            if let Security::Encrypted(k) = &mut c.security {
                k.peer_public = s.public_key;
                k.psk = s.psk.clone().or(Some(PresharedKey([0; 32])));
            }
            for (p, r) in c.paths.iter_mut().zip(&s.remotes) {
                p.remote = Some(*r);
                p.remote_host = None;
            }
        }
        c
    }

    /// Look at the tunnel; move it to the next server when due. Returns
    /// the new server's public key (for status) after a move.
    pub fn tick(&mut self, t: &mut Tunnel, now: Nanos) -> Option<String> {
        if now.saturating_sub(self.checked_at) < CHECK_EVERY_NS {
            return None;
        }
        self.checked_at = now;
        let healthy =
            t.has_session() && (0..t.path_count()).any(|i| t.path(i as u8).is_some_and(|p| p.up));
        let after = self.cfg.failover.after_ms * NANOS_PER_MS;
        let since = if healthy {
            self.unhealthy_since = None;
            None
        } else {
            Some(*self.unhealthy_since.get_or_insert(now))
        };
        let back = self.cfg.failover.return_after_s * 1_000 * NANOS_PER_MS;
        let next = if since.is_some_and(|s| now - s >= after) && now - self.switched_at >= after {
            (self.current + 1) % (self.cfg.servers.len() + 1)
        } else if healthy && back > 0 && self.current != 0 && now - self.switched_at >= back {
            0
        } else {
            return None;
        };
        warn!(
            tunnel = %self.cfg.tunnel.name,
            from = %self.name(self.current),
            to = %self.name(next),
            "moving to another server: {}",
            if next == 0 && healthy { "time to try the first server again" } else { "no session or no path up" },
        );
        let seed = crate::keys::random32().ok()?;
        let aimed = self.aimed_at(next);
        let mut fresh = Tunnel::new(crate::daemon::core_config(&aimed, &self.keys, seed), now);
        fresh.set_wall_offset((self.wall_offset)());
        *t = fresh;
        self.current = next;
        self.switched_at = now;
        self.unhealthy_since = None;
        match &aimed.security {
            Security::Encrypted(k) => Some(keys::encode(&k.peer_public.0)),
            Security::InsecurePlaintext => None,
        }
    }
}
