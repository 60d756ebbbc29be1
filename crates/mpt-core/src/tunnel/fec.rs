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
//!
//! A path sends repairs only while its random loss is worth them: while
//! the holds its resends would cause add at least [`FEC_HOLD_MIN_NS`] to
//! the tunnel's mean delivery delay (on a path of a few milliseconds a
//! resend's hold costs less than the repairs would).
//!
//! A block is closed after its `k` packets or once it is
//! [`FEC_BLOCK_AGE_NS`] old (so the packets before a lull are covered
//! too). A loss seen on a path whose repairs arrive is not asked for at
//! once (`path_loss.rs`) but [`FEC_NACK_DEFER_NS`] later, and only if its
//! block's repairs did not rebuild it by then: a rebuilt loss costs no
//! round trip and no resend; one the code could not rebuild costs the
//! deferral more than without FEC. The deferred losses are bounded
//! ([`super::recovery::MAX_PENDING`]); what does not fit is asked for at
//! once.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::*;
use crate::fec::{BlockDecoder, BlockEncoder, RepairSet, Repairs, FEC_LOSS_MIN};
use crate::wire::RepairBody;
use crate::NANOS_PER_MS;

/// Longest a block stays open (tuning knob: at 20 Mbit/s a block of 32
/// full datagrams takes 18 ms; a loss in a block the rate would fill
/// more slowly waits at most this long plus the repairs' flight for them).
pub const FEC_BLOCK_AGE_NS: Nanos = 8 * NANOS_PER_MS;
/// How long the receiver waits for a block's repairs to rebuild a loss
/// before it asks for the loss by NACK (tuning knob: the block's age
/// bound, its repairs' pacing behind it and the path's jitter).
pub const FEC_NACK_DEFER_NS: Nanos = 16 * NANOS_PER_MS;

/// A lossy path sends repairs only while a resend's hold would add at
/// least this much delay, on average, to every packet the tunnel delivers
/// (tuning knob): each loss resent holds the receiver's reorder buffer for
/// about a round trip of the path, so the mean delay added is its losses
/// per second times its round trip squared over two. The bound, and the
/// half of it below which a path that sends repairs stops, lie between
/// the lab's `lossy` (four links of 50 Mbit/s without delay, one losing 2 %:
/// 0.7-4 ms; 89.9 % with repairs against 92.6 without, which a round trip
/// of a few milliseconds hides) and a slow lossy path beside fast ones
/// (seed 505's case 9, 8 Mbit/s of 31 ms losing 2.7 % whose loss read as
/// 0.7 % beside 163 + 27 Mbit/s: 15 ms; 37.7 % without its repairs
/// against 48.5 with, since its holds stall everything the fast paths
/// carry).
pub const FEC_HOLD_MIN_NS: Nanos = 5 * NANOS_PER_MS;

/// How long after its last repair a path's data is still stored and its
/// losses still wait for repairs (tuning knob: a sender closes a block at
/// least every [`FEC_BLOCK_AGE_NS`] while it sends; one that stopped
/// sending repairs, its path no longer lossy, stops costing the wait).
pub const FEC_RX_FRESH_NS: Nanos = 100 * NANOS_PER_MS;

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
    /// When a repair last arrived on the path: while that is within
    /// [`FEC_RX_FRESH_NS`], its data packets are stored and its losses
    /// wait for repairs.
    rx_last: Vec<Option<Nanos>>,
    /// Repair sets waiting to leave, with the next shard to send.
    out: VecDeque<(PathId, RepairSet, usize)>,
    /// Receiver: path losses waiting for their block's repairs:
    /// (the peer's path id, our path id, path sequence, when to ask).
    deferred: VecDeque<(u8, PathId, u16, Nanos)>,
    /// Sender: whether each path's losses are worth repairs (with
    /// hysteresis, [`FEC_HOLD_MIN_NS`]).
    worth: Vec<bool>,
    originals: usize,
    repairs: Repairs,
    pub stats: FecStats,
}

