//! Tests of a path's estimators and liveness (`path.rs`).

use super::*;

pub(crate) fn path() -> PathState {
    let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
    PathState::new(
        PathConfig {
            name: "p".into(),
            local_key: 0,
            local: a,
            remote: Some(a),
            weight: 1,
            rate_cap_bps: None,
            backup: false,
            keepalive: 100 * NANOS_PER_MS,
            dead: 500 * NANOS_PER_MS,
        },
        0,
    )
}

#[test]
fn loss_and_reordering_from_path_sequence() {
    let mut p = path();
    for s in [10u16, 11, 13, 12, 16] {
        p.on_receive(0, 100, s, 0);
    }
    // 10..=16 expected (7), 5 received.
    assert_eq!(p.rx_lost(), 2);
    assert_eq!(p.rx_out_of_order, 1);
}

#[test]
fn one_way_delay_percentiles_above_the_minimum_whatever_the_clock_offset() {
    // The peer's clock is 3 s ahead: transits are negative. 1,000
    // packets 10 ms above the minimum, one of them 60 ms above.
    let offset = -3_000 * NANOS_PER_MS as i64;
    let mut p = path();
    p.on_receive(0, 100, 0, offset);
    for s in 1..1000u16 {
        let extra = if s == 500 { 60 } else { 10 };
        p.on_receive(0, 100, s, offset + extra * NANOS_PER_MS as i64);
    }
    let o = p.status(0).owd_above_min.unwrap();
    assert_eq!(o.samples, 1000);
    // Quarter-octave buckets: within 19 % above the true value.
    assert!((10.0..=11.9).contains(&o.percentiles.p50_ms), "{o:?}");
    assert!((10.0..=11.9).contains(&o.percentiles.p99_ms), "{o:?}");
    assert_eq!(o.percentiles.max_ms, 60.0);
    assert!((o.mean_ms - 10.04).abs() < 0.01, "{o:?}");
}

#[test]
fn sequence_wraps() {
    let mut p = path();
    for s in [u16::MAX - 1, u16::MAX, 0, 1] {
        p.on_receive(0, 100, s, 0);
    }
    assert_eq!(p.rx_lost(), 0);
    assert_eq!(p.rx_out_of_order, 0);
    // Reported extended: 65 534 + 3.
    assert_eq!(p.report().1, 65_537);
}

#[test]
fn one_way_delay_outside_zero_to_rtt_means_the_clocks_differ() {
    let mut p = path();
    assert_eq!(p.status(0).owd_clocks, None);
    p.on_rtt_sample(20 * NANOS_PER_MS);
    p.on_receive(NANOS_PER_MS, 100, 0, 10 * NANOS_PER_MS as i64);
    assert_eq!(
        p.status(NANOS_PER_MS).owd_clocks.as_deref(),
        Some("consistent")
    );
    // A peer whose clock is 50 ms behind: transit reads 60 ms > RTT.
    let mut q = path();
    q.on_rtt_sample(20 * NANOS_PER_MS);
    q.on_receive(NANOS_PER_MS, 100, 0, 60 * NANOS_PER_MS as i64);
    assert_eq!(q.status(NANOS_PER_MS).owd_clocks.as_deref(), Some("offset"));
}

#[test]
fn rtt_follows_rfc6298() {
    let mut p = path();
    p.on_rtt_sample(8_000);
    assert_eq!((p.rtt.smoothed(), p.rtt.var()), (Some(8_000), 4_000));
    p.on_rtt_sample(16_000);
    // SRTT = 7/8·8000 + 1/8·16000 = 9000; RTTVAR = 3/4·4000 + 1/4·8000 = 5000.
    assert_eq!((p.rtt.smoothed(), p.rtt.var()), (Some(9_000), 5_000));
    assert_eq!(p.rtt_min, Some(8_000));
}

