//! Reorder release policies: when the reorder buffer may give up a gap
//! before its `max_delay` ([`crate::reorder`]).
//!
//! The tunnel tells a policy what each path has shown and, at each
//! decision, what it knows of the paths ([`ReleaseView`]); the policy
//! answers with a floor below which nothing is waited for any more, and
//! the time at which that floor may rise with no packet arriving.
//!
//! [`PathFrontier`] gives a gap up on two grounds:
//!
//! * **It cannot arrive any more.** Each path is FIFO, so once packet `s`
//!   (or a probe announcing `s`) arrived on path `p`, every earlier
//!   sequence number the sender put on `p` has arrived or is lost. The
//!   minimum of these frontiers over live paths bounds what can still
//!   come (the reasoning of multipath transport receivers, cf. RFC 8684
//!   §3.3's data sequence mapping).
//! * **It can no longer arrive in time.** The first packet after the gap
//!   arrived at `t` and was sent at `t - d`, where `d` is at least the
//!   lowest one-way delay of any live path. A packet the sender sent
//!   before it on path `p` arrives by `t - d` plus `p`'s highest recent
//!   one-way delay, jitter and queue included: by `t` plus `p`'s peak
//!   delay above the fastest path's floor, plus a margin for the sender's
//!   scheduling ([`ReleaseView::late_ns`], from the receiver's own delay
//!   estimates; differences of one-way delays need no synchronised
//!   clocks). Once that has passed on every live path that could still
//!   carry the gap, it is given up — after a few milliseconds on equal
//!   paths instead of the buffer's `max_delay`, which stays the bound when
//!   a path's delay is not known yet. This is the receive-side counterpart
//!   of earliest-arrival scheduling (ECF, Lim et al., CoNEXT 2017): the
//!   sender put each packet where it arrives first, so a packet later
//!   than its path's worst recent delay by more than the margin was lost
//!   on the way.
//! * **Unless its path is still delivering older packets.** The one-way
//!   delay does not hold a packet's wait in the sender's own path queue,
//!   which grows at once when the sender cuts that path's rate: the
//!   packets already queued then leave later than the ones it put on other
//!   paths after them. A path whose latest arrival is still below the gap
//!   may carry it next, so its lateness counts from that arrival rather
//!   than from the first later packet's. A loss on a busy path costs no
//!   wait for this: the path's next arrival passes the gap, and its
//!   frontier gives the gap up.
//!
//! The margin adapts ([`LateMargin`]): a gap given up that arrives after
//! all widens it, as RACK widens its reordering window (RFC 8985 §6.2).
//!
//! With loss recovery on, a gap given up here is asked for again first
//! (`tunnel/recovery.rs`), so a late give-up costs a retransmission, not a
//! loss seen by the inner TCP.
//!
//! Invariants: a policy never releases a gap that a live path may still
//! fill within its expected delay; paths without an estimate never cause
//! a release by time; no allocation per decision.

use crate::{Nanos, PathId, NANOS_PER_MS};

/// Margin on top of a path's peak delay above the fastest path's floor
/// (tuning knob: the sender's release batches and pacing, and the error of
/// its expected-arrival estimate, which lets packets overtake each other
/// by a few milliseconds).
pub const LATE_MARGIN_NS: Nanos = 10 * NANOS_PER_MS;
/// The margin grows by one [`LATE_MARGIN_NS`] each time a gap given up
/// arrives after all (late, or as the duplicate of its resent copy), at
/// most once per [`LATE_BUMP_GAP_NS`] and up to [`LATE_MULT_MAX`] times
/// the margin, and shrinks by one step after [`LATE_DECAY_NS`] without
/// such evidence: RACK's adaptive reordering window (RFC 8985 §6.2.1,
/// which grows it on each spurious retransmission, DSACK, and resets it
/// after a run of recoveries). It is the sender's wait in its own path
/// queue, which the one-way delay does not hold, that it learns (tuning
/// knobs).
pub const LATE_MULT_MAX: u32 = 16;
pub const LATE_BUMP_GAP_NS: Nanos = 100 * NANOS_PER_MS;
pub const LATE_DECAY_NS: Nanos = 10_000 * NANOS_PER_MS;