/// FEC counters, in `mpt status` under `fec`.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct FecStats {
    /// Sender: blocks closed and repair packets sent.
    pub blocks: u64,
    pub repairs_sent: u64,
    /// Receiver: repair packets taken, and the datagrams they rebuilt.
    pub repairs_received: u64,
    pub rebuilt: u64,
    /// Receiver: blocks with more losses than repairs came for.
    pub unrecoverable: u64,
    /// Repairs inconsistent with what was stored, or that failed to decode.
    pub inconsistent: u64,
    /// Receiver: path losses that waited for their block's repairs, those
    /// rebuilt in that wait (no NACK sent), and those asked for after it.
    pub losses_deferred: u64,
    pub nacks_saved: u64,
    pub nacks_after_wait: u64,
}

impl Fec {
    pub fn new(paths: usize, originals: usize, repairs: Repairs) -> Self {
        Self {
            tx: (0..paths)
                .map(|_| BlockEncoder::new(originals, repairs))
                .collect(),
            rx: (0..paths).map(|_| BlockDecoder::default()).collect(),
            rx_last: vec![None; paths],
            out: VecDeque::new(),
            deferred: VecDeque::new(),
            worth: vec![false; paths],
            originals,
            repairs,
            stats: FecStats::default(),
        }
    }

    /// Whether repairs arrive on our path `pid`: its data is stored and
    /// its losses wait for them.
    pub fn defers(&self, now: Nanos, pid: PathId) -> bool {
        self.rx_last
            .get(usize::from(pid))
            .copied()
            .flatten()
            .is_some_and(|t| now.saturating_sub(t) < FEC_RX_FRESH_NS)
    }

    /// Defer the loss of `path_seq` on `pid` (the peer's `peer_path`);
    /// `false` if the deferred losses are full (ask at once).
    pub fn defer(&mut self, now: Nanos, peer_path: u8, pid: PathId, path_seq: u16) -> bool {
        if self.deferred.len() >= super::recovery::MAX_PENDING {
            return false;
        }
        self.deferred
            .push_back((peer_path, pid, path_seq, now + FEC_NACK_DEFER_NS));
        self.stats.losses_deferred += 1;
        true
    }

    /// When a timer has work: a deferred loss's time, or a block's age.
    pub fn deadline(&self) -> Option<Nanos> {
        let open = self.tx.iter().filter_map(|e| e.opened_at()).min();
        let ask = self.deferred.front().map(|d| d.3);
        open.map(|t| t + FEC_BLOCK_AGE_NS)
            .into_iter()
            .chain(ask)
            .min()
    }

    /// Close blocks at their age; the deferred losses due at `now` that
    /// were not rebuilt, as (peer's path, path sequence), to ask for.
    pub fn on_timeout(&mut self, now: Nanos) -> Vec<(u8, u16)> {
        for (i, e) in self.tx.iter_mut().enumerate() {
            if let Some(set) = e.flush_due(now, FEC_BLOCK_AGE_NS) {
                self.out.push_back((i as PathId, set, 0));
                self.stats.blocks += 1;
            }
        }
        let mut ask = Vec::new();
        while let Some(&(peer_path, pid, seq, due)) = self.deferred.front() {
            if due > now {
                break;
            }
            self.deferred.pop_front();
            if self.rx[usize::from(pid)].holds(seq) {
                self.stats.nacks_saved += 1;
            } else {
                self.stats.nacks_after_wait += 1;
                ask.push((peer_path, seq));
            }
        }
        ask
    }

    /// The counters, the decoders' summed in.
    pub fn stats(&self) -> FecStats {
        let mut s = self.stats.clone();
        for d in &self.rx {
            let ds = d.stats();
            s.repairs_received += ds.repairs;
            s.rebuilt += ds.rebuilt;
            s.unrecoverable += ds.unrecoverable;
            s.inconsistent += ds.inconsistent;
        }
        s
    }

    fn grow(&mut self, paths: usize) {
        while self.tx.len() < paths {
            self.tx
                .push(BlockEncoder::new(self.originals, self.repairs));
            self.rx.push(BlockDecoder::default());
            self.rx_last.push(None);
            self.worth.push(false);
        }
    }
}

