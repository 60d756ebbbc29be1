//! Tests of the recovery ring and its bounds.

use super::*;

#[test]
fn the_ring_holds_at_most_its_bytes_and_keeps_the_newest() {
    let mut r = Recovery::new();
    let body_max = 1400;
    // 4096 packets of 11,440 bytes would be 47 MB.
    let pkt = vec![0x45u8; 11_440];
    for seq in 0..RING_PACKETS as u64 {
        r.store(0, seq, 0, &pkt);
        assert!(r.held_bytes <= RING_BYTES_MAX, "{seq}: {}", r.held_bytes);
    }
    assert_eq!(r.stats.ring_bytes, r.held_bytes as u64);
    let newest = RING_PACKETS as u64 - 1;
    assert!(r.find(newest, body_max).is_some());
    let kept = RING_BYTES_MAX / 11_440;
    assert!(r.find(newest - kept as u64 + 2, body_max).is_some());
    assert!(r.find(0, body_max).is_none(), "the oldest made room");
    // Small packets all fit: every one of the last 4096 is held.
    let small = vec![0x45u8; 1200];
    for seq in RING_PACKETS as u64..3 * RING_PACKETS as u64 {
        r.store(0, seq, 0, &small);
    }
    let last = 3 * RING_PACKETS as u64 - 1;
    assert!((0..RING_PACKETS as u64).all(|k| r.find(last - k, body_max).is_some()));
    assert!(r.held_bytes <= RING_BYTES_MAX);
}

#[test]
fn the_ring_keeps_copies_only_while_a_request_can_come() {
    const MS: Nanos = NANOS_PER_MS;
    assert_eq!(keep_for(100 * MS, 40 * MS, 100 * MS), 280 * MS);
    let mut r = Recovery::new();
    r.set_keep(280 * MS);
    assert_eq!(r.stats.ring_keep_ms, 280);
    // 1400-byte packets every millisecond (11.2 Mbit/s) for 2 s.
    let pkt = vec![0x45u8; 1400];
    for seq in 0..2_000u64 {
        r.store(seq * MS, seq, 0, &pkt);
    }
    let newest = 1_999;
    assert!(r.find(newest, 1400).is_some());
    assert!(r.find(newest - 280, 1400).is_some(), "kept for 280 ms");
    assert!(r.find(newest - 300, 1400).is_none(), "older ones went");
    assert!(r.held_bytes <= 282 * 1500, "{}", r.held_bytes);
    assert!(r.spare.len() <= SPARE_BUFFERS);
}

#[test]
fn a_request_for_any_sequence_number_is_answered_or_counted() {
    // A NACK names whatever numbers the peer (or an attacker past the
    // filter) wrote: the top of the range must not overflow the search.
    let mut r = Recovery::new();
    r.store(0, 7, 0, &[0x45u8; 100]);
    for seq in [u64::MAX, u64::MAX - 1, u64::MAX - MAX_FRAGMENTS as u64, 0] {
        assert!(r.find(seq, 1400).is_none(), "{seq}");
    }
    assert!(r.find(7, 1400).is_some());
}

#[test]
fn a_loss_asked_for_by_path_and_by_tunnel_number_is_sent_again_once() {
    // The receiver's path NACK and its release policy both ask for one
    // lost datagram; on a slow path both requests come before the paced
    // resend leaves. One resend, whichever comes first.
    use crate::wire::{NackBody, NackKind};
    let body_max = 1400;
    for path_first in [true, false] {
        let mut r = Recovery::new();
        for seq in 0..10u64 {
            r.store(0, seq, 0, &[0x45u8; 100]);
            r.sent.on_sent(1, seq as u32, seq);
        }
        let mut by_tunnel = [0u8; 64];
        let n = NackBody::write(NackKind::Tunnel, &[4], &mut by_tunnel).unwrap();
        let mut by_path = [0u8; 64];
        let m = NackBody::write(NackKind::Path(1), &[4], &mut by_path).unwrap();
        let mut ask = |raw: &[u8]| {
            let body = NackBody::parse(raw).unwrap();
            r.on_nack(1_000, 50 * NANOS_PER_MS, &body, raw, body_max, |_| Some(9));
        };
        if path_first {
            ask(&by_path[..m]);
            ask(&by_tunnel[..n]);
        } else {
            ask(&by_tunnel[..n]);
            ask(&by_path[..m]);
        }
        assert_eq!(r.retransmit.len(), 1, "path first: {path_first}");
        assert_eq!(r.stats.resend_in_flight, 1);
        assert!(r.resend_stalled(2_000, 4, body_max), "waits already");
        assert_eq!(r.retransmit.len(), 1);
    }
}

