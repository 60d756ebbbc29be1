//! The QoS classifier, policer and stage (`mpt_core::qos`). No state
//! between calls; see the crate doc.

use mpt_core::qos::classify::{inspect, ClassMatch, Prefix};
use mpt_core::qos::{ClassConfig, Qos, QosConfig};

/// Fuzz the QoS classifier and stage with arbitrary inner packets: no input
/// may panic; a packet's class is one of the configured ones; what enters
/// the stage leaves it (or is counted as dropped) and the counts add up.
/// The ECN mark changes nothing but the ECN bits (and IPv4's checksum) of
/// an ECN-capable packet, and leaves any other input as it was.
pub fn qos_classify(data: &[u8]) {
    let picky = ClassConfig {
        matcher: ClassMatch {
            dscp: vec![46, 10],
            protocol: Some(17),
            ports: vec![(5000, 5100)],
            source: vec![Prefix {
                addr: "10.0.0.0".parse().unwrap(),
                len: 9,
            }],
            destination: vec![Prefix {
                addr: "2001:db8::".parse().unwrap(),
                len: 33,
            }],
        },
        min_bps: Some(1_000_000),
        ..ClassConfig::best_effort("picky", 0)
    };
    let mut cfg = QosConfig::standard();
    cfg.classes.insert(0, picky);
    let mut q = Qos::new(cfg, 7, 1400, 100_000_000);
    let _ = inspect(data);
    let mut marked = data.to_vec();
    if mpt_core::qos::ecn::mark_ce(&mut marked) {
        let changed: Vec<usize> = (0..data.len()).filter(|i| marked[*i] != data[*i]).collect();
        assert!(
            changed.iter().all(|i| [1, 10, 11].contains(i)),
            "{changed:?}"
        );
    } else {
        assert_eq!(marked, data);
    }
    let mut queued = 0;
    for (i, chunk) in data.chunks(97).enumerate() {
        let (class, hash) = (q.classify(chunk), q.flow(chunk));
        assert!(class < q.class_count());
        assert_eq!(q.outer_tos(class, chunk) & 0x03, 0, "no ECN bits outside");
        let now = i as u64 * 1_000_000;
        if q.police(class, now, chunk.len())
            && !q.is_realtime(class)
            && q.admit(class, hash, now, chunk.len())
        {
            queued += usize::from(q.enqueue(class, hash, now, chunk).queued);
        }
    }
    let mut served = 0;
    let mut dropped = 0;
    while let Some((class, len)) = q.next_len(1_000_000_000) {
        assert!(class < q.class_count());
        match q.pop(1_000_000_000, |_| dropped += 1) {
            Some((_, item)) => {
                assert_eq!(item.buf.len(), len);
                served += 1;
                q.recycle(item.buf);
            }
            None => assert!(dropped > 0 || q.is_empty()),
        }
    }
    assert!(q.is_empty());
    assert!(served + dropped <= queued);
}
