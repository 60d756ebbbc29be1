//! Tests of forward error correction (`fec.rs`): blocks of varied
//! datagrams rebuilt from their repair packets, and what cannot be.

use super::*;

/// Datagrams of varied lengths, recognisable by content.
fn datagram(i: usize) -> Vec<u8> {
    (0..(40 + i * 37 % 1400))
        .map(|b| (b * 7 + i) as u8)
        .collect()
}

/// Send `n` datagrams from path seq `first` through an encoder of (k, m),
/// every `step`-th path seq covered (the others: probes); the repair sets.
fn send(
    first: u16,
    n: usize,
    step: u16,
    k: usize,
    m: usize,
) -> (Vec<(u16, Vec<u8>)>, Vec<RepairSet>) {
    let mut e = BlockEncoder::new(k, Repairs::Fixed(m));
    let mut sent = vec![];
    let mut sets = vec![];
    for i in 0..n {
        let seq = first.wrapping_add(i as u16 * step);
        let d = datagram(i);
        sets.extend(e.on_sent(i as u64, seq, &d));
        sent.push((seq, d));
    }
    sets.extend(e.flush_due(u64::MAX, 0));
    (sent, sets)
}

/// Deliver what `lost` does not name, then the repairs: what is rebuilt.
fn receive(
    sent: &[(u16, Vec<u8>)],
    sets: &[RepairSet],
    lost: &[usize],
) -> (BlockDecoder, Vec<Vec<u8>>) {
    let mut d = BlockDecoder::default();
    for (i, (seq, dg)) in sent.iter().enumerate() {
        if !lost.contains(&i) {
            d.on_received(*seq, dg);
        }
    }
    let mut rebuilt = vec![];
    for set in sets {
        for i in 0..set.shards.len() {
            let mut buf = vec![0u8; 70_000];
            let n = set.body(i).unwrap().write(&mut buf).unwrap();
            let body = RepairBody::parse(&buf[..n]).unwrap();
            rebuilt.extend(d.on_repair(&body));
        }
    }
    (d, rebuilt)
}

#[test]
fn up_to_m_losses_per_block_are_rebuilt_exactly() {
    let (sent, sets) = send(100, 16, 1, 8, 2);
    assert_eq!(sets.len(), 2);
    assert_eq!(
        (sets[0].first_path_seq, sets[0].covered, sets[0].originals),
        (100, 0xff, 8)
    );
    let (d, rebuilt) = receive(&sent, &sets, &[0, 7, 9]);
    assert_eq!(
        rebuilt,
        vec![sent[0].1.clone(), sent[7].1.clone(), sent[9].1.clone()]
    );
    assert_eq!(d.stats().rebuilt, 3);
    assert_eq!(d.stats().unrecoverable, 0);
}

#[test]
fn more_losses_than_repairs_rebuild_nothing_and_are_counted() {
    let (sent, sets) = send(7, 8, 1, 8, 2);
    let (d, rebuilt) = receive(&sent, &sets, &[1, 2, 3]);
    assert!(rebuilt.is_empty());
    assert_eq!(d.stats().unrecoverable, 1);
}

#[test]
fn a_block_spans_probes_and_the_wrap_of_the_path_sequence() {
    // Every third path seq is a covered datagram, from 65530 on: the
    // block covers offsets 0, 3, ..., and the sequence wraps within it.
    let (sent, sets) = send(65_530, 10, 3, 10, 3);
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].covered.count_ones(), 10);
    assert_eq!(sets[0].covered & 0b1001, 0b1001);
    let (_, rebuilt) = receive(&sent, &sets, &[2, 3, 9]);
    assert_eq!(rebuilt.len(), 3);
    assert!(rebuilt.contains(&sent[9].1));
}

#[test]
fn a_block_closes_at_its_span_and_after_its_age() {
    let mut e = BlockEncoder::new(64, Repairs::Fixed(1));
    assert!(e.on_sent(0, 0, &[1; 10]).is_none());
    // Path seq 64 does not fit a span of 64 from 0: the block closes.
    let set = e.on_sent(1, 64, &[2; 10]).expect("the first block closes");
    assert_eq!((set.covered, set.originals), (1, 1));
    assert_eq!(e.open(), 1);
    assert!(e.flush_due(5, 10).is_none(), "younger than its bound");
    assert!(e.flush_due(11, 10).is_some());
    assert_eq!(e.open(), 0);
}

#[test]
fn nothing_is_rebuilt_twice_or_when_nothing_is_missing() {
    let (sent, sets) = send(0, 4, 1, 4, 2);
    let (mut d, rebuilt) = receive(&sent, &sets, &[2]);
    assert_eq!(rebuilt.len(), 1);
    // The same repairs again: the block is done.
    for i in 0..2 {
        let mut buf = vec![0u8; 4000];
        let n = sets[0].body(i).unwrap().write(&mut buf).unwrap();
        assert!(d
            .on_repair(&RepairBody::parse(&buf[..n]).unwrap())
            .is_empty());
    }
    let (_, none) = receive(&sent, &sets, &[]);
    assert!(none.is_empty());
}