/// The adaptive margin (see [`LATE_MULT_MAX`]).
#[derive(Debug, Clone, Copy)]
pub struct LateMargin {
    mult: u32,
    changed_at: Option<Nanos>,
}

impl Default for LateMargin {
    fn default() -> Self {
        Self {
            mult: 1,
            changed_at: None,
        }
    }
}

impl LateMargin {
    /// The margin now, ns.
    pub fn get(&self) -> Nanos {
        LATE_MARGIN_NS * u64::from(self.mult)
    }

    /// A packet given up arrived after all: the margin was too short.
    pub fn on_spurious(&mut self, now: Nanos) {
        let recent = self
            .changed_at
            .is_some_and(|t| now.saturating_sub(t) < LATE_BUMP_GAP_NS);
        if !recent && self.mult < LATE_MULT_MAX {
            self.mult += 1;
            self.changed_at = Some(now);
        }
    }

    /// Shrink by a step after a quiet [`LATE_DECAY_NS`].
    pub fn on_timer(&mut self, now: Nanos) {
        if let Some(t) = self.changed_at {
            if self.mult > 1 && now.saturating_sub(t) >= LATE_DECAY_NS {
                self.mult -= 1;
                self.changed_at = Some(now);
            }
        }
    }
}

/// What a policy may know at a decision.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseView<'a> {
    pub now: Nanos,
    /// Whether path `p` is up.
    pub live: &'a [bool],
    /// Per path: how long after the arrival of a later packet (on any path)
    /// a packet sent before it on `p` may still arrive; `None` while `p`'s
    /// delay is not known.
    pub late_ns: &'a [Option<Nanos>],
    /// The next sequence number to deliver (the first gap while packets
    /// are held).
    pub next: u64,
    /// The held packet that arrived first: (arrival time, sequence number).
    pub oldest: Option<(Nanos, u64)>,
}

impl ReleaseView<'_> {
    /// How late a packet on `p` may be, if known.
    pub fn late(&self, p: usize) -> Option<Nanos> {
        self.late_ns.get(p).copied().flatten()
    }
}

/// Decides when missing packets can be declared lost before `max_delay`.
pub trait ReleasePolicy: Send {
    /// Data packet `seq` arrived on `path` at `now`.
    fn on_data(&mut self, path: PathId, seq: u64, now: Nanos);
    /// A control packet on `path` said the sender's next sequence number was
    /// `next_seq` when it was sent.
    fn on_frontier(&mut self, path: PathId, next_seq: u64);
    /// Missing sequence numbers below the result are lost.
    fn lost_below(&self, view: &ReleaseView) -> u64;
    /// When [`ReleasePolicy::lost_below`] may rise with nothing arriving
    /// (the tunnel's timer), if ever.
    fn deadline(&self, _view: &ReleaseView) -> Option<Nanos> {
        None
    }
    /// Forget everything (the sender restarted its sequence numbers).
    fn reset(&mut self);
    fn name(&self) -> &'static str;
}

/// Never proves loss: gaps wait for `max_delay` or window overflow.
pub struct TimeoutOnly;

impl ReleasePolicy for TimeoutOnly {
    fn on_data(&mut self, _: PathId, _: u64, _: Nanos) {}
    fn on_frontier(&mut self, _: PathId, _: u64) {}
    fn lost_below(&self, _: &ReleaseView) -> u64 {
        0
    }
    fn reset(&mut self) {}
    fn name(&self) -> &'static str {
        "timeout"
    }
}

/// Per-path frontier release with expected delays (module documentation).
pub struct PathFrontier {
    frontier: Vec<u64>,
    /// Per path: when its latest data packet arrived.
    heard: Vec<Nanos>,
}

impl PathFrontier {
    pub fn new(paths: usize) -> Self {
        Self {
            frontier: vec![0; paths],
            heard: vec![0; paths],
        }
    }

