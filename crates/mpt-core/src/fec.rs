//! Forward error correction over one path's data packets: a systematic
//! Reed-Solomon block code (the `reed-solomon-simd` crate, Leopard-RS over
//! GF(2^16)), so that a packet lost on a lossy path is rebuilt from the
//! packets after it instead of waiting a round trip for its resend.
//!
//! Why: with loss recovery (`tunnel/recovery.rs`) the receiver holds
//! every later packet while it waits for a resend, a round trip of the
//! fastest path. On a fast lossy path a loss comes every few packets, so
//! a hold is nearly always open: in the lab's sweep (seed 505, case 0, a
//! 175 Mbit/s link of 25 ms losing 1.8 %) the reorder buffer held 1.1 MB
//! of the inner TCP's 1.65 MB window, and the tunnel carried 15 % of the
//! links. A block of `k` packets with `m` recovery shards rebuilds up to
//! `m` losses within the block as soon as its shards arrive (RFC 6865's
//! Reed-Solomon FEC scheme does the same for FECFRAME, RFC 6363).
//!
//! The sender's [`BlockEncoder`] takes each covered datagram (data and
//! fragments) a path sends, by its path sequence number and plaintext;
//! every `k` of them (or when a block grows older than its bound, or
//! would span more than [`REPAIR_ORIGINALS_MAX`] path sequence numbers) it
//! yields the block's `m` recovery shards, each sent as one repair packet
//! ([`crate::wire::RepairBody`]) on the same path. Each original is a
//! record: its length (u16, big-endian) and its bytes, zero-padded to the
//! block's record length (the longest record, rounded up to even). A
//! repair must fit one datagram with its own header, so when the records
//! are longer than that room (full datagrams) each enters the code as its
//! two halves (record length a multiple of four): twice the originals and
//! twice the repairs, each half as long; a lost packet is then two
//! erasures.
//!
//! The receiver's [`BlockDecoder`] keeps the plaintext of the last
//! [`DECODER_RING`] datagrams it received on the path, by path sequence
//! number, and gathers each block's repair shards; once the shards it has
//! number at least the block's missing packets, it decodes and yields the
//! missing datagrams' plaintext, which the tunnel then receives as if they
//! had arrived.
//!
//! Invariants: sans-IO (no clock but the `now` passed in); a block never
//! covers more than [`REPAIR_ORIGINALS_MAX`] path sequence numbers nor
//! more than its `k`; a datagram is yielded by the decoder at most once
//! per block and only if it was missing; the decoder holds at most
//! [`DECODER_RING`] datagrams and [`PENDING_BLOCKS`] incomplete blocks, so
//! its memory per path is bounded whatever a peer sends; a repair whose
//! shard length cannot hold a stored record, or whose decode fails, yields
//! nothing and is counted.

use crate::wire::{RepairBody, REPAIR_ORIGINALS_MAX, REPAIR_SHARDS_MAX, REPAIR_SHARD_MAX};
use crate::Nanos;

/// Datagrams the decoder keeps per path, by path sequence number (tuning
/// knob: four blocks of the widest span, so that a block's repairs, which
/// follow its last packet, still find its first).
pub const DECODER_RING: usize = 256;
/// Incomplete blocks the decoder waits on per path (tuning knob: the
/// repairs of a block arrive together, right after it).
pub const PENDING_BLOCKS: usize = 4;

/// The recovery shards of one block, as the sender sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSet {
    pub first_path_seq: u16,
    pub covered: u64,
    pub originals: u8,
    /// Each packet entered the code as its record's two halves.
    pub halves: bool,
    /// One per repair packet; all of one length (even).
    pub shards: Vec<Vec<u8>>,
}

impl RepairSet {
    /// The body of repair packet `index`.
    pub fn body(&self, index: usize) -> Option<RepairBody<'_>> {
        Some(RepairBody {
            first_path_seq: self.first_path_seq,
            covered: self.covered,
            originals: self.originals,
            repairs: u8::try_from(self.shards.len()).ok()?,
            index: u8::try_from(index).ok()?,
            halves: self.halves,
            shard: self.shards.get(index)?,
        })
    }
}

/// How many repairs a block carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Repairs {
    /// From the path's random loss rate ([`repairs_for`]); no block while
    /// that rate is under [`FEC_LOSS_MIN`].
    ByLoss,
    /// This many (1..=[`REPAIR_SHARDS_MAX`]) per block, whatever the loss.
    Fixed(usize),
}