/// The mean delay a path's resends would add to what the tunnel delivers,
/// nanoseconds: its random losses per second at its capacity (in
/// datagrams of `datagram` bytes) times its smoothed round trip squared
/// over two (0 before its capacity and round trip are known).
fn hold_ns(p: &slot::PathSlot, datagram: usize) -> f64 {
    let (Some(bw), Some(rtt)) = (p.sender.bandwidth_bps(), p.srtt()) else {
        return 0.0;
    };
    let per_s = bw as f64 / (8 * datagram.max(1)) as f64;
    let rtt_s = rtt as f64 / (1_000.0 * NANOS_PER_MS as f64);
    p.sender.random_loss_rate() * per_s * rtt_s * rtt as f64 / 2.0
}

/// Whether a path whose resends would add `hold_ns` sends repairs, given
/// whether it did (`was`): on from [`FEC_HOLD_MIN_NS`], off below half of
/// it, so that a path near the bound does not flap.
fn repairs_worth(was: bool, hold_ns: f64) -> bool {
    let bound = if was { 0.5 } else { 1.0 } * FEC_HOLD_MIN_NS as f64;
    hold_ns >= bound
}

impl Tunnel {
    /// A covered datagram left on `path` (its plaintext, header and body).
    pub(super) fn fec_on_sent(&mut self, now: Nanos, path: PathId, path_seq: u16, plain: &[u8]) {
        let n = self.paths.len();
        let Some(f) = self.fec.as_mut() else {
            return;
        };
        f.grow(n);
        let p = usize::from(path);
        let loss = self.paths[p].sender.random_loss_rate();
        // A clean path (the common case) skips the hold's arithmetic.
        f.worth[p] = loss >= FEC_LOSS_MIN
            && repairs_worth(
                f.worth[p],
                hold_ns(&self.paths[p], self.frag.body_max + HEADER_LEN),
            );
        let e = &mut f.tx[p];
        e.set_loss(if f.worth[p] { loss } else { 0.0 });
        e.set_shard_max(self.frag.body_max.saturating_sub(wire::REPAIR_HEADER_LEN));
        if !e.covers() {
            return;
        }
        let Some(c) = compact(plain) else {
            return;
        };
        if let Some(set) = f.tx[path as usize].on_sent(now, path_seq, &c) {
            f.out.push_back((path, set, 0));
            f.stats.blocks += 1;
        }
    }

    /// A covered datagram arrived on `pid` (its plaintext).
    pub(super) fn fec_on_received(&mut self, now: Nanos, pid: PathId, path_seq: u16, plain: &[u8]) {
        if let Some(f) = self.fec.as_mut() {
            if f.defers(now, pid) {
                if let Some(c) = compact(plain) {
                    f.rx[pid as usize].on_received(path_seq, &c);
                }
            }
        }
    }

