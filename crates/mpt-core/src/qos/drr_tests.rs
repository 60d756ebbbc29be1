//! Tests of the class queue (`drr.rs`): DRR shares, per-flow CoDel,
//! overflow from the fattest flow, ECN marks.

use super::*;

fn drain(q: &mut ClassQueue, pool: &mut Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = vec![];
    while let Some(i) = q.pop(Serve::at(0, 1500), pool, |_, _| panic!("no drop")) {
        out.push(i.buf[0]);
    }
    out
}

#[test]
fn round_robin_by_bytes_between_flows() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(100, 1000, false);
    // Flow 1: four 1000-byte packets; flow 2: eight 500-byte ones.
    for _ in 0..4 {
        q.push(1, 0, &[1; 1000], &mut pool);
    }
    for _ in 0..8 {
        q.push(2, 0, &[2; 500], &mut pool);
    }
    assert_eq!((q.packets(), q.bytes(), q.active_flows()), (12, 8000, 2));
    let order = drain(&mut q, &mut pool);
    assert_eq!(order, [1, 2, 2, 1, 2, 2, 1, 2, 2, 1, 2, 2]);
    assert!(q.is_empty() && q.active_flows() == 0);
}

#[test]
fn a_flow_that_becomes_active_is_served_before_the_backlogged_ones() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(100, 1000, false);
    for _ in 0..6 {
        q.push(1, 0, &[1; 1000], &mut pool);
    }
    let pop = |q: &mut ClassQueue, pool: &mut Vec<Vec<u8>>| {
        q.pop(Serve::at(0, 1500), pool, |_, _| panic!("no drop"))
            .map(|i| i.buf[0])
    };
    // Flow 1 has used its first quantum and is an old flow now.
    assert_eq!(pop(&mut q, &mut pool), Some(1));
    assert_eq!(pop(&mut q, &mut pool), Some(1));
    // A flow that becomes active goes first (RFC 8290 §4.1): its
    // quantum (three 400-byte packets), then, flow 1's deficit being
    // used up, its next quantum in the old round.
    for _ in 0..5 {
        q.push(7, 0, &[7; 400], &mut pool);
    }
    let order: Vec<u8> = (0..6).filter_map(|_| pop(&mut q, &mut pool)).collect();
    assert_eq!(order, [7, 7, 7, 7, 7, 1]);
    assert_eq!(drain(&mut q, &mut pool), [1, 1, 1]);
    assert_eq!(q.active_flows(), 0);
}

#[test]
fn a_full_class_drops_from_the_fattest_flow() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(20, 1500, false);
    for _ in 0..20 {
        assert_eq!(
            q.push(9, 0, &[9; 100], &mut pool),
            Pushed::Queued { dropped: 0 }
        );
    }
    assert_eq!(
        q.push(9, 0, &[9; 100], &mut pool),
        Pushed::Refused { dropped: 0 }
    );
    assert_eq!(
        q.push(3, 0, &[3; 100], &mut pool),
        Pushed::Queued {
            dropped: DROP_BATCH_PACKETS
        }
    );
    assert_eq!(q.packets(), 20 - DROP_BATCH_PACKETS + 1);
    let order = drain(&mut q, &mut pool);
    assert_eq!(order, [9, 9, 9, 9, 3]);
}

#[test]
fn a_class_at_its_byte_bound_makes_room_from_the_fattest_flow() {
    // Room for 1000 packets but 40 KB: forty 1000-byte packets.
    let mut pool = vec![];
    let mut q = ClassQueue::new(1000, 1500, false).with_limit_bytes(40_000);
    for _ in 0..30 {
        q.push(9, 0, &[9; 1000], &mut pool);
    }
    for _ in 0..10 {
        q.push(3, 0, &[3; 1000], &mut pool);
    }
    assert_eq!(q.bytes(), 40_000);
    // The fattest flow's packet is refused; another's takes a batch of
    // the fattest flow's.
    assert_eq!(
        q.push(9, 0, &[9; 1000], &mut pool),
        Pushed::Refused { dropped: 0 }
    );
    assert_eq!(
        q.push(3, 0, &[3; 1000], &mut pool),
        Pushed::Queued {
            dropped: DROP_BATCH_PACKETS
        }
    );
    // A large packet takes a batch of the fattest flow's (14 left)
    // and as many more of the next fattest as it needs.
    let r = q.push(5, 0, &[5; 30_000], &mut pool);
    assert_eq!(r, Pushed::Queued { dropped: 15 });
    assert_eq!(q.bytes(), 40_000);
    assert!(pool.len() <= super::super::POOL_BUFFERS);
}

