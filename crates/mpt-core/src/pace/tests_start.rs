//! The bottleneck model of `tests.rs` (its [`Sim`]) on how a path starts:
//! from the initial rate to its capacity before its first queue, on a long
//! path and on a LAN-like one (`delay.rs`, `STARTUP_STEP` and
//! `STARTUP_STEP_SHORT`).
//!
//! Invariants: tests only; virtual time, no clock.

use super::*;

/// From the initial rate of 50 Mbit/s, a 200 Mbit/s path is carried at
/// nine tenths of its capacity from 200 ms on: before the first queue the
/// rate grows by at least [`super::delay::STARTUP_STEP`] per sample (with
/// the step at 1 %, doubling per sample, 157 Mbit/s at 0.2-0.3 s and 62 at
/// 0.1-0.2; now 200 and 131). The overshoot stays within the
/// bottleneck's buffer.
/// The status names the startup phase for as long as it lasts, whatever
/// came between (a sample the application did not fill), and "grow" after.
#[test]
fn the_state_shows_startup_until_the_first_queue() {
    // A 10 Mbit/s path whose queue stands at `queue_ms`.
    let sample =
        |queue_ms: u64, limited: bool| super::super::delay::tests::sample(10, queue_ms, 0, limited);
    let mut c = TargetDelay::default();
    c.on_sample(30 * MS, &sample(0, false), Some(10 * MS));
    assert_eq!(c.state(), "hold");
    c.on_sample(60 * MS, &sample(0, true), Some(10 * MS));
    assert_eq!(c.state(), "startup");
    c.on_sample(90 * MS, &sample(20, true), Some(10 * MS));
    assert_eq!(c.state(), "drain");
    c.on_sample(120 * MS, &sample(0, true), Some(10 * MS));
    assert_eq!(c.state(), "grow");
}

#[test]
fn startup_reaches_the_capacity_within_a_few_samples() {
    let mut s = Sim::with(200, Box::new(TargetDelay::default()));
    s.run_until(1_000 * MS);
    let got = s.mbit(0.2, 0.3);
    assert!(got > 180.0, "delivered {got:.1} of 200 at 0.2-0.3 s");
    let early = s.mbit(0.1, 0.2);
    assert!(early > 100.0, "delivered {early:.1} of 200 at 0.1-0.2 s");
    let (dropped, _) = s.dropped(0.0, 1.0);
    assert_eq!(dropped, 0, "the startup overran the buffer");
}

/// A LAN-like path (2 Gbit/s, 0.2 ms each way) is carried at nine tenths
/// of its capacity from 200 ms on: before the first queue, once it
/// delivered half as much again as it started at, its rate doubles per
/// sample ([`super::delay::STARTUP_STEP_SHORT`]), as BBR's Startup
/// doubles per round trip (at most 1.5 times per sample, as a long path
/// grows: 283 Mbit/s at 0.1-0.2 s and 892 at 0.2-0.3; now 999 and 1841),
/// and the bound at twice the delivered rate keeps the overshoot within
/// the bottleneck's buffer.
#[test]
fn a_short_path_is_found_within_a_fifth_of_a_second() {
    let mut s = Sim::with(2_000, Box::new(TargetDelay::default()));
    s.one_way_ns = MS / 5;
    s.run_until(600 * MS);
    let got = s.mbit(0.2, 0.3);
    assert!(got > 1_800.0, "delivered {got:.0} of 2000 at 0.2-0.3 s");
    let early = s.mbit(0.1, 0.2);
    assert!(early > 800.0, "delivered {early:.0} of 2000 at 0.1-0.2 s");
    let (dropped, _) = s.dropped(0.0, 0.6);
    assert_eq!(dropped, 0, "the startup overran the buffer");
}