    /// The next repair packet to send, if any.
    /// Repairs leave paced with their path's data, each once its path has
    /// budget: sent at once after their block, a block's repairs were a
    /// burst that the path's rate control read as a queue of its making,
    /// and it held a fast lossy link (132 Mbit/s losing 2.6 %, the lab's
    /// sweep, seed 505, case 17) at a third of what it carried without.
    pub(super) fn poll_repair(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let waiting = self.fec.as_ref()?.out.len();
        let mut at = None;
        for i in 0..waiting {
            let path = self.fec.as_ref()?.out[i].0;
            if self.pacing_allows(path, now) {
                at = Some(i);
                break;
            }
        }
        let at = at?;
        let f = self.fec.as_mut()?;
        let (path, set, index) = f.out.remove(at)?;
        let body = set.body(index)?;
        let len = body.write(buf.get_mut(HEADER_LEN..buf.len().saturating_sub(TAG_LEN))?)?;
        if index + 1 < set.shards.len() {
            f.out.insert(at, (path, set, index + 1));
        }
        f.stats.repairs_sent += 1;
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
        f.rx_last[p] = Some(now);
        let rebuilt = f.rx[p].on_repair(&r);
        for c in rebuilt {
            let Some((&[ty, class, a, b, c2, d], body)) =
                c.split_first_chunk::<COMPACT_HEADER_LEN>()
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

impl Tunnel {
    /// FEC's timers: blocks closed by age, deferred losses asked for.
    pub(super) fn fec_timeout(&mut self, now: Nanos) {
        let Some(f) = self.fec.as_mut() else {
            return;
        };
        for (peer_path, seq) in f.on_timeout(now) {
            self.recovery_ask_path(peer_path, seq);
        }
    }

    /// When FEC's timers or its waiting repairs have work: a block's age,
    /// a deferred loss's time, or the pacing budget of a path whose repairs
    /// wait.
    pub(super) fn fec_deadline(&self, now: Nanos) -> Option<Nanos> {
        let f = self.fec.as_ref()?;
        let paced = f
            .out
            .iter()
            .filter(|_| self.paced)
            .map(|o| self.paths[usize::from(o.0)].sender.budget_at(now))
            .min();
        f.deadline().into_iter().chain(paced).min()
    }

    /// FEC's counters (`None`: off).
    pub fn fec_stats(&self) -> Option<FecStats> {
        self.fec.as_ref().map(Fec::stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_loss_is_asked_for_only_if_its_repairs_did_not_rebuild_it() {
        let mut f = Fec::new(2, 32, Repairs::ByLoss);
        assert!(!f.defers(0, 1), "no repair has arrived on the path");
        f.rx_last[1] = Some(1_000);
        assert!(f.defers(1_000 + FEC_RX_FRESH_NS - 1, 1));
        assert!(!f.defers(1_000 + FEC_RX_FRESH_NS, 1), "repairs stopped");
        // Path sequences 7 and 8 lost on our path 1 (the peer's 3); 7 is
        // rebuilt (stored) before the wait ends, 8 is not.
        assert!(f.defer(2_000, 3, 1, 7));
        assert!(f.defer(2_000, 3, 1, 8));
        f.rx[1].on_received(7, b"rebuilt");
        assert_eq!(f.deadline(), Some(2_000 + FEC_NACK_DEFER_NS));
        assert!(f.on_timeout(2_000 + FEC_NACK_DEFER_NS - 1).is_empty());
        assert_eq!(f.on_timeout(2_000 + FEC_NACK_DEFER_NS), vec![(3, 8)]);
        let s = f.stats();
        assert_eq!(
            (s.losses_deferred, s.nacks_saved, s.nacks_after_wait),
            (2, 1, 1)
        );
        assert_eq!(f.deadline(), None);
    }

    #[test]
    fn repairs_start_where_holds_would_cost_and_stop_below_half() {
        let ms = |x: f64| x * NANOS_PER_MS as f64;
        assert!(!repairs_worth(false, ms(0.7)), "the lab's lossy");
        assert!(
            repairs_worth(false, ms(15.0)),
            "seed 505 case 9's slow path"
        );
        let bound = FEC_HOLD_MIN_NS as f64;
        assert!(repairs_worth(false, bound));
        assert!(repairs_worth(true, 0.6 * bound), "held");
        assert!(!repairs_worth(true, 0.4 * bound));
        assert!(!repairs_worth(false, 0.6 * bound));
    }

    #[test]
    fn deferred_losses_are_bounded_and_an_open_block_closes_by_age() {
        let mut f = Fec::new(1, 32, Repairs::Fixed(2));
        let max = super::super::recovery::MAX_PENDING;
        for s in 0..max {
            assert!(f.defer(0, 0, 0, s as u16));
        }
        assert!(!f.defer(0, 0, 0, 0), "full: asked for at once");
        let mut f = Fec::new(1, 32, Repairs::Fixed(2));
        assert!(f.tx[0].on_sent(500, 0, b"one").is_none());
        assert_eq!(f.deadline(), Some(500 + FEC_BLOCK_AGE_NS));
        assert!(f.on_timeout(500 + FEC_BLOCK_AGE_NS).is_empty());
        assert_eq!(f.out.len(), 1, "the block's repairs wait to leave");
        assert_eq!(f.stats().blocks, 1);
        assert_eq!(f.deadline(), None);
    }
}
