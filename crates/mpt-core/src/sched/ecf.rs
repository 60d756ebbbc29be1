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
//! Invariants: picks only paths that are up; paths whose delay is not yet
//! measured come after every measured one (in index order), so a new path
//! is tried only when it is the only choice or the measured ones are down;
//! ties go to the lower index (deterministic).

use super::{PathView, Scheduler};
use crate::PathId;

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
        paths
            .iter()
            .enumerate()
            .filter(|(_, v)| v.up)
            .min_by_key(|(i, v)| (Self::arrival(v), *i))
            .and_then(|(i, _)| PathId::try_from(i).ok())
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
        }
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
        assert_eq!(at(36), Some(1));
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
