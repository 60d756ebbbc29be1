//! The tunnel's timers: one deadline per concern, the earliest of them for
//! the I/O layer's wait, and one call that runs every timer that is due.
//!
//! Invariants: [`Tunnel::poll_timeout`] is the minimum of
//! [`Tunnel::timer_deadlines`]; a deadline is `None` while its concern has
//! nothing pending; [`Tunnel::handle_timeout`] may be called early or late
//! (it runs what is due at `now` and nothing else), and remembers `now`
//! for deadlines that are relative to the last run.

use super::{recovery, Tunnel};
use crate::crypto::state::CryptoState;
use crate::Nanos;

impl Tunnel {
    /// Earliest time at which [`Tunnel::handle_timeout`] has work.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        self.timer_deadlines().into_iter().flatten().min()
    }

    /// Each timer's deadline: the send queue, reorder buffer, release
    /// policy, liveness, handshake, loss recovery, path validation and
    /// path removal (diagnostics: which timer is due).
    pub fn timer_deadlines(&mut self) -> [Option<Nanos>; 8] {
        let now = self.timers_ran_at.unwrap_or(0);
        [
            self.queue_deadline(now),
            self.reorder_deadline(),
            self.release_deadline(),
            self.liveness_deadline(),
            self.crypto.as_ref().and_then(CryptoState::poll_timeout),
            self.recovery
                .as_ref()
                .and_then(recovery::Recovery::deadline)
                .into_iter()
                .chain(self.resend_deadline(now))
                .chain(self.fec_deadline(now))
                .min(),
            self.validation_deadline(),
            self.removal_deadline(),
        ]
    }

    /// When the reorder buffer's oldest held packet times out: its
    /// `max_delay` (the hold), and not before loss recovery's wait for
    /// the gaps below it ([`recovery::Recovery::waits_below`]).
    fn reorder_deadline(&mut self) -> Option<Nanos> {
        let (_, seq) = self.reorder.oldest_arrival()?;
        let hold = self.reorder.poll_timeout()?;
        let next = self.reorder.next_seq();
        let waits = self
            .recovery
            .as_ref()
            .and_then(|r| r.waits_below(next, seq));
        Some(waits.map_or(hold, |w| w.max(hold)))
    }

    /// Run timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.finish_removals(now);
        self.liveness_timers(now);
        self.update_qos_paths();
        self.update_late_bounds(now);
        while self.reorder_deadline().is_some_and(|d| d <= now) {
            self.reorder.time_out_oldest();
        }
        self.fec_timeout(now);
        if let Some(c) = self.crypto.as_mut() {
            c.handle_timeout(now);
        }
        let recovery_due = self
            .recovery
            .as_ref()
            .and_then(recovery::Recovery::deadline)
            .is_some_and(|d| d <= now);
        if recovery_due || self.release_deadline().is_some_and(|d| d <= now) {
            self.apply_policy(now);
        }
        self.timers_ran_at = Some(now);
    }
}
