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
        if let Some(set) = f.tx[path as usize].on_sent(now, path_seq, plain) {
            f.out.push_back((path, set, 0));
        }
    }

    /// A covered datagram arrived on `pid` (its plaintext).
    pub(super) fn fec_on_received(&mut self, pid: PathId, path_seq: u16, plain: &[u8]) {
        if let Some(f) = self.fec.as_mut() {
            if f.rx_on.get(pid as usize).copied().unwrap_or(false) {
                f.rx[pid as usize].on_received(path_seq, plain);
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
        for plain in rebuilt {
            let Ok(h) = wire::Header::new_checked(&plain) else {
                self.drops.add(DropReason::BadRepair);
                continue;
            };
            let (ty, fields) = (h.packet_type(), h.fields());
            let body = &plain[HEADER_LEN..];
            let ordered = fields.class & wire::CLASS_UNORDERED == 0;
            let valid = ordered
                && match ty {
                    PacketType::Data => wire::inner_ip_version(body).is_some(),
                    PacketType::Fragment => wire::Fragment::parse(body).is_ok(),
                    _ => false,
                };
            if !valid {
                self.drops.add(DropReason::BadRepair);
                continue;
            }
            let seq = wire::widen_u32(fields.tunnel_seq, self.reorder.next_seq());
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
