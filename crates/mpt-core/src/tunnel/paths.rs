//! Changing the set of paths of a running tunnel (a reload): adding a
//! path, removing one, and changing a static weight.
//!
//! Every per-path table of the tunnel is indexed by the path's id. A
//! removed path keeps its slot, so that no other path's id changes. It
//! leaves in two steps: at once it carries no more data and our hearing
//! masks stop naming it (told on every path), so the peer moves its
//! traffic off; for one dead interval more what the peer had in flight on
//! it is still received. Then the slot is marked removed and its state
//! reset: it has no remote, sends no probe and no datagram is placed on it
//! (`pairing.rs`). An added path takes a new id, or a removed one (a removed slot only once all [`MAX_PATHS`] ids were used). The
//! peer learns the new path from its probes, which name it
//! (paths pair by name, so ids may differ between the peers).
//!
//! Invariants: at most [`MAX_PATHS`] paths are in use; names of paths in
//! use are unique; at least one path in use is a primary (not a backup);
//! what waited for a removed path moves to the others (as for a path an
//! operator took down).

use super::slot::PathSlot;
use super::Tunnel;
use crate::pace::{PathSender, RateControl, TargetDelay, Unpaced};
use crate::path::{PathConfig, PathState};
use crate::sched::PathView;
use crate::{Nanos, PathId, MAX_PATHS};

impl Tunnel {
    /// The paths in use (not removed, not leaving), by id.
    pub fn active_paths(&self) -> impl Iterator<Item = PathId> + '_ {
        (0..self.paths.len())
            .filter(|i| self.paths[*i].active())
            .map(|i| i as PathId)
    }

    /// Whether path `id` was removed at runtime (its slot is unused).
    pub fn is_removed(&self, id: PathId) -> bool {
        self.paths.get(id as usize).is_none_or(|p| p.removed)
    }

    /// Add a path at runtime; returns its id. Refused when the name is
    /// taken or [`MAX_PATHS`] paths are in use.
    pub fn add_path(&mut self, cfg: PathConfig, now: Nanos) -> Result<PathId, String> {
        // A path of the same name that is still leaving goes now.
        if let Some(i) = (0..self.paths.len())
            .find(|i| self.paths[*i].leaving.is_some() && self.paths[*i].cfg.name == cfg.name)
        {
            self.finish_removal(i, now);
        }
        if self
            .active_paths()
            .any(|i| self.paths[i as usize].cfg.name == cfg.name)
        {
            return Err(format!("a path named '{}' exists already", cfg.name));
        }
        if self.active_paths().count() >= MAX_PATHS {
            return Err(format!("{MAX_PATHS} paths are in use; at most {MAX_PATHS}"));
        }
        let control: Box<dyn RateControl> = if self.paced {
            Box::new(TargetDelay::default())
        } else {
            Box::new(Unpaced)
        };
        let sender = PathSender::new(control, cfg.rate_cap_bps.filter(|_| self.paced));
        let mut state = PathState::new(cfg, now);
        state.probe_due = true;
        // A new id while there is room: a reused one would, for a moment,
        // still mean the old path to the peer (until a probe names it).
        let reuse = if self.paths.len() < MAX_PATHS {
            None
        } else {
            self.paths.iter().position(|p| p.removed)
        };
        let i = match reuse {
            Some(i) => {
                self.paths[i] = PathSlot::new(state, sender);
                i
            }
            None => {
                self.paths.push(PathSlot::new(state, sender));
                self.live.push(false);
                self.views.push(PathView::default());
                self.queue.add_path();
                self.paths.len() - 1
            }
        };
        self.live[i] = false;
        self.pairing.forget_local(i as PathId);
        self.refresh_weights();
        self.refresh_usable();
        Ok(i as PathId)
    }

    /// Remove the path named `name` at runtime; returns the id it had.
    /// The last primary path in use cannot go.
    pub fn remove_path(&mut self, name: &str, now: Nanos) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        if !self.another_primary(i) {
            return Err(format!(
                "'{name}' is the last primary path; add or make another path primary first"
            ));
        }
        self.paths[i].admin_down = true;
        self.paths[i].leaving = Some(now + self.paths[i].cfg.dead);
        // Tell the peer at once that we no longer hear it there.
        self.paths.iter_mut().for_each(|p| p.probe_due = true);
        self.refresh_usable();
        Ok(i as PathId)
    }

    /// The second step of a removal: the slot is freed.
    fn finish_removal(&mut self, i: usize, now: Nanos) {
        let mut cfg = self.paths[i].cfg.clone();
        cfg.remote = None;
        let slot = &mut self.paths[i];
        slot.state = PathState::new(cfg, now);
        slot.usable = false;
        (slot.admin_down, slot.removed) = (true, true);
        slot.leaving = None;
        self.live[i] = false;
        self.pairing.forget_local(i as PathId);
        self.refresh_usable();
    }

    /// Free the slots of paths whose removal is due (timers).
    pub(super) fn finish_removals(&mut self, now: Nanos) {
        for i in 0..self.paths.len() {
            if self.paths[i].leaving.is_some_and(|t| t <= now) {
                self.finish_removal(i, now);
            }
        }
    }

    /// When the next removal is due.
    pub(super) fn removal_deadline(&self) -> Option<Nanos> {
        self.paths.iter().filter_map(|p| p.leaving).min()
    }

    /// Whether a path in use other than `i` is a primary (not a backup).
    pub(super) fn another_primary(&self, i: usize) -> bool {
        self.active_paths()
            .any(|k| k as usize != i && !self.paths[k as usize].cfg.backup)
    }

    /// Change the static weight of the path named `name` (`weight` at
    /// runtime). Static-weight scheduling only: path-aware sending learns
    /// each path's share.
    pub fn set_weight(&mut self, name: &str, weight: u32) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        if self.paced {
            return Err("weights apply to static-weight scheduling; this tunnel learns each path's capacity (path-aware sending), which takes no weight".into());
        }
        if !(1..=1000).contains(&weight) {
            return Err(format!("weight {weight} is not 1 to 1000"));
        }
        self.paths[i].cfg.weight = weight;
        self.refresh_weights();
        Ok(i as PathId)
    }

    /// Give the scheduler every path's weight, as loss adaptation has
    /// scaled it (in hundredths, to keep the factor's resolution).
    pub(super) fn refresh_weights(&mut self) {
        let w: Vec<u32> = self
            .paths
            .iter()
            .map(|p| ((f64::from(p.cfg.weight) * 100.0 * p.weight_factor).round() as u32).max(1))
            .collect();
        self.sched.set_weights(&w);
    }
}