#[test]
fn codel_drops_a_standing_queue() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(10_000, 1500, true);
    let ms = crate::NANOS_PER_MS;
    let mut drops = 0;
    let mut sent = 0;
    // One packet in and one out per ms, 30 ms behind: a standing queue.
    for t in 0..30 {
        q.push(1, t * ms, &[0; 1500], &mut pool);
    }
    for t in 30..1030 {
        q.push(1, t * ms, &[0; 1500], &mut pool);
        if q.pop(Serve::at(t * ms, 1500), &mut pool, |_, aqm| {
            drops += usize::from(aqm)
        })
        .is_some()
        {
            sent += 1;
        }
    }
    assert!(drops > 3, "{drops}");
    assert!(sent > 900);
    assert_eq!(q.oldest().is_some(), !q.is_empty());
}

#[test]
fn codel_marks_an_ecn_capable_standing_queue_instead() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(10_000, 1500, true);
    let ms = crate::NANOS_PER_MS;
    // IPv4 with ECT(0) (checksum left zero: the mark only adjusts it).
    let mut pkt = [0u8; 1500];
    pkt[0] = 0x45;
    pkt[1] = 0x02;
    let (mut drops, mut marked, mut sent) = (0, 0, 0);
    for t in 0..30 {
        q.push(1, t * ms, &pkt, &mut pool);
    }
    for t in 30..1030 {
        q.push(1, t * ms, &pkt, &mut pool);
        let item = q.pop(Serve::at(t * ms, 1500), &mut pool, |_, aqm| {
            drops += usize::from(aqm)
        });
        if let Some(i) = item {
            sent += 1;
            if i.marked {
                assert_eq!(i.buf[1] & ecn::ECN_MASK, ecn::CE);
                marked += 1;
            }
        }
    }
    // The same signals as the drops of `codel_drops_a_standing_queue`,
    // as marks, and every packet delivered.
    assert_eq!(drops, 0);
    assert!(marked > 3, "{marked}");
    assert_eq!(sent, 1000);
}

#[test]
fn a_packet_near_the_bound_is_marked_before_codel_would_act() {
    // A slow start's burst: 40 packets at once, served one per ms.
    // CoDel would first act an interval (100 ms) after the sojourn
    // passed its target; the early mark at 25 ms comes first, for
    // ECN-capable packets only, and nothing is dropped.
    let ms = crate::NANOS_PER_MS;
    for ect in [true, false] {
        let mut pool = vec![];
        let mut q = ClassQueue::new(10_000, 1500, true);
        let mut pkt = [0u8; 1500];
        pkt[0] = 0x45;
        pkt[1] = if ect { 0x02 } else { 0x00 };
        for _ in 0..40 {
            q.push(1, 0, &pkt, &mut pool);
        }
        let mut marked = vec![];
        for t in 1..=40 {
            let serve = Serve {
                mark_sojourn_ns: 25 * ms,
                expired_before: 0,
                ..Serve::at(t * ms, 1500)
            };
            let i = q.pop(serve, &mut pool, |_, _| panic!("no drop")).unwrap();
            if i.marked {
                marked.push(t);
            }
        }
        let want: Vec<u64> = if ect { (25..=40).collect() } else { vec![] };
        assert_eq!(marked, want);
    }
}

#[test]
fn flows_of_one_set_take_buckets_of_their_own() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(1000, 1500, false);
    // Eight flows whose hashes agree modulo the sets (and modulo the
    // buckets, as a plain hash would put them all in one).
    let hashes: Vec<u64> = (0..8).map(|k| 7 + k * FLOW_BUCKETS as u64).collect();
    for &h in &hashes {
        q.push(h, 0, &[1; 100], &mut pool);
    }
    assert_eq!(q.active_flows(), 8);
    // A ninth of the same set shares a bucket (the set is full).
    q.push(7 + 8 * FLOW_BUCKETS as u64, 0, &[1; 100], &mut pool);
    assert_eq!(q.active_flows(), 8);
    // A flow keeps its bucket while it is busy; an idle bucket is
    // taken by a new flow.
    let ms = crate::NANOS_PER_MS;
    let mut got = vec![];
    while let Some(i) = q.pop(Serve::at(ms, 1500), &mut pool, |_, _| {}) {
        got.push(i);
    }
    assert_eq!(got.len(), 9);
    let late = 7 + 9 * FLOW_BUCKETS as u64;
    q.push(late, 500 * ms, &[1; 100], &mut pool);
    q.push(late, 600 * ms, &[1; 100], &mut pool);
    assert_eq!(q.active_flows(), 1);
    assert_eq!(q.packets(), 2);
}

