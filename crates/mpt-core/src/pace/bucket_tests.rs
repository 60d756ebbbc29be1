//! Tests of the pacing budget (`bucket.rs`).

use super::*;

#[test]
fn token_bucket_paces_and_bounds_bursts() {
    let mut b = TokenBucket::default();
    b.refill(0, None);
    assert!(b.has_budget(), "unpaced");
    b.refill(0, Some(8_000_000)); // 1 byte per µs
    let depth = PACING_BURST_MIN_BYTES as usize;
    assert!(b.has_budget());
    b.take(depth + 1000);
    assert!(!b.has_budget());
    // 1000 bytes of debt: budget after 1001 µs.
    assert_eq!(b.budget_at(0), 1_001_000);
    assert_eq!(b.wait_ns(500), 1_500_000);
    b.refill(1_001_000, Some(8_000_000));
    assert!(b.has_budget());
    // A long idle refills to the depth only.
    b.refill(10_000_000_000, Some(8_000_000));
    assert_eq!(b.wait_ns(depth), 0);
    assert_eq!(b.wait_ns(depth + 1000), 1_000_000);
}

#[test]
fn refills_closer_than_a_byte_lose_nothing() {
    // 60 Mbit/s: a byte every 133.3 ns. Refilled every 100 ns, the
    // bucket must gain what the rate gives, and a caller that waits
    // exactly `wait_ns` must then have its budget (it once spun forever
    // in 133 ns steps, each adding nothing).
    let rate = Some(60_000_000);
    let mut b = TokenBucket::default();
    b.refill(0, rate);
    b.take(PACING_BURST_MIN_BYTES as usize * 4);
    let debt = -b.tokens;
    let mut now = 0;
    for _ in 0..10_000 {
        now += 100;
        b.refill(now, rate);
    }
    // 1 ms at 60 Mbit/s is 7,500 bytes (less at most one).
    let gained = b.tokens + debt;
    assert!((7_499..=7_500).contains(&gained), "{gained}");
    let need = b.budget_at(now);
    b.refill(need, rate);
    assert!(b.has_budget(), "budget at the time it said");
    b.take(1);
    let at = b.release_at(need, 1);
    b.refill(at, rate);
    assert!(b.release_ready(1), "a release at the time it said");
}

#[test]
fn releases_wait_for_a_batch_of_budget() {
    let mut b = TokenBucket::default();
    b.refill(0, Some(80_000_000)); // 10 bytes per µs: 1 ms = 10 000 bytes
    b.take(TokenBucket::depth(80_000_000) as usize); // empty
    assert!(!b.has_budget());
    // A batch is 1 ms at the rate; less if less waits.
    assert_eq!(b.release_need(100_000), 10_000);
    assert_eq!(b.release_need(3_000), 3_000);
    assert_eq!(b.release_at(0, 100_000), 1_000_000);
    b.refill(500_000, Some(80_000_000));
    assert!(b.has_budget(), "budget for one packet");
    assert!(!b.release_ready(100_000), "but not for a batch");
    assert!(b.release_ready(4_000));
    b.refill(1_000_000, Some(80_000_000));
    assert!(b.release_ready(100_000));
    // Unpaced: always ready.
    let u = TokenBucket::default();
    assert!(u.release_ready(1 << 20));
}

/// What is left to spare after a packet, as time at the rate: the
/// scheduler's tie-break between equal paths.
#[test]
fn spare_budget_is_what_is_left_after_the_packet() {
    let mut b = TokenBucket::default();
    b.refill(0, None);
    assert_eq!(b.spare_ns(1500), 0, "unpaced: nothing to compare");
    b.refill(0, Some(8_000_000)); // 1 byte per µs
    let depth = PACING_BURST_MIN_BYTES as usize;
    assert_eq!(b.spare_ns(1000), (depth as u64 - 1000) * 1_000);
    assert_eq!(b.spare_ns(depth), 0);
    b.take(depth + 500);
    assert_eq!(b.spare_ns(0), 0, "a debt spares nothing");
}
