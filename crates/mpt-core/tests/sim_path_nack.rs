//! Path NACKs in virtual time (`tunnel/path_loss.rs`): a loss on a fast
//! path beside a much slower one is asked for by its path sequence number
//! one fast round trip after it shows, so it is filled before the reorder
//! buffer's `max_delay`, where a request after the release policy's proof
//! (the slow path's delay later) comes too late.

mod common;

use common::*;
use mpt_core::tunnel::{ReleaseKind, Tunnel};

fn side(s: u8) -> Tunnel {
    TestConfig::new(s, 2)
        .release(ReleaseKind::PathFrontier)
        .recover(true)
        .reorder(4096, 100 * MS)
        .tunnel()
}

#[test]
fn losses_on_a_fast_path_beside_a_slow_one_are_filled_in_order() {
    // 5 ms with 3 % loss each way, beside 90 ms without loss.
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.03), (90, 0, 0.0)]), [side(0), side(1)], 11);
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 3_000, MS / 2, 0);
    sim.deliver_until(end + 1_000 * MS);
    assert!(
        sim.sent_on_path[1] > 100,
        "both paths carry data: {:?}",
        sim.sent_on_path
    );
    let lost = sim.lost_data.len();
    assert!(lost > 5, "the link lost data: {lost}");
    let rx = sim.t[1].recovery_stats().cloned().unwrap_or_default();
    let tx = sim.t[0].recovery_stats().cloned().unwrap_or_default();
    assert!(rx.path_losses_requested >= lost as u64, "{rx:?}");
    assert!(tx.path_requests_resent > 0, "{tx:?}");
    // Every packet arrives, once and in order: each loss was filled
    // before its gap was given up.
    assert_in_order_exactly_once(&sim.delivered[1], 3_000, &[]);
    let reorder = sim.t[1].reorder_stats();
    assert_eq!(reorder.timeout_releases, 0, "{reorder:?}");
}

#[test]
fn losses_on_long_paths_are_filled_after_max_delay() {
    // Two paths of 80 ms each way, one losing 2 %: a resend comes a round
    // trip (160 ms) after the loss shows, later than the reorder buffer's
    // `max_delay` of 100 ms. Recovery holds the gap for it (the hold is
    // `max_delay` plus the wait for a resend), so the losses are filled;
    // before, each such gap was given up at 100 ms and its resend came
    // late (the sweep's long LTE-like cases: 20 of 20 lost here).
    let mut sim = Sim::with_tunnels(links(&[(80, 0, 0.02), (80, 0, 0.0)]), [side(0), side(1)], 5);
    sim.deliver_until(2_000 * MS);
    let end = sim.run_traffic(2_000 * MS, 3_000, MS / 2, 0);
    sim.deliver_until(end + 2_000 * MS);
    let lost = sim.lost_data.len();
    assert!(lost > 10, "the link lost data: {lost}");
    let rx = sim.t[1].recovery_stats().cloned().unwrap_or_default();
    let reorder = sim.t[1].reorder_stats();
    // A resend or a request may be lost too (2 % each way): one gap of
    // the link's losses may go.
    assert!(rx.recovered + 1 >= lost as u64, "{lost} lost: {rx:?}");
    assert!(reorder.lost <= 1, "{reorder:?}");
    assert_eq!(reorder.timeout_releases, 0, "{reorder:?}");
    assert_eq!(reorder.late_delivered, 0, "{reorder:?}");
}

#[test]
fn resends_on_a_lossy_fast_path_are_copied_to_the_clean_one() {
    // 5 ms losing 4 % each way beside 8 ms without loss: the recovery
    // path is the fast one (its loss is within the slack), so a resend
    // may be lost again; its copy on the clean path is not.
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.04), (8, 0, 0.0)]), [side(0), side(1)], 3);
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 4_000, MS / 2, 0);
    sim.deliver_until(end + 1_000 * MS);
    let lost = sim.lost_data.len();
    assert!(lost > 5, "the link lost data: {lost}");
    let tx = sim.t[0].recovery_stats().cloned().unwrap_or_default();
    assert!(tx.retransmitted > 0, "{tx:?}");
    assert!(tx.resend_copies > 0, "{tx:?}");
    assert!(tx.resend_copies <= tx.retransmitted, "{tx:?}");
    // Both copies count once: the second one is a duplicate.
    assert_in_order_exactly_once(&sim.delivered[1], 4_000, &[]);
    let reorder = sim.t[1].reorder_stats();
    assert_eq!(reorder.lost, 0, "{reorder:?}");
}

#[test]
fn resends_between_paths_that_lose_alike_are_not_copied() {
    // Two paths losing 3 % each way: a copy on the other path would be
    // lost as often as the resend, and would take its capacity.
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.03), (8, 0, 0.03)]), [side(0), side(1)], 3);
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 4_000, MS / 2, 0);
    sim.deliver_until(end + 1_000 * MS);
    let tx = sim.t[0].recovery_stats().cloned().unwrap_or_default();
    assert!(tx.retransmitted > 20, "{tx:?}");
    assert!(tx.resend_copies * 10 <= tx.retransmitted, "{tx:?}");
}
