//! [`Ecf`]: earliest completion first — each packet goes to the path on
//! which it is expected to arrive first (Lim et al., "ECF: An MPTCP Path
//! Scheduler to Manage Heterogeneous Paths", CoNEXT 2017; the same idea
//! as BLEST, Ferlin et al., IFIP Networking 2016, which waits for the
//! fast path rather than block the receiver behind the slow one).
//!
//! Expected arrival on path `p` = the time the packet waits for `p`'s
//! pacing budget behind what is already queued there (`wait_ns`) + `p`'s
//! one-way delay (`delay_ns`). A slow path is used only when the fast
//! path's queue has grown by more than the difference of their delays, so
//! at low load everything rides the lowest-delay path, and under load the
//! paths fill in the order of their delays.
//!
//! Paths whose expected arrivals lie within [`TIE_NS`] of the earliest
//! are equally good for the packet (two Ethernet links, eight equal
//! lines): among them it goes to the one with the most pacing budget to
//! spare, so that equal paths share the load instead of the first taking
//! everything its budget allows. Without that, each of them in turn took
//! a whole bucket (4 ms at its rate) into its bottleneck's queue while
//! the others idled, and a TCP held by its send buffer carried its window
//! over that queue's round trip: 8 x 1 Gbit/s read 3.7-4.2 Gbit/s, half
//! of what MPTCP carried, with four of the paths nearly idle.
//!
//! Invariants: picks only paths that are up; paths whose delay is not yet
//! measured come after every measured one (in index order), so a new path
//! is tried only when it is the only choice or the measured ones are down;
//! among near ties of measured paths, the most spare budget, then the
//! earliest arrival, then the lower index wins; among unmeasured ones, the
//! earliest, then the lower index (deterministic).

use std::cmp::Reverse;

use super::{PathView, Scheduler};
use crate::{Nanos, PathId, NANOS_PER_MS};

/// Expected arrivals this close to the earliest count as a tie (tuning
/// knob: well below the delay gaps the scheduler must respect, Wi-Fi
/// against LTE's 35 ms, and above the microseconds by which equal wired
/// paths' measured delays differ).
pub const TIE_NS: Nanos = NANOS_PER_MS;

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Ecf;

impl Ecf {
    fn arrival(v: &PathView) -> (bool, u64) {
        match v.delay_ns {
            Some(d) => (false, d.saturating_add(v.wait_ns)),
            None => (true, v.wait_ns),
        }
    }
}

impl Scheduler for Ecf {
    fn pick(&mut self, paths: &[PathView], _len: usize) -> Option<PathId> {
        let (late, first) = paths.iter().filter(|v| v.up).map(Self::arrival).min()?;
        paths
            .iter()
            .enumerate()
            .filter(|(_, v)| v.up)
            .map(|(i, v)| (i, v, Self::arrival(v)))
            .filter(|(_, _, (l, at))| *l == late && *at <= first.saturating_add(TIE_NS))
            // Paths not measured yet go in index order, as before: their
            // budgets say nothing of their delays (with fifty clients of
            // 5 and 30 ms, spreading the first packets over both cost
            // the first second half its rate).
            .max_by_key(|(i, v, at)| (if late { 0 } else { v.spare_ns }, Reverse(*at), Reverse(*i)))
            .and_then(|(i, _, _)| PathId::try_from(i).ok())
    }

    fn paced(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "ecf"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    const MS: u64 = NANOS_PER_MS;

    fn view(up: bool, wait_ms: u64, delay_ms: Option<u64>) -> PathView {
        PathView {
            up,
            wait_ns: wait_ms * MS,
            delay_ns: delay_ms.map(|d| d * MS),
            spare_ns: 0,
        }
    }

    fn spare(v: PathView, spare_ms: u64) -> PathView {
        PathView {
            spare_ns: spare_ms * MS,
            ..v
        }
    }

    #[test]
    fn equal_paths_share_by_spare_budget() {
        let mut e = Ecf;
        // Equal delays (microseconds apart): the most budget to spare wins.
        let mut v = [
            spare(view(true, 0, Some(1)), 1),
            spare(view(true, 0, Some(1)), 3),
            spare(view(true, 0, Some(1)), 2),
        ];
        v[1].delay_ns = Some(MS + 20_000);
        assert_eq!(e.pick(&v, 1400), Some(1));
        // Beyond the tie, the earliest arrival wins whatever the budget.
        v[1].delay_ns = Some(3 * MS);
        assert_eq!(e.pick(&v, 1400), Some(2));
        // Equal budgets: the earliest arrival, then the lower index.
        let v = [
            view(true, 0, Some(2)),
            view(true, 0, Some(1)),
            view(true, 0, Some(1)),
        ];
        assert_eq!(e.pick(&v, 1400), Some(1));
        // Not measured yet: index order whatever the budget.
        let v = [spare(view(true, 0, None), 1), spare(view(true, 0, None), 3)];
        assert_eq!(e.pick(&v, 1400), Some(0));
    }

    #[test]
    fn low_load_rides_the_lowest_delay_path() {
        let mut e = Ecf;
        let v = [view(true, 0, Some(40)), view(true, 0, Some(5))];
        assert_eq!(e.pick(&v, 1400), Some(1));
    }

    #[test]
    fn slow_path_only_once_the_fast_queue_exceeds_the_delay_gap() {
        let mut e = Ecf;
        // Wi-Fi 5 ms, LTE 40 ms: LTE once Wi-Fi's wait passes 35 ms.
        let mut at = |wifi_wait| {
            e.pick(
                &[view(true, wifi_wait, Some(5)), view(true, 0, Some(40))],
                1,
            )
        };
        assert_eq!(at(34), Some(0));
        assert_eq!(at(35), Some(0), "ties go to the lower index");
        assert_eq!(at(36), Some(1), "a near tie goes to the earliest arrival");
    }

    #[test]
    fn skips_down_paths_and_unmeasured_come_last() {
        let mut e = Ecf;
        let v = [
            view(false, 0, Some(1)),
            view(true, 0, None),
            view(true, 90, Some(50)),
        ];
        assert_eq!(e.pick(&v, 1), Some(2));
        let v = [view(false, 0, Some(1)), view(true, 0, None)];
        assert_eq!(e.pick(&v, 1), Some(1));
        assert_eq!(e.pick(&[view(false, 0, None)], 1), None);
        assert_eq!(e.pick(&[], 1), None);
    }
}