#[test]
fn a_jittery_path_starts_from_more_than_its_luckiest_round_trip() {
    let mut p = path();
    assert_eq!(p.start_rtt(), None);
    // A veth: 0.1 ms give or take 10 µs.
    for r in [100_000, 110_000, 95_000, 105_000] {
        p.on_rtt_sample(r);
    }
    assert!(p.start_rtt().unwrap() < 200_000, "{:?}", p.start_rtt());
    // 10 ms with 7.8 ms of jitter each way: some round trips read 1 ms.
    let mut p = path();
    for r in [12_000_000, 1_000_000, 22_000_000, 3_000_000, 900_000] {
        p.on_rtt_sample(r);
    }
    assert_eq!(p.rtt_min(), Some(900_000));
    assert!(
        p.start_rtt().unwrap() > 2_400_000 * 4,
        "{:?}",
        p.start_rtt()
    );
}

#[test]
fn jitter_follows_rfc3550() {
    let mut p = path();
    p.on_receive(0, 1, 0, 1_000);
    p.on_receive(0, 1, 1, 1_000 + 1_600);
    // J = 0 + (1600 - 0)/16 = 100.
    assert_eq!(p.meters.jitter.jitter_ns(), Some(100));
    let s = p.status(0);
    assert_eq!(s.jitter_ms, Some(0.0001));
}

#[test]
fn extreme_timestamps_and_sequences_do_not_overflow() {
    // Found by fuzzing: transit times from hostile timestamps.
    let mut p = path();
    p.on_receive(0, 1, 0, i64::MIN);
    p.on_receive(0, 1, u16::MAX, i64::MAX);
    p.on_receive(0, 1, 5, i64::MIN);
    let s = p.status(0);
    assert!(s.jitter_ms.unwrap() > 0.0);
    assert!(p.rx_lost() < u64::MAX);
}

#[test]
fn recent_loss_from_peer_reports() {
    let mut p = path();
    assert!(!p.on_peer_report(0, 0, 0));
    // 1000 sent, 900 received, over several reports.
    let mut changed = false;
    for k in 1..=10u32 {
        changed |= p.on_peer_report(0, u64::from(k) * 90, k * 100);
    }
    assert!(changed);
    let l = p.tx_loss_recent();
    assert!(l > 0.05 && l <= 0.1, "{l}");
    // A clean stretch brings it down again.
    for k in 11..=60u32 {
        p.on_peer_report(0, 900 + u64::from(k - 10) * 100, k * 100);
    }
    assert!(p.tx_loss_recent() < 0.01, "{}", p.tx_loss_recent());
    // Few packets: the interval closes after a second anyway.
    let s = 6000;
    let mut q = path();
    q.on_peer_report(0, 0, s);
    assert!(!q.on_peer_report(500 * NANOS_PER_MS, 5, s + 10));
    assert!(q.on_peer_report(1_000 * NANOS_PER_MS, 5, s + 10));
    assert!(q.tx_loss_recent() > 0.1);
    q.reset_loss();
    assert_eq!(q.tx_loss_recent(), 0.0);
}

#[test]
fn lifetime_loss_counts_from_the_peers_restart() {
    let mut p = path();
    for _ in 0..10_000 {
        p.on_transmit(100);
    }
    p.on_peer_report(0, 9_900, 9_999);
    assert!((p.status(0).tx_loss - 0.01).abs() < 1e-9);
    // The peer restarts: its reports count from zero while our path
    // sequence goes on. 1,000 more sent, 990 of them received.
    p.peer_restarted();
    assert_eq!(p.status(0).tx_loss, 0.0);
    for _ in 0..1_000 {
        p.on_transmit(100);
    }
    p.on_peer_report(0, 990, 10_999);
    assert!(
        (p.status(0).tx_loss - 0.01).abs() < 1e-9,
        "{}",
        p.status(0).tx_loss
    );
    // A report naming a packet from before the restart reads as no loss.
    p.on_peer_report(0, 3, 9_990);
    assert_eq!(p.status(0).tx_loss, 0.0);
}