#[test]
fn a_flow_that_is_fattest_but_not_heavy_loses_packets_but_is_not_policed() {
    // Four flows at 1 packet per ms each (TCP-like: what they are
    // served); one has the largest backlog when the class fills.
    let mut pool = vec![];
    let mut q = ClassQueue::new(50, 1500, false);
    let ms = crate::NANOS_PER_MS;
    for t in 0..300u64 {
        for f in 1..=4u64 {
            assert!(q.admit(f, t * ms, 1000));
        }
    }
    for i in 0..51u64 {
        let f = if i < 30 { 1 } else { 2 + i % 3 };
        q.push(f, 300 * ms, &[1; 1000], &mut pool);
    }
    // Flow 1 lost packets from its head, and nobody is policed.
    assert_eq!(q.packets(), 50 - 16 + 1);
    assert!(!q.policing(300 * ms));
    assert!((0..100).all(|_| q.admit(1, 301 * ms, 1000)));
}

#[test]
fn a_flood_that_filled_the_class_is_held_to_its_share() {
    let mut pool = vec![];
    let mut q = ClassQueue::new(50, 1500, false);
    let ms = crate::NANOS_PER_MS;
    let (flood, a, b) = (5u64, 6u64, 7u64);
    // Flows a and b at 1 and 2 packets per ms, the flood at 20: it
    // brings far more than an equal share (heavy).
    for t in 0..300u64 {
        for (f, n) in [(flood, 20), (a, 1), (b, 2)] {
            for _ in 0..n {
                assert!(q.admit(f, t * ms, 1000));
            }
        }
    }
    // The flood fills the class and loses from its head: flagged.
    for _ in 0..51 {
        q.push(flood, 300 * ms, &[5; 1000], &mut pool);
    }
    q.push(a, 300 * ms, &[6; 1000], &mut pool);
    assert!(q.policing(300 * ms));
    // Then: flows a and b at 1 and 2 packets per ms, the flood at 20.
    let mut got = [0u64; 3];
    for t in 301..3_000u64 {
        for (i, (f, n)) in [(flood, 20), (a, 1), (b, 2)].into_iter().enumerate() {
            for _ in 0..n {
                // Counted over the last second (the allowance settles
                // within a few windows).
                if q.admit(f, t * ms, 1000) && t >= 2_000 {
                    got[i] += 1;
                }
            }
        }
    }
    // a and b pass whole; with no capacity known the flood gets about
    // their mean (1.5 / ms: its share of what the class admits).
    assert_eq!((got[1], got[2]), (1_000, 2_000));
    let per_ms = got[0] as f64 / 1_000.0;
    assert!((1.3..1.8).contains(&per_ms), "{per_ms}");
    // With a capacity estimate of 18 packets per ms, a third of its
    // half (3 / ms).
    q.set_capacity(Some(18_000_000));
    let mut flood_got = 0;
    for t in 3_000..6_000u64 {
        for (f, n) in [(flood, 20), (a, 1), (b, 2)] {
            for _ in 0..n {
                if q.admit(f, t * ms, 1000) && f == flood && t >= 5_000 {
                    flood_got += 1;
                }
            }
        }
    }
    let per_ms = flood_got as f64 / 1_000.0;
    assert!((2.8..3.3).contains(&per_ms), "{per_ms}");
}

#[test]
fn a_flow_flagged_once_is_let_go_when_it_no_longer_offers_a_heavy_rate() {
    // A flood at 20 packets per ms and three TCP-like flows at 2; flow a
    // was flagged once (a burst in slow start, say) and then sends its 2
    // per ms in bursts of 80 packets (GRO'd acknowledgements release a
    // window at once), deeper than its bucket: it keeps finding the
    // bucket's bottom, but offers about one share.
    let mut q = ClassQueue::new(50, 1500, false);
    let ms = crate::NANOS_PER_MS;
    let (flood, a, b, c) = (5u64, 6u64, 7u64, 8u64);
    q.set_capacity(Some(8_000_000));
    for t in 0..300u64 {
        for (f, n) in [(flood, 20), (a, 2), (b, 2), (c, 2)] {
            for _ in 0..n {
                q.admit(f, t * ms, 1000);
            }
        }
    }
    q.flag_flow(flood, 300 * ms);
    q.flag_flow(a, 300 * ms);
    let mut refused_a = [0u64; 2];
    let mut flood_got = 0u64;
    for t in 301..4_000u64 {
        let late = usize::from(t >= 2_000);
        for (f, n) in [(flood, 20), (b, 2), (c, 2)] {
            for _ in 0..n {
                let ok = q.admit(f, t * ms, 1000);
                if f == flood && ok && t >= 3_000 {
                    flood_got += 1;
                }
            }
        }
        if t % 40 == 0 {
            for _ in 0..80 {
                if !q.admit(a, t * ms, 1000) {
                    refused_a[late] += 1;
                }
            }
        }
    }
    // Refused while policed, then let go: nothing refused in the last two
    // seconds; the flood stays held near a quarter of the capacity.
    assert!(refused_a[0] > 0, "{refused_a:?}");
    assert_eq!(refused_a[1], 0, "{refused_a:?}");
    let per_ms = flood_got as f64 / 1_000.0;
    assert!(per_ms < 3.0, "{per_ms}");
}
