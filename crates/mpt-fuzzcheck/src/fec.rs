//! Forward error correction's receiver (`mpt_core::fec`, the repair body
//! `mpt_core::wire::RepairBody`). No state; see the crate doc.

use mpt_core::fec::BlockDecoder;
use mpt_core::wire::RepairBody;

/// Fuzz the repair-body parser and the decoder: no input may panic, an
/// accepted body re-encodes to the same bytes, and a decoder fed the
/// input's repairs (the input cut in two: datagrams it holds, then repair
/// bodies) rebuilds only datagrams whose record fits the shard (two with
/// halves), and holds
/// a bounded number of blocks.
pub fn fec_repair(data: &[u8]) {
    if let Ok(r) = RepairBody::parse(data) {
        let mut out = vec![0u8; data.len()];
        assert_eq!(r.write(&mut out), Some(data.len()));
        assert_eq!(out, data);
    }
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let (held, repairs) = rest.split_at(usize::from(split).min(rest.len()));
    let mut d = BlockDecoder::default();
    // The held part: datagrams of 1 to 8 bytes at consecutive path seqs.
    for (seq, chunk) in held.chunks(8).enumerate() {
        d.on_received(seq as u16, chunk);
    }
    // The rest: repair bodies, each prefixed by its length byte.
    let mut at = repairs;
    while let Some((&len, tail)) = at.split_first() {
        let (body, next) = tail.split_at(usize::from(len).min(tail.len()));
        if let Ok(r) = RepairBody::parse(body) {
            for rebuilt in d.on_repair(&r) {
                // A record is one shard, or two with halves.
                let per = if r.halves { 2 } else { 1 };
                assert!(rebuilt.len() + 2 <= r.shard.len() * per);
            }
        }
        at = next;
    }
}
