//! One path as the tunnel holds it: what the path knows of itself
//! ([`PathState`]: addresses, liveness timers, delay and loss estimates),
//! how fast to send on it ([`PathSender`]: rate model and pacing budget),
//! and the tunnel's own flags for it. Everything per path lives here, in
//! one slot per path id; the tunnel keeps only two scratch slices beside
//! the slots, each the input of a policy trait that takes a slice: the
//! scheduler's [`crate::sched::PathView`]s and the release policy's
//! `live` and `late_ns` (`release.rs`).
//!
//! Invariants:
//! * a slot's id is its index and never changes; a path removed at
//!   runtime keeps its slot (`removed`), so every other path keeps its id;
//! * `usable` implies the state's `up`, not `admin_down` and not `removed`
//!   ([`super::Tunnel::refresh_usable`] is the one writer of `usable`);
//! * `leaving` is set only on a path being removed, until its slot is
//!   freed (`paths.rs`).

use std::ops::{Deref, DerefMut};

use crate::pace::PathSender;
use crate::path::PathState;
use crate::Nanos;

/// See the module documentation.
pub(super) struct PathSlot {
    /// What the path knows of itself (read through `Deref`).
    pub state: PathState,
    /// Rate model and pacing budget (`crate::pace`).
    pub sender: PathSender,
    /// May carry data now: up, and either not a backup path or no other
    /// path is up (see [`super::Tunnel::refresh_usable`]).
    pub usable: bool,
    /// An operator took the path down (`mpt path NAME down`), or it is
    /// being removed: never usable.
    pub admin_down: bool,
    /// Removed at runtime (a reload): the slot stays, unused.
    pub removed: bool,
    /// Being removed: until when its packets are still received.
    pub leaving: Option<Nanos>,
}

impl PathSlot {
    /// A path that is not up yet.
    pub fn new(state: PathState, sender: PathSender) -> Self {
        Self {
            state,
            sender,
            usable: false,
            admin_down: false,
            removed: false,
            leaving: None,
        }
    }

    /// In use: neither removed nor leaving.
    pub fn active(&self) -> bool {
        !self.removed && self.leaving.is_none()
    }

    /// The standing queue a packet sent now is expected to meet at the
    /// path's bottleneck, for the schedulers' expected arrival: the
    /// receiver's estimate brought forward to `now`
    /// ([`PathSender::projected_queue_ns`]), unless
    /// every data packet we sent on the path has been reported arrived
    /// ([`PathState::nothing_out`]), for then the queue those delays
    /// measured held ours and has drained. After an outage, the delays of
    /// the backlog it released read seconds of queue for a second more,
    /// and kept the scheduler off a link that offered capacity
    /// (`sim_trace.rs`).
    pub fn queue_ahead_ns(&self, now: Nanos) -> Nanos {
        if self.state.nothing_out() {
            0
        } else {
            self.sender.projected_queue_ns(now)
        }
    }
}

impl Deref for PathSlot {
    type Target = PathState;
    fn deref(&self) -> &PathState {
        &self.state
    }
}

impl DerefMut for PathSlot {
    fn deref_mut(&mut self) -> &mut PathState {
        &mut self.state
    }
}