#[test]
fn late_answers_back_the_waits_off_those_still_pending_included() {
    const MS: Nanos = NANOS_PER_MS;
    let mut r = Recovery::new();
    // Before any evidence the waits start backed off (RFC 6298 §2.1's
    // conservative start): a path of 28 ms round trip waits 112, not 56.
    assert_eq!(r.backoff, BACKOFF_START);
    let wait = r.wait(Some(28 * MS), Some(28 * MS));
    assert_eq!(wait, 56 * MS);
    assert_eq!(
        r.hold(Some(28 * MS), Some(28 * MS), 100 * MS),
        100 * MS + 112 * MS
    );
    // A gap asked at 1 s, its wait starting 10 ms later (behind others).
    let (start, cap) = (1_010 * MS, 1_000 * MS + RECOVERY_WAIT_MAX_NS);
    r.pending.push_back((7, start, wait, cap));
    assert_eq!(r.deadline(), Some(start + 112 * MS));
    // An answer comes after its gap was given up: every wait doubles, the
    // pending gap's too; not again within the bump gap.
    assert!(r.on_late_answer(1_050 * MS));
    assert_eq!(r.deadline(), Some(start + 224 * MS));
    assert!(!r.on_late_answer(1_050 * MS + BACKOFF_BUMP_GAP_NS - 1));
    assert!(r.on_late_answer(1_050 * MS + BACKOFF_BUMP_GAP_NS));
    assert_eq!(r.backoff, BACKOFF_MAX);
    assert!(!r.on_late_answer(2_000 * MS), "at most BACKOFF_MAX");
    assert_eq!(r.deadline(), Some(start + 448 * MS));
    // Never beyond the longest wait from the request.
    r.pending.push_back((8, start, 100 * MS, cap));
    r.pending.pop_front();
    assert_eq!(r.deadline(), Some(cap));
    assert_eq!(r.stats.wait_backoff, BACKOFF_MAX);
    // Without late answers the backoff halves every BACKOFF_DECAY_NS, to 1.
    let mut t = 2_000 * MS;
    r.decay_backoff(t);
    assert_eq!(r.backoff, BACKOFF_MAX, "not yet");
    for want in [BACKOFF_MAX / 2, BACKOFF_MAX / 4, 1, 1] {
        t += BACKOFF_DECAY_NS;
        r.decay_backoff(t);
        assert_eq!(r.backoff, want);
    }
}

#[test]
fn the_arriving_packets_size_is_smoothed() {
    let mut r = Recovery::new();
    r.on_packet_len(11_388);
    assert_eq!(r.packet_bytes, 11_388);
    for _ in 0..200 {
        r.on_packet_len(1_400);
    }
    assert!(
        (1_400..1_500).contains(&r.packet_bytes),
        "{}",
        r.packet_bytes
    );
}

#[test]
fn the_reorder_buffer_does_not_give_up_a_gap_still_waited_for() {
    use crate::testing::TestConfig;
    const MS: Nanos = NANOS_PER_MS;
    let mut t = TestConfig::new(1, 2)
        .recover(true)
        .reorder(4096, 20 * MS)
        .tunnel();
    let s = 1_000 * MS;
    let pkt = [0x45u8; 100];
    t.reorder.insert(0, &pkt, s);
    t.reorder.insert(2, &pkt, s);
    let hold = t.reorder.poll_timeout().unwrap();
    // Gap 1 was asked for with many others: its answer's wait starts
    // behind theirs, 300 ms on, past the buffer's hold.
    let r = t.recovery.as_mut().unwrap();
    r.pending
        .push_back((1, s + 300 * MS, 50 * MS, s + RECOVERY_WAIT_MAX_NS));
    let due = r.deadline().unwrap();
    assert!(due > hold);
    assert_eq!(r.waits_below(1, 2), Some(due));
    assert_eq!(r.waits_below(2, 3), None, "nothing waited for there");
    assert_eq!(t.timer_deadlines()[1], Some(due));
    t.handle_timeout(hold + MS);
    assert_eq!(t.reorder.next_seq(), 1, "still held at the buffer's hold");
    assert_eq!(t.reorder.stats().lost_by_timeout, 0);
    // The answer comes: delivered in order, nothing lost.
    t.reorder.insert(1, &pkt, due - MS);
    assert_eq!(t.reorder.next_seq(), 3);
    assert_eq!(t.reorder.stats().lost_by_timeout, 0);

    // Without an answer the gap goes at its wait's end.
    t.reorder.insert(5, &pkt, due);
    let hold = t.reorder.poll_timeout().unwrap();
    let r = t.recovery.as_mut().unwrap();
    r.pending.clear();
    r.pending
        .push_back((3, due + 100 * MS, 50 * MS, due + RECOVERY_WAIT_MAX_NS));
    let end = r.deadline().unwrap();
    assert!(end > hold);
    t.handle_timeout(end - 1);
    assert_eq!(t.reorder.next_seq(), 3);
    t.handle_timeout(end);
    assert_eq!(t.reorder.next_seq(), 6, "given up at the wait's end");
}
