//! The reorder release by expected delay, in virtual time: a path that
//! silently stops delivering (a blackhole the liveness check has not
//! noticed yet) loses every packet put on it, and nothing after them on
//! that path reveals the gaps. The receiver gives each gap up once the
//! path's expected delay above the fastest path (plus jitter and margin,
//! [`mpt_core::release`]) has passed after the first later arrival, not
//! after the reorder buffer's `max_delay`.

mod common;

use common::*;
use mpt_core::release::LATE_MARGIN_NS;
use mpt_core::tunnel::ReleaseKind;
use mpt_core::Nanos;

/// Paths of 5 and 30 ms, one packet per millisecond alternating between
/// them (static equal weights); at 1.5 s the 30 ms path drops everything
/// from side 0. Returns the longest time without a delivery at the
/// receiver from the cut until the path is declared down, and the reorder
/// counters.
fn blackhole(max_delay: Nanos) -> (Nanos, u64, u64) {
    let side = |s: u8| {
        TestConfig::new(s, 2)
            .release(ReleaseKind::PathFrontier)
            .reorder(4096, max_delay)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.0), (30, 0, 0.0)]), [side(0), side(1)], 5);
    let cut = 1_500 * MS;
    let (mut last, mut seen, mut longest) = (cut, 0usize, 0);
    let mut now = 1_000 * MS;
    for i in 0..800 {
        if now == cut {
            sim.links[1][0].up = false;
            seen = sim.delivered[1].len();
        }
        sim.deliver_until(now);
        sim.send_data(now, 0, i);
        sim.pump_control(now);
        if now > cut && sim.delivered[1].len() > seen {
            longest = longest.max(now - last);
            (last, seen) = (now, sim.delivered[1].len());
        }
        now += MS;
    }
    let s = sim.t[1].reorder_stats().clone();
    (longest, s.timeout_releases, s.policy_releases)
}

#[test]
fn gaps_on_a_silent_path_are_given_up_after_its_expected_delay() {
    let (longest, timeouts, policy) = blackhole(200 * MS);
    // 25 ms of delay above the fast path, the margin, and one packet's
    // spacing; no jitter on these links.
    let bound = 25 * MS + LATE_MARGIN_NS + 2 * MS;
    assert!(
        longest <= bound,
        "longest stall {} ms, bound {} ms",
        longest / MS,
        bound / MS
    );
    assert!(policy > 0, "released by the policy: {policy}");
    assert_eq!(timeouts, 0, "no gap waited for max_delay");
}