/// The random loss rate (a fraction) under which a path sends no repairs
/// with [`Repairs::ByLoss`] (tuning knob: at one loss in 300 packets a
/// resend's hold is rarely open, and one repair per 32 packets would cost
/// ten times the capacity the losses do).
pub const FEC_LOSS_MIN: f64 = 0.003;
/// The margin over a block's expected losses, in standard deviations of
/// a Poisson count (tuning knob: `λ + 2√λ` repairs rebuild a block of 32
/// at 2 % loss (λ = 0.64) unless it lost 3 or more, about 3 % of blocks).
pub const FEC_LOSS_Z: f64 = 3.0;

/// Repairs for a block of `originals` packets on a path losing `loss` (a
/// fraction) of them at random: the block's expected losses `λ` plus
/// [`FEC_LOSS_Z`] √λ, rounded up, within 1..=[`REPAIR_SHARDS_MAX`].
pub fn repairs_for(originals: usize, loss: f64) -> usize {
    let lambda = originals as f64 * loss.clamp(0.0, 1.0);
    let m = (lambda + FEC_LOSS_Z * lambda.sqrt()).ceil();
    (m as usize).clamp(1, REPAIR_SHARDS_MAX)
}

/// A record: the datagram's length and bytes, padded to `shard_len`.
fn record(datagram: &[u8], shard_len: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(shard_len);
    r.extend_from_slice(&(datagram.len() as u16).to_be_bytes());
    r.extend_from_slice(datagram);
    r.resize(shard_len, 0);
    r
}

/// The record length for datagrams of at most `longest` bytes: even, and
/// a multiple of four when records are halved (each half even).
fn record_len_for(longest: usize, halves: bool) -> usize {
    (longest + 2).next_multiple_of(if halves { 4 } else { 2 })
}

/// The sender's side, one per path. See the module documentation.
#[derive(Debug)]
pub struct BlockEncoder {
    originals_max: usize,
    repairs: Repairs,
    /// The path's random loss rate, for [`Repairs::ByLoss`].
    loss: f64,
    /// Longest shard a repair packet has room for.
    shard_max: usize,
    first: Option<u16>,
    opened_at: Nanos,
    covered: u64,
    datagrams: Vec<Vec<u8>>,
}

impl BlockEncoder {
    /// Blocks of `originals` packets (1..=[`REPAIR_ORIGINALS_MAX`]) with
    /// `repairs` shards each; out-of-range values are clamped.
    pub fn new(originals: usize, repairs: Repairs) -> Self {
        let mut e = Self {
            originals_max: 1,
            repairs: Repairs::Fixed(1),
            loss: 0.0,
            shard_max: REPAIR_SHARD_MAX,
            first: None,
            opened_at: 0,
            covered: 0,
            datagrams: Vec::new(),
        };
        e.set_shape(originals, repairs);
        e
    }

    /// The block shape from the next block on (clamped to the ranges of
    /// [`Self::new`]).
    pub fn set_shape(&mut self, originals: usize, repairs: Repairs) {
        self.originals_max = originals.clamp(1, REPAIR_ORIGINALS_MAX);
        self.repairs = match repairs {
            Repairs::Fixed(m) => Repairs::Fixed(m.clamp(1, REPAIR_SHARDS_MAX)),
            Repairs::ByLoss => Repairs::ByLoss,
        };
    }

    /// The path's random loss rate now (a fraction), for
    /// [`Repairs::ByLoss`].
    pub fn set_loss(&mut self, loss: f64) {
        self.loss = loss;
    }

    /// The longest shard a repair packet has room for (the path's
    /// datagram body less the repair's header): a block whose records are
    /// longer enters the code as their halves (twice the originals and the
    /// repairs, each half as long).
    pub fn set_shard_max(&mut self, bytes: usize) {
        self.shard_max = bytes.max(4);
    }

    /// Whether the next datagram is to be covered: a block is open, the
    /// repairs are fixed, or the path loses enough.
    pub fn covers(&self) -> bool {
        !self.datagrams.is_empty()
            || match self.repairs {
                Repairs::Fixed(_) => true,
                Repairs::ByLoss => self.loss >= FEC_LOSS_MIN,
            }
    }

    /// When the open block was opened (`None`: no block is open).
    pub fn opened_at(&self) -> Option<Nanos> {
        (!self.datagrams.is_empty()).then_some(self.opened_at)
    }

