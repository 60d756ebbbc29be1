//! The bottleneck model of `tests.rs` (its [`Sim`]) on what a rate sample
//! knows of what was sent while its packets left (`sent_marks.rs`).
//!
//! Invariants: tests only; virtual time, no clock.

use super::*;

/// Each sample is set beside what was sent while its packets left: equal
/// on a path paced at its capacity, far above the delivery rate once the
/// capacity drops under what the sender sends (100 -> 20 Mbit/s: the
/// first samples after the drop count packets sent at 100).
#[test]
fn a_sample_knows_what_was_sent_while_its_packets_left() {
    let mut s = Sim::with(50, Box::new(TargetDelay::default()));
    s.run_until(2_000 * MS);
    let st = s.sender.status(s.now);
    let (sent, got) = (st.sent_then_mbps.unwrap(), st.delivered_mbps.unwrap());
    assert!(
        (sent - got).abs() < 0.2 * got,
        "steady: sent {sent:.1} while {got:.1} delivered"
    );
    s.capacity_bps = 20_000_000;
    let drop = s.now;
    let mut most = 0.0f64;
    while s.now < drop + 100 * MS {
        let end = s.now + STEP;
        s.run_until(end);
        let st = s.sender.status(s.now);
        if let (Some(sent), Some(got)) = (st.sent_then_mbps, st.delivered_mbps) {
            most = most.max(sent / got);
        }
    }
    assert!(
        most > 1.8,
        "after the drop: sent at most {most:.2} times the delivery"
    );
}