#[test]
fn a_shard_too_short_for_what_was_stored_is_counted_not_trusted() {
    let mut d = BlockDecoder::default();
    d.on_received(0, &[9; 100]);
    let shard = [0u8; 10];
    let body = RepairBody {
        first_path_seq: 0,
        covered: 0b11,
        originals: 2,
        repairs: 1,
        index: 0,
        halves: false,
        shard: &shard,
    };
    assert!(d.on_repair(&body).is_empty());
    assert_eq!(d.stats().inconsistent, 1);
}

#[test]
fn the_decoder_holds_a_bounded_number_of_blocks_whatever_arrives() {
    let mut d = BlockDecoder::default();
    let shard = [1u8; 64];
    for first in 0..1000u16 {
        let body = RepairBody {
            first_path_seq: first.wrapping_mul(61),
            covered: u64::MAX,
            originals: 64,
            repairs: 16,
            index: (first % 16) as u8,
            halves: false,
            shard: &shard,
        };
        assert!(d.on_repair(&body).is_empty());
        assert!(d.pending.len() <= PENDING_BLOCKS);
    }
    assert_eq!(d.stats().repairs, 1000);
}

#[test]
fn repairs_that_disagree_on_the_block_shape_are_counted_not_trusted() {
    let mut d = BlockDecoder::default();
    d.on_received(0, &[5; 20]);
    let shard = [3u8; 22];
    let mut body = RepairBody {
        first_path_seq: 0,
        covered: 0b11,
        originals: 2,
        repairs: 1,
        index: 0,
        halves: false,
        shard: &shard,
    };
    // The first says one repair, the next says three and is index 2.
    assert!(d.on_repair(&body).len() <= 1);
    body.repairs = 3;
    body.index = 2;
    let _ = d.on_repair(&body);
    let s = d.stats();
    assert_eq!(s.repairs, 2);
}

#[test]
fn repairs_by_loss_follow_the_expected_losses_with_a_margin() {
    // λ = k p; λ + 3 √λ rounded up, at least one, at most the wire's 16.
    assert_eq!(repairs_for(32, 0.0), 1);
    assert_eq!(repairs_for(32, 0.005), 2, "λ 0.16: 0.16 + 1.2");
    assert_eq!(repairs_for(32, 0.01), 3, "λ 0.32: 0.32 + 1.7");
    assert_eq!(repairs_for(32, 0.024), 4, "λ 0.77: 0.77 + 2.6");
    assert_eq!(repairs_for(8, 0.024), 2, "a block closed by age is smaller");
    assert_eq!(repairs_for(64, 1.0), REPAIR_SHARDS_MAX);
    assert_eq!(repairs_for(32, f64::NAN), 1, "no estimate is no loss");
}

#[test]
fn by_loss_a_clean_path_is_not_covered_and_a_lossy_one_is() {
    let mut e = BlockEncoder::new(32, Repairs::ByLoss);
    assert!(!e.covers(), "no loss measured yet");
    e.set_loss(FEC_LOSS_MIN / 2.0);
    assert!(!e.covers());
    e.set_loss(0.02);
    assert!(e.covers());
    for i in 0..31u16 {
        assert!(e.on_sent(0, i, &datagram(i.into())).is_none());
    }
    // The loss fell meanwhile: the open block is still finished.
    e.set_loss(0.0);
    assert!(e.covers(), "a block is open");
    let set = e.on_sent(0, 31, &datagram(31)).expect("the 32nd closes it");
    assert_eq!(set.shards.len(), 1, "sized by the loss at its close");
    assert!(!e.covers());
    assert_eq!(e.opened_at(), None);
}

#[test]
fn records_longer_than_a_repair_s_room_enter_the_code_as_halves() {
    // Datagrams of 40-1440 bytes; a repair has room for 800 bytes of
    // shard: each packet is two originals, each repair half a record.
    let mut e = BlockEncoder::new(8, Repairs::Fixed(2));
    e.set_shard_max(800);
    let sent: Vec<(u16, Vec<u8>)> = (0..8).map(|i| (i as u16, datagram(i * 30))).collect();
    let longest = sent.iter().map(|s| s.1.len()).max().unwrap();
    assert!(longest + 2 > 800);
    let mut sets = vec![];
    for (seq, d) in &sent {
        sets.extend(e.on_sent(0, *seq, d));
    }
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    assert!(set.halves);
    assert_eq!(
        (set.originals, set.shards.len()),
        (8, 4),
        "two per repair asked"
    );
    assert!(set
        .shards
        .iter()
        .all(|s| s.len() <= 800 && s.len() % 2 == 0));
    // Two losses (four erasures) are rebuilt exactly from the four halves.
    let (d, rebuilt) = receive(&sent, &sets, &[2, 5]);
    assert_eq!(rebuilt, vec![sent[2].1.clone(), sent[5].1.clone()]);
    assert_eq!(d.stats().inconsistent, 0);
    // Three losses are more than the repairs: nothing, counted.
    let (d, rebuilt) = receive(&sent, &sets, &[1, 2, 5]);
    assert!(rebuilt.is_empty());
    assert_eq!(d.stats().unrecoverable, 1);
}
