//! The tunnel's side of forward error correction (`crate::fec` holds the
//! code): each path's encoder fed with the data packets it sends, the
//! repair packets they yield sent on the same path right after (paced
//! with its data), and each path's decoder fed with the data packets it
//! receives and the repairs, its rebuilt packets received as if they had
//! arrived.
//!
//! Invariants: only ordered data and fragments are covered (real-time
//! packets are never held, so never waited for); a rebuilt packet goes
//! through the same checks and the same reorder buffer as one that
//! arrived, and is delivered from a buffer of its own (it is not in the
//! datagram that brought the repair); a path's decoder stores packets only
//! once a repair arrived on it, so a peer without FEC costs nothing.

use std::collections::VecDeque;

use super::*;
use crate::fec::{BlockDecoder, BlockEncoder, RepairSet};
use crate::wire::RepairBody;

/// Bytes a repair packet carries beyond the largest datagram body it
/// covers: its own body header and a record's length, type, class and
/// tunnel sequence number.
pub(super) const REPAIR_OVERHEAD: usize = wire::REPAIR_HEADER_LEN + 2 + COMPACT_HEADER_LEN;
/// What of a covered datagram's header its record keeps: type, class and
/// tunnel sequence number (the rest is the repair's, or not needed).
const COMPACT_HEADER_LEN: usize = 6;

/// A covered datagram as its record holds it: type, class, tunnel
/// sequence number (u32) and body, from its plaintext (header and body).
fn compact(plain: &[u8]) -> Option<Vec<u8>> {
    let h = plain.get(..HEADER_LEN)?;
    let mut c = Vec::with_capacity(COMPACT_HEADER_LEN + plain.len() - HEADER_LEN);
    c.push(h[1]);
    c.push(h[3]);
    c.extend_from_slice(&h[20..24]);
    c.extend_from_slice(&plain[HEADER_LEN..]);
    Some(c)
}

/// Per-tunnel FEC state: one encoder and decoder per path.
#[derive(Debug)]
pub(super) struct Fec {
    tx: Vec<BlockEncoder>,
    rx: Vec<BlockDecoder>,
    /// A repair arrived on the path: its data packets are stored.
    rx_on: Vec<bool>,
    /// Repair sets waiting to leave, with the next shard to send.
    out: VecDeque<(PathId, RepairSet, usize)>,
    originals: usize,
    repairs: usize,
    pub sent: u64,
}

impl Fec {
    pub fn new(paths: usize, originals: usize, repairs: usize) -> Self {
        Self {
            tx: (0..paths)
                .map(|_| BlockEncoder::new(originals, repairs))
                .collect(),
            rx: (0..paths).map(|_| BlockDecoder::default()).collect(),
            rx_on: vec![false; paths],
            out: VecDeque::new(),
            originals,
            repairs,
            sent: 0,
        }
    }

    fn grow(&mut self, paths: usize) {
        while self.tx.len() < paths {
            self.tx
                .push(BlockEncoder::new(self.originals, self.repairs));
            self.rx.push(BlockDecoder::default());
            self.rx_on.push(false);
        }
    }
}

impl Tunnel {
    /// A covered datagram left on `path` (its plaintext, header and body).
    pub(super) fn fec_on_sent(&mut self, now: Nanos, path: PathId, path_seq: u16, plain: &[u8]) {
        let n = self.paths.len();
        let Some(f) = self.fec.as_mut() else {
            return;
        };
        f.grow(n);
        let Some(c) = compact(plain) else {
            return;
        };
        if let Some(set) = f.tx[path as usize].on_sent(now, path_seq, &c) {
            f.out.push_back((path, set, 0));
        }
    }

    /// A covered datagram arrived on `pid` (its plaintext).
    pub(super) fn fec_on_received(&mut self, pid: PathId, path_seq: u16, plain: &[u8]) {
        if let Some(f) = self.fec.as_mut() {
            if f.rx_on.get(pid as usize).copied().unwrap_or(false) {
                if let Some(c) = compact(plain) {
                    f.rx[pid as usize].on_received(path_seq, &c);
                }
            }
        }
    }

    /// The next repair packet to send, if any.
    pub(super) fn poll_repair(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let f = self.fec.as_mut()?;
        let (path, set, index) = f.out.pop_front()?;
        let body = set.body(index)?;
        let len = body.write(buf.get_mut(HEADER_LEN..buf.len().saturating_sub(TAG_LEN))?)?;
        if index + 1 < set.shards.len() {
            f.out.push_front((path, set, index + 1));
        }
        f.sent += 1;
        let seq_now = self.next_tunnel_seq;
        let t = self.control_transmit(now, path, PacketType::Repair, 0, seq_now, buf, len)?;
        self.pacing_charge(path, t.len);
        Some(t)
    }

    /// A repair packet: the data packets it rebuilds are received.
    pub(super) fn recv_repair(&mut self, now: Nanos, pid: PathId, body: &[u8]) -> Received {
        let n = self.paths.len();
        let Some(f) = self.fec.as_mut() else {
            return self.drop_counted(DropReason::BadType);
        };
        let Ok(r) = RepairBody::parse(body) else {
            return self.drop_counted(DropReason::BadRepair);
        };
        f.grow(n);
        let p = pid as usize;
        f.rx_on[p] = true;
        let rebuilt = f.rx[p].on_repair(&r);
        for c in rebuilt {
            let Some((&[ty, class, a, b, c2, d], body)) = c
                .split_first_chunk::<COMPACT_HEADER_LEN>()
                .map(|(h, b)| (h, b))
            else {
                self.drops.add(DropReason::BadRepair);
                continue;
            };
            let tunnel_seq = u32::from_be_bytes([a, b, c2, d]);
            let ordered = class & wire::CLASS_UNORDERED == 0;
            let valid = ordered
                && match ty {
                    t if t == PacketType::Data as u8 => wire::inner_ip_version(body).is_some(),
                    t if t == PacketType::Fragment as u8 => wire::Fragment::parse(body).is_ok(),
                    _ => false,
                };
            if !valid {
                self.drops.add(DropReason::BadRepair);
                continue;
            }
            let seq = wire::widen_u32(tunnel_seq, self.reorder.next_seq());
            if let Received::Deliver { .. } = self.recv_data(now, pid, seq, body) {
                // In order: delivered from a buffer of its own, as the
                // repair's datagram does not hold it.
                let b = self.ready_buffer(body);
                self.frag.ready.push_back(b);
            }
        }
        Received::Consumed
    }
}