    /// Packets in the open block.
    pub fn open(&self) -> usize {
        self.datagrams.len()
    }

    /// A covered datagram (plaintext `datagram`) left with `path_seq`:
    /// the repairs of the block it closes, if any. A datagram that does
    /// not fit the open block's span closes that block first; its repairs
    /// are returned and the datagram opens the next one.
    pub fn on_sent(&mut self, now: Nanos, path_seq: u16, datagram: &[u8]) -> Option<RepairSet> {
        let mut closed = None;
        if let Some(first) = self.first {
            let off = usize::from(path_seq.wrapping_sub(first));
            if off >= REPAIR_ORIGINALS_MAX || self.covered >> off != 0 {
                // Past the span, or not after the block's last packet
                // (a path sequence that went back: a restart).
                closed = self.close();
            }
        }
        let first = *self.first.get_or_insert(path_seq);
        if self.datagrams.is_empty() {
            self.opened_at = now;
        }
        let off = u32::from(path_seq.wrapping_sub(first));
        self.covered |= 1u64 << off;
        self.datagrams.push(datagram.to_vec());
        if self.datagrams.len() >= self.originals_max {
            return self.close().or(closed);
        }
        closed
    }

    /// Close the open block if it has been open for `max_age` or more
    /// (so that the last packets before a lull are protected too).
    pub fn flush_due(&mut self, now: Nanos, max_age: Nanos) -> Option<RepairSet> {
        if !self.datagrams.is_empty() && now.saturating_sub(self.opened_at) >= max_age {
            return self.close();
        }
        None
    }

    fn close(&mut self) -> Option<RepairSet> {
        let first = self.first.take()?;
        let covered = std::mem::take(&mut self.covered);
        let datagrams = std::mem::take(&mut self.datagrams);
        let longest = datagrams.iter().map(Vec::len).max()?;
        let halves = record_len_for(longest, false) > self.shard_max;
        let record_len = record_len_for(longest, halves);
        let per = if halves { 2 } else { 1 };
        let mut parts = Vec::with_capacity(datagrams.len() * per);
        for d in &datagrams {
            let r = record(d, record_len);
            if halves {
                let (a, b) = r.split_at(record_len / 2);
                parts.push(a.to_vec());
                parts.push(b.to_vec());
            } else {
                parts.push(r);
            }
        }
        let repairs = per
            * match self.repairs {
                Repairs::Fixed(m) => m,
                Repairs::ByLoss => repairs_for(datagrams.len(), self.loss),
            };
        let repairs = repairs.min(REPAIR_SHARDS_MAX);
        let shards = reed_solomon_simd::encode(parts.len(), repairs, &parts).ok()?;
        Some(RepairSet {
            first_path_seq: first,
            covered,
            originals: u8::try_from(datagrams.len()).ok()?,
            halves,
            shards,
        })
    }
}

/// Decoder counters (status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Repair packets taken.
    pub repairs: u64,
    /// Datagrams rebuilt.
    pub rebuilt: u64,
    /// Blocks with more missing packets than repairs came for.
    pub unrecoverable: u64,
    /// Repairs that did not fit what was stored (a shard too short for a
    /// stored record), or whose decode failed.
    pub inconsistent: u64,
}

#[derive(Debug)]
struct Pending {
    first: u16,
    covered: u64,
    originals: u8,
    repairs: u8,
    halves: bool,
    shard_len: usize,
    shards: Vec<(usize, Vec<u8>)>,
    done: bool,
}

/// The receiver's side, one per path. See the module documentation.
#[derive(Debug, Default)]
pub struct BlockDecoder {
    ring: Vec<Option<(u16, Vec<u8>)>>,
    pending: Vec<Pending>,
    stats: DecoderStats,
}

impl BlockDecoder {
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// A datagram (plaintext) arrived on the path with `path_seq`.
    pub fn on_received(&mut self, path_seq: u16, datagram: &[u8]) {
        if self.ring.is_empty() {
            self.ring.resize_with(DECODER_RING, || None);
        }
        let slot = &mut self.ring[usize::from(path_seq) % DECODER_RING];
        match slot {
            Some((s, buf)) => {
                *s = path_seq;
                buf.clear();
                buf.extend_from_slice(datagram);
            }
            None => *slot = Some((path_seq, datagram.to_vec())),
        }
    }

