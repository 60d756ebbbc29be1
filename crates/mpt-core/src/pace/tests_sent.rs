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

fn report(rx_bytes: u64, queueing_ms: u32) -> ReportBody {
    ReportBody {
        rx_bytes,
        rx_packets: rx_bytes / 1_250,
        rx_path_seq: 0,
        hearing_mask: 1,
        queueing_us: queueing_ms * 1_000,
        lost_link: 0,
        lost_congestion: 0,
        jitter_us: QUEUEING_UNKNOWN,
    }
}

/// A 10 Mbit/s path (its cap: no sample has measured it yet) of a 20 ms
/// round trip.
fn ten_mbit() -> PathSender {
    PathSender::new(Box::new(TargetDelay::default()), Some(10_000_000))
}

const RTT: Option<Nanos> = Some(20 * MS);

/// `ms` of sending at 10 Mbit/s (1 250 bytes per ms), all at once.
fn send_ms(s: &mut PathSender, ms: u64) {
    for _ in 0..ms {
        s.on_send(1_250);
    }
}

/// A path that sent 50 ms at its capacity and then nothing, with a report
/// at 0 and at 50 ms of no queue.
fn quiet_from_50_ms() -> PathSender {
    let mut s = ten_mbit();
    s.on_report(0, 0, &report(0, 0), RTT);
    send_ms(&mut s, 50);
    s.on_report(50 * MS, 50 * MS, &report(62_500, 0), RTT);
    s
}

/// The queue a packet sent now meets: the report's while the scheduler
/// keeps sending on the path (at its capacity or above it), brought
/// forward once it all but stopped.
#[test]
fn a_quiet_paths_queue_is_brought_forward_to_now() {
    let mut s = ten_mbit();
    assert_eq!(s.projected_queue_ns(0), 0, "no report yet");
    s.on_report(0, 0, &report(0, 30), RTT);
    // 1 250 bytes per ms: 10 Mbit/s.
    send_ms(&mut s, 100);
    s.on_report(100 * MS, 100 * MS, &report(125_000, 30), RTT);
    // The packets this report measured left at 100 - 20 - 30 = 50 ms,
    // and 50 ms of the capacity was sent since: the report stands.
    assert_eq!(
        s.standing_queue_ns(),
        20 * MS,
        "30 ms reported, 10 standing"
    );
    // No jitter reported: the scheduler sees the whole queue.
    assert_eq!(s.scheduler_threshold_ns(), 0);
    assert_eq!(s.projected_queue_ns(100 * MS), 30 * MS, "steady");
    // 60 ms of the capacity more in 30 ms: twice the capacity, measured.
    send_ms(&mut s, 60);
    assert_eq!(s.projected_queue_ns(130 * MS), 30 * MS, "fed: the report");

    // Sent 50 ms of the capacity, then nothing: a report of 70 ms at
    // 100 ms measured packets that left at 10 ms, 40 ms of sending before
    // the path went quiet.
    let mut s = quiet_from_50_ms();
    // The last sample's delivery rate (10 Mbit/s) drains the queue.
    s.on_report(100 * MS, 100 * MS, &report(125_000, 70), RTT);
    assert_eq!(s.projected_queue_ns(100 * MS), 20 * MS, "70 + 40 - 90");
    assert_eq!(s.projected_queue_ns(110 * MS), 10 * MS);
    assert_eq!(s.projected_queue_ns(120 * MS), 0, "drained");
}

/// A queue is taken to drain only while reports come: once they stop
/// (an outage: nothing arrives), the projection stops falling.
#[test]
fn a_queue_drains_only_while_reports_come() {
    let mut s = ten_mbit();
    s.on_report(0, 0, &report(0, 0), RTT);
    send_ms(&mut s, 100);
    s.on_report(100 * MS, 100 * MS, &report(100_000, 0), RTT);
    send_ms(&mut s, 80);
    // Marks: 0 bytes at 0, 125 000 at 100 ms, 225 000 at 300 ms (the
    // ring interpolates between them).
    s.on_report(300 * MS, 300 * MS, &report(350_000, 200), RTT);
    // Left at 80 ms; 125 000 bytes (100 ms at the capacity) sent since,
    // under half of the 220 ms: brought forward.
    assert_eq!(s.projected_queue_ns(300 * MS), 80 * MS, "200 + 100 - 220");
    assert_eq!(s.projected_queue_ns(320 * MS), 60 * MS);
    assert_eq!(
        s.projected_queue_ns(400 * MS),
        60 * MS,
        "no report for 100 ms: no drain after the first 20"
    );
}

/// A link that keeps its packets in order holds a delay of a few times
/// its jitter under load whatever is sent: the projection stops there.
#[test]
fn a_quiet_paths_queue_keeps_its_links_own_jitter() {
    let mut s = quiet_from_50_ms();
    let jittery = ReportBody {
        jitter_us: 10_000,
        ..report(125_000, 70)
    };
    s.on_report(100 * MS, 100 * MS, &jittery, RTT);
    // Drained to 10 and then 0 with no jitter (the test above); 3 x 10
    // ms of jitter is the link's own, 20 ms above the 10 standing.
    assert_eq!(s.projected_queue_ns(100 * MS), 20 * MS);
    assert_eq!(s.projected_queue_ns(200 * MS), 20 * MS);
}

/// The scheduler takes three times a path's reported jitter (at most
/// [`super::STANDING_QUEUE_NS`]) for the path's own delay variation, and
/// the rest for a queue: a wired path's queue counts whole.
#[test]
fn the_schedulers_threshold_follows_the_paths_jitter() {
    let with_jitter = |rx_bytes, queueing_ms, jitter_us| ReportBody {
        jitter_us,
        ..report(rx_bytes, queueing_ms)
    };
    for (jitter_us, queueing_ms, threshold_ms, seen_ms) in
        [(0, 3, 0, 3), (2_000, 8, 6, 2), (5_000, 12, 10, 2)]
    {
        let mut s = ten_mbit();
        s.on_report(0, 0, &with_jitter(0, queueing_ms, jitter_us), RTT);
        send_ms(&mut s, 100);
        s.on_report(
            100 * MS,
            100 * MS,
            &with_jitter(125_000, queueing_ms, jitter_us),
            RTT,
        );
        assert_eq!(
            s.scheduler_threshold_ns(),
            threshold_ms * MS,
            "jitter {jitter_us} us"
        );
        assert_eq!(
            s.projected_queue_ns(100 * MS),
            seen_ms * MS,
            "jitter {jitter_us} us"
        );
    }
}
