//! The tunnel's side of the reorder release ([`crate::release`]): what it
//! tells the policy of each path, and when it asks.
//!
//! * Each path's expected lateness is its peak one-way delay of the last
//!   two seconds above the fastest live path's floor, plus the adaptive
//!   margin ([`crate::release::LateMargin`]: a packet that arrives late or
//!   twice after its gap was given up widens it), at most the reorder
//!   buffer's `max_delay`. It is refreshed when the timers run, not per
//!   packet.
//! * The policy is asked on every data packet while packets are held, and
//!   at its deadline by the timer.
//!
//! Invariants: `late_ns[p]` is `None` for a path with no delay estimate or
//! that is not up; a give-up by time goes through loss recovery
//! ([`Tunnel::recovery_floor`]) like any other.

use super::{Received, Tunnel};
use crate::release::ReleaseView;
use crate::stats::DropReason;
use crate::Nanos;

impl Tunnel {
    /// Refresh each path's expected lateness (module documentation).
    pub(super) fn update_late_bounds(&mut self, now: Nanos) {
        let paths = &self.paths;
        let range = |i: usize| paths[i].up.then(|| paths[i].rx_delay_range(now)).flatten();
        let fastest = (0..paths.len()).filter_map(range).map(|(f, _)| f).min();
        let cap = self.reorder_max_delay;
        self.late_margin.on_timer(now);
        let margin = self.late_margin.get();
        self.late_ns.clear();
        if let Some(fastest) = fastest {
            self.late_ns.extend((0..paths.len()).map(|i| {
                range(i).map(|(_, peak)| {
                    let above = peak.saturating_sub(fastest).max(0) as Nanos;
                    (above + margin).min(cap)
                })
            }));
        }
    }

    /// An ordered data packet arrived after its gap was given up (late, or
    /// the duplicate of the copy recovery asked for): the margin was too
    /// short, unless recovery asked for the packet (a second copy, or its
    /// resend came after recovery's own wait); the packet is a counted
    /// drop.
    pub(super) fn drop_given_up(&mut self, now: Nanos, seq: u64, reason: DropReason) -> Received {
        if !self.recovery_asked(seq) {
            self.late_margin.on_spurious(now);
        }
        self.drop_counted(reason)
    }

    /// The margin now, ms (status).
    pub(super) fn late_margin_ms(&self) -> f64 {
        self.late_margin.get() as f64 / crate::NANOS_PER_MS as f64
    }

    /// What the policy sees now; `oldest` from
    /// [`crate::reorder::ReorderBuffer::oldest_arrival`].
    fn release_view(&self, now: Nanos, oldest: Option<(Nanos, u64)>) -> ReleaseView<'_> {
        ReleaseView {
            now,
            live: &self.live,
            late_ns: &self.late_ns,
            next: self.reorder.next_seq(),
            oldest,
        }
    }

    /// When the policy may give a gap up with nothing arriving.
    pub(super) fn release_deadline(&mut self) -> Option<Nanos> {
        if self.reorder.held() == 0 {
            return None;
        }
        let oldest = self.reorder.oldest_arrival();
        let now = self.timers_ran_at.unwrap_or(0);
        let due = self.policy.deadline(&self.release_view(now, oldest))?;
        Some(self.recovery_defers(due).map_or(due, |d| d.max(due)))
    }

    /// Release gaps the policy gave up, except those loss recovery still
    /// waits for.
    pub(super) fn apply_policy(&mut self, now: Nanos) {
        if self.reorder.held() > 0 {
            let oldest = self.reorder.oldest_arrival();
            let floor = self.policy.lost_below(&self.release_view(now, oldest));
            let floor = self.recovery_floor(now, floor);
            self.reorder.release_below(floor);
        } else {
            // Nothing held: only recovery's gaps whose wait ran out go
            // (or its deadline would stay due: a spin of the event loop).
            self.recovery_floor(now, self.reorder.next_seq());
        }
    }
}