    /// Whether the datagram with `path_seq` arrived or was rebuilt (and is
    /// still in the ring).
    pub fn holds(&self, path_seq: u16) -> bool {
        self.stored(path_seq).is_some()
    }

    fn stored(&self, path_seq: u16) -> Option<&[u8]> {
        match self.ring.get(usize::from(path_seq) % DECODER_RING)? {
            Some((s, d)) if *s == path_seq => Some(d),
            _ => None,
        }
    }

    /// A repair packet arrived: the datagrams of its block it rebuilds
    /// (plaintext), each of them also stored as received.
    pub fn on_repair(&mut self, r: &RepairBody<'_>) -> Vec<Vec<u8>> {
        self.stats.repairs += 1;
        let seqs: Vec<u16> = (0..REPAIR_ORIGINALS_MAX as u16)
            .filter(|i| r.covered >> i & 1 == 1)
            .map(|i| r.first_path_seq.wrapping_add(i))
            .collect();
        let at = match self.pending.iter().position(|p| {
            p.first == r.first_path_seq
                && p.covered == r.covered
                && p.shard_len == r.shard.len()
                && p.halves == r.halves
        }) {
            Some(i) => i,
            None => {
                if self.pending.len() >= PENDING_BLOCKS {
                    let old = self.pending.remove(0);
                    if !old.done {
                        self.stats.unrecoverable += 1;
                    }
                }
                self.pending.push(Pending {
                    first: r.first_path_seq,
                    covered: r.covered,
                    originals: r.originals,
                    repairs: r.repairs,
                    halves: r.halves,
                    shard_len: r.shard.len(),
                    shards: Vec::new(),
                    done: false,
                });
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[at];
        if p.done || p.shards.iter().any(|(i, _)| *i == usize::from(r.index)) {
            return Vec::new();
        }
        p.shards.push((usize::from(r.index), r.shard.to_vec()));
        let missing: Vec<usize> = (0..seqs.len())
            .filter(|&i| self.stored(seqs[i]).is_none())
            .collect();
        let p = &mut self.pending[at];
        if missing.is_empty() {
            p.done = true;
            return Vec::new();
        }
        // Each missing packet is one erasure, or two with halves.
        if p.shards.len() < missing.len() * if p.halves { 2 } else { 1 } {
            if p.shards.len() == usize::from(p.repairs) {
                // Every repair came and the losses are more: given up.
                p.done = true;
                self.stats.unrecoverable += 1;
            }
            return Vec::new();
        }
        let out = self.decode(at, &seqs, &missing);
        self.pending[at].done = true;
        out.into_iter()
            .map(|(seq, d)| {
                self.on_received(seq, &d);
                self.stats.rebuilt += 1;
                d
            })
            .collect()
    }

    /// Decode block `at`: the missing datagrams as (path seq, plaintext).
    fn decode(&mut self, at: usize, seqs: &[u16], missing: &[usize]) -> Vec<(u16, Vec<u8>)> {
        let p = &self.pending[at];
        let per = if p.halves { 2 } else { 1 };
        let (k, m) = (usize::from(p.originals) * per, usize::from(p.repairs));
        let record_len = p.shard_len * per;
        let mut originals = Vec::with_capacity(k);
        for (i, &s) in seqs.iter().enumerate() {
            if let Some(d) = self.stored(s) {
                if d.len() + 2 > record_len {
                    self.stats.inconsistent += 1;
                    return Vec::new();
                }
                let r = record(d, record_len);
                for (h, part) in r.chunks(p.shard_len).enumerate() {
                    originals.push((i * per + h, part.to_vec()));
                }
            }
        }
        let recovery = p.shards.iter().map(|(i, s)| (*i, s));
        let Ok(restored) = reed_solomon_simd::decode(k, m, originals, recovery) else {
            self.stats.inconsistent += 1;
            return Vec::new();
        };
        let mut out = Vec::with_capacity(missing.len());
        for &i in missing {
            let mut r = Vec::with_capacity(record_len);
            for h in 0..per {
                if let Some(part) = restored.get(&(i * per + h)) {
                    r.extend_from_slice(part);
                }
            }
            let len = r
                .first_chunk::<2>()
                .map_or(usize::MAX, |b| usize::from(u16::from_be_bytes(*b)));
            match (r.len() == record_len).then(|| r.get(2..2 + len)).flatten() {
                Some(d) => out.push((seqs[i], d.to_vec())),
                None => self.stats.inconsistent += 1,
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "fec_tests.rs"]
mod tests;
