//! The QoS stage alone: defaults, classification order, precedence,
//! policing and the bound on a packet's wait.

use super::*;
use crate::NANOS_PER_MS;

const MS: Nanos = NANOS_PER_MS;

/// IPv4/UDP from port `sport` with TOS `tos`, `len` bytes.
fn udp(sport: u16, tos: u8, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(28)];
    p[0] = 0x45;
    p[1] = tos;
    p[9] = 17;
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p
}

#[test]
fn the_standard_classes_put_ef_in_real_time_and_the_rest_in_best_effort() {
    let q = Qos::new(QosConfig::standard(), 1, 1400, 100 * MS);
    assert_eq!(q.class_count(), 2);
    let ef = q.classify(&udp(5004, 46 << 2, 200));
    let va = q.classify(&udp(5004, 44 << 2, 200));
    let be = q.classify(&udp(5004, 0, 200));
    let af = q.classify(&udp(5004, 34 << 2 | 1, 200)); // AF41, ECT(1)
    assert!(q.is_realtime(ef) && q.is_realtime(va));
    assert_eq!((ef, va, be, af), (0, 0, 1, 1));
    assert!(!q.is_redundant(ef));
    // Not IP: the default class.
    assert_eq!(q.classify(&[0u8; 3]), 1);
}

#[test]
fn a_default_class_is_added_at_the_lowest_precedence() {
    let only = QosConfig {
        classes: vec![ClassConfig {
            matcher: ClassMatch {
                protocol: Some(6),
                ..ClassMatch::default()
            },
            ..ClassConfig::best_effort("tcp", 3)
        }],
    }
    .normalized();
    assert_eq!(only.classes.len(), 2);
    assert_eq!(
        (only.classes[1].name.as_str(), only.classes[1].priority),
        ("besteffort", 4)
    );
}

#[test]
fn precedence_then_the_policer_and_the_wait_bound() {
    let hi = ClassConfig {
        matcher: ClassMatch {
            ports: vec![(100, 100)],
            ..ClassMatch::default()
        },
        max_bps: Some(1_000_000),
        ..ClassConfig::best_effort("hi", 0)
    };
    let cfg = QosConfig {
        classes: vec![ClassConfig::best_effort("rest", 5), hi],
    };
    let mut q = Qos::new(cfg, 1, 1400, 50 * MS);
    let (rest, h_rest) = (q.classify(&udp(7, 0, 1000)), q.flow(&udp(7, 0, 1000)));
    let (hi, h_hi) = (q.classify(&udp(100, 0, 1000)), q.flow(&udp(100, 0, 1000)));
    assert_ne!(h_rest, h_hi);
    assert_eq!(
        (rest, hi),
        (0, 1),
        "matching order is the file's; the catch-all last"
    );
    // The policer: 1 Mbit/s with a 3000-byte bucket takes three packets.
    let admitted = (0..5).filter(|_| q.police(hi, 0, 1000)).count();
    assert_eq!(admitted, 3);
    assert!(q.police(rest, 0, 1000), "no ceiling");
    q.enqueue(rest, h_rest, 0, &udp(7, 0, 1000));
    q.enqueue(hi, h_hi, 10 * MS, &udp(100, 0, 1000));
    assert_eq!(q.packets(), 2);
    assert_eq!(q.oldest(), Some(0));
    // The later packet of higher precedence leaves first.
    assert_eq!(q.next_len(20 * MS), Some((hi, 1000)));
    let (c, item) = q.pop(20 * MS, |_| panic!("no drop")).unwrap();
    assert_eq!((c, item.at), (hi, 10 * MS));
    q.recycle(item.buf);
    // The other waited beyond the 50 ms bound: dropped, counted.
    assert_eq!(q.next_len(60 * MS), Some((rest, 1000)));
    let mut drops = vec![];
    assert!(q.pop(60 * MS, |d| drops.push(d)).is_none());
    assert_eq!(drops, [QosDrop::Expired]);
    assert!(q.is_empty());
    let st = q.status(&[0, 0]);
    assert_eq!(st[1].counters.dropped_rate, 2);
    assert_eq!(st[0].counters.dropped_expired, 1);
}