    /// The lowest frontier of the live paths: nothing below it can come.
    fn frontier_floor(&self, view: &ReleaseView) -> u64 {
        self.frontier
            .iter()
            .zip(view.live)
            .filter(|(_, live)| **live)
            .map(|(f, _)| *f)
            .min()
            .unwrap_or(0)
    }

    /// When the gap at `view.next` stops being waited for: the latest,
    /// over the live paths that could still carry it, of its expected
    /// lateness after the first later arrival or after the path's own
    /// latest arrival (all below the gap), whichever came last. `None`
    /// when no packet is held, when no live path can carry it (the
    /// frontier already gave it up) or when one that can has no delay
    /// estimate.
    fn give_up_at(&self, view: &ReleaseView) -> Option<Nanos> {
        let (arrived, _) = view.oldest?;
        let mut at: Option<Nanos> = None;
        for (p, (f, live)) in self.frontier.iter().zip(view.live).enumerate() {
            if *live && *f <= view.next {
                let from = arrived.max(self.heard[p]);
                let until = from.saturating_add(view.late(p)?);
                at = Some(at.unwrap_or(0).max(until));
            }
        }
        at
    }
}

impl ReleasePolicy for PathFrontier {
    fn on_data(&mut self, path: PathId, seq: u64, now: Nanos) {
        if let Some(f) = self
            .frontier
            .get_mut(path as usize)
            .filter(|_| seq < crate::reorder::SEQ_LIMIT)
        {
            *f = (*f).max(seq + 1);
            self.heard[path as usize] = now;
        }
    }
    fn on_frontier(&mut self, path: PathId, next_seq: u64) {
        if let Some(f) = self
            .frontier
            .get_mut(path as usize)
            .filter(|_| next_seq <= crate::reorder::SEQ_LIMIT)
        {
            *f = (*f).max(next_seq);
        }
    }
    fn lost_below(&self, view: &ReleaseView) -> u64 {
        let floor = self.frontier_floor(view);
        match (self.give_up_at(view), view.oldest) {
            (Some(at), Some((_, seq))) if at <= view.now => floor.max(seq),
            _ => floor,
        }
    }
    fn deadline(&self, view: &ReleaseView) -> Option<Nanos> {
        self.give_up_at(view)
    }
    fn reset(&mut self) {
        self.frontier.iter_mut().for_each(|f| *f = 0);
        self.heard.iter_mut().for_each(|h| *h = 0);
    }
    fn name(&self) -> &'static str {
        "path-frontier"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(live: &'a [bool], late: &'a [Option<Nanos>], now: Nanos) -> ReleaseView<'a> {
        ReleaseView {
            now,
            live,
            late_ns: late,
            next: 0,
            oldest: None,
        }
    }

    #[test]
    fn frontier_alone() {
        let none = [None; 3];
        let mut p = PathFrontier::new(3);
        p.on_data(0, 10, 0);
        p.on_data(1, 7, 0);
        assert_eq!(p.lost_below(&view(&[true, true, false], &none, 0)), 8);
        // A live path that has shown nothing yet blocks any release.
        assert_eq!(p.lost_below(&view(&[true, true, true], &none, 0)), 0);
        p.on_frontier(2, 20);
        assert_eq!(p.lost_below(&view(&[true, true, true], &none, 0)), 8);
        assert_eq!(p.lost_below(&view(&[false, false, false], &none, 0)), 0);
        p.reset();
        assert_eq!(p.lost_below(&view(&[true, true, true], &none, 0)), 0);
    }

    #[test]
    fn a_gap_is_waited_for_as_long_as_the_slowest_path_that_can_fill_it() {
        let ms = NANOS_PER_MS;
        let mut p = PathFrontier::new(3);
        // Packet 5 arrived at 100 ms on path 0; 0..5 are missing. Path 1
        // may be 40 ms late, path 2 is down.
        p.on_data(0, 5, 100 * ms);
        let live = [true, true, false];
        let late = [Some(10 * ms), Some(40 * ms), None];
        let mut v = view(&live, &late, 100 * ms);
        v.oldest = Some((100 * ms, 5));
        // Path 0 passed the gap; path 1 can still carry it until 140 ms.
        assert_eq!(p.deadline(&v), Some(140 * ms));
        assert_eq!(p.lost_below(&v), 0);
        v.now = 139 * ms;
        assert_eq!(p.lost_below(&v), 0);
        v.now = 140 * ms;
        assert_eq!(p.lost_below(&v), 5);
        // Path 1 shows it has moved past the gap: given up at once.
        v.now = 101 * ms;
        p.on_data(1, 6, 101 * ms);
        assert_eq!(p.lost_below(&v), 6);
        assert_eq!(p.deadline(&v), None);
    }

    #[test]
    fn a_path_still_delivering_older_packets_is_waited_for_from_its_latest_arrival() {
        let ms = NANOS_PER_MS;
        let mut p = PathFrontier::new(2);
        // Packet 20 arrived at 100 ms on path 1; path 0 may be 10 ms late
        // and has delivered only older packets, the last one at 90 ms.
        p.on_data(0, 3, 90 * ms);
        p.on_data(1, 20, 100 * ms);
        let live = [true, true];
        let late = [Some(10 * ms), Some(40 * ms)];
        let mut v = view(&live, &late, 100 * ms);
        v.next = 10;
        v.oldest = Some((100 * ms, 20));
        assert_eq!(p.deadline(&v), Some(110 * ms));
        // Path 0 goes on delivering packets from before the gap (its
        // sender's queue drains behind a rate cut): still waited for.
        for (seq, at) in [(5, 105), (6, 109), (7, 118), (8, 127)] {
            p.on_data(0, seq, at * ms);
            v.now = at * ms;
            assert!(p.lost_below(&v) <= v.next, "at {at} ms");
        }
        assert_eq!(p.deadline(&v), Some(137 * ms));
        v.now = 137 * ms;
        assert_eq!(p.lost_below(&v), 20);
        // A loss on the busy path costs no wait: its next packet passes
        // the gap.
        v.now = 128 * ms;
        p.on_data(0, 11, 128 * ms);
        assert_eq!(p.lost_below(&v), 12);
    }

    #[test]
    fn the_margin_grows_on_spurious_give_ups_and_decays_when_quiet() {
        let ms = NANOS_PER_MS;
        let mut m = LateMargin::default();
        assert_eq!(m.get(), LATE_MARGIN_NS);
        m.on_spurious(1_000 * ms);
        // A burst of late packets is one piece of evidence.
        m.on_spurious(1_050 * ms);
        assert_eq!(m.get(), 2 * LATE_MARGIN_NS);
        m.on_spurious(1_200 * ms);
        assert_eq!(m.get(), 3 * LATE_MARGIN_NS);
        m.on_timer(1_200 * ms + LATE_DECAY_NS - 1);
        assert_eq!(m.get(), 3 * LATE_MARGIN_NS);
        m.on_timer(1_200 * ms + LATE_DECAY_NS);
        assert_eq!(m.get(), 2 * LATE_MARGIN_NS);
        for i in 0..100 {
            m.on_spurious(1_000_000 * ms + i * LATE_BUMP_GAP_NS);
        }
        assert_eq!(m.get(), u64::from(LATE_MULT_MAX) * LATE_MARGIN_NS);
    }

    #[test]
    fn an_unknown_delay_never_gives_a_gap_up_by_time() {
        let mut p = PathFrontier::new(2);
        p.on_data(0, 5, 0);
        let live = [true, true];
        let late = [Some(1), None];
        let mut v = view(&live, &late, u64::MAX);
        v.oldest = Some((0, 5));
        assert_eq!(p.deadline(&v), None);
        assert_eq!(p.lost_below(&v), 0);
        assert_eq!(TimeoutOnly.lost_below(&v), 0);
    }
}
