//! Loss recovery inside the tunnel (`[reorder] recover`, on by default with
//! path-aware sending; both peers need it): the receiver asks for data
//! packets a release policy has proven lost ([`PacketType::Nack`]), the
//! sender sends them again from a ring of recent packets on its best path,
//! and the receiver holds the gap meanwhile instead of releasing it — so
//! the inner TCP sees a short delay instead of a loss (ARQ, in the spirit
//! of RFC 5681's fast retransmit but one layer down, where the path RTT is
//! short).
//!
//! Which losses it hides: with path-aware sending the tunnel's own send
//! queue is the bottleneck the inner TCP fills, and its congestion signal
//! is that queue's delay and its drops beyond `queue_ms`, which never got a
//! sequence number and are never resent. A loss on a path is the link's, or
//! the path's rate controller overshooting (its peer reports it as
//! congestion loss and the controller cuts the rate,
//! [`crate::pace::TargetDelay`]); neither is the inner TCP's to answer, so
//! both are resent. With static weights (no own queue, no pacing) a path's
//! congestion drops are the inner TCP's signal, and recovery stays opt-in.
//!
//! Invariants:
//! * a gap is asked for once; it is released (as today) when its answer
//!   has not come within the wait ([`Recovery::wait`]), so recovery can
//!   delay a loss by at most that long, [`RECOVERY_WAIT_MAX_NS`] at most
//!   (however short `max_delay`): the reorder buffer holds a packet for
//!   `max_delay` plus that wait ([`Recovery::hold`]). The wait is the
//!   paths' round trips or, if longer, what the answers to earlier
//!   requests took (their RFC 6298 timeout, `rtt.rs`); a gap asked for while others
//!   still wait starts its wait behind their answers, one packet each
//!   at the rate the recovery path delivers (`recovery_flow.rs`); every
//!   wait is backed off on answers that came late (`recovery_wait.rs`);
//! * the ring holds the last [`RING_PACKETS`] data packets by sequence
//!   number, and at most [`RING_BYTES_MAX`] bytes of them: storing beyond
//!   that frees the oldest copies (with the tunnel MTU of eight datagrams,
//!   4096 packets of 11 KB would hold 47 MB per peer), and none older than
//!   a request for it can come ([`keep_for`]: its wait in the send queue,
//!   twice the slowest round trip and the receiver's longest wait): what
//!   it holds is the tunnel's sending rate times that time, so a
//!   concentrator's peer at a few Mbit/s keeps about a hundred KB, not
//!   8 MB. A request for a packet no longer held is counted and ignored;
//! * queues are bounded ([`MAX_PENDING`], [`MAX_RETRANSMIT_QUEUE`]); what does
//!   not fit is not recovered (counted), never an unbounded allocation;
//! * a request waits at the sender (for the recovery path's pacing budget)
//!   at most [`RECOVERY_WAIT_MAX_NS`], the longest a receiver waits for its
//!   answer: older ones are dropped (`resends_expired`), never sent. (A
//!   burst of losses on a slow path once queued seconds of resends that
//!   took its whole budget, ahead of its data, and all came too late.)
//! * with recovery off nothing here exists and the wire is unchanged.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::path_loss::SentByPath;
use super::{Transmit, Tunnel};
use crate::crypto::TAG_LEN;
use crate::rtt::SmoothedRtt;
use crate::wire::{self, NackBody, NackKind, PacketType, HEADER_LEN, MAX_FRAGMENTS, NACK_MAX_SEQS};
use crate::{Nanos, PathId, NANOS_PER_MS};

/// Tuning knobs: packets kept for retransmission, gaps waited for at once,
/// requests queued at the sender, and the wait bounds.
pub const RING_PACKETS: usize = 4096;
/// The ring's bound in bytes of packets held (tuning knob: 64 ms of a
/// 1 Gbit/s sender, far beyond a NACK's round trip on the lab's paths).
pub const RING_BYTES_MAX: usize = 8 << 20;
pub const MAX_PENDING: usize = 1024;
pub const MAX_RETRANSMIT_QUEUE: usize = 1024;
/// Longest wait for a resend, whatever `max_delay` (tuning knob: two
/// round trips of a path 125 ms long each way; an LTE path of 60-80 ms
/// each way needs 250-320 ms, and a resend that comes after the wait is
/// a loss to the inner TCP all the same).
pub const RECOVERY_WAIT_MAX_NS: Nanos = 500 * NANOS_PER_MS;
/// The least rate at which answers to several gaps are taken to arrive
/// one after another (tuning knob: the pacing's own floor,
/// [`crate::pace::MIN_RATE_BPS`]; a path that delivers less is barely in
/// use, and its answers are not what the wait is for).
pub const ANSWER_RATE_MIN_BPS: u64 = 1_000_000;
/// Recent loss (a fraction) by which a recovery path may exceed the least
/// lossy path's and still be chosen for its lower RTT (tuning knob: a
/// resend lost on it costs what one arriving too late costs).
pub const RECOVERY_LOSS_SLACK: f64 = 0.05;
/// A resend is copied to the least lossy path only when the recovery
/// path's recent loss is at least this many times that path's, and this
/// much above it (a fraction; tuning knobs: on two 4 Mbit/s links that
/// both overflowed, 5-6 % each, the copies took 3.5 points of the pair's
/// capacity and saved nothing; beside a clean link, a 13 Mbit/s path
/// losing 6.5 % lost resends again, each a loss to the inner TCP).
pub const RESEND_COPY_LOSS_RATIO: f64 = 2.0;
pub const RESEND_COPY_LOSS_MIN: f64 = 0.005;
/// How long the ring keeps a copy: a packet queued for up to
/// `queue_max`, on paths whose slowest round trip is `rtt_max`, to a
/// receiver that waits at most `max_delay` for a gap, is asked for within
/// `queue_max + rtt_max + max_delay`; a round trip more is the margin.
pub fn keep_for(queue_max: Nanos, rtt_max: Nanos, max_delay: Nanos) -> Nanos {
    queue_max + 2 * rtt_max + max_delay
}

/// Buffers of expired copies kept for the next ones (tuning knob: the
/// copies stored within a millisecond or so at a high rate).
const SPARE_BUFFERS: usize = 32;
/// The sequence number an empty ring slot holds: never a packet's (the
/// tunnel would need 2^64 packets to reach it), and never found.
const EMPTY_SLOT: u64 = u64::MAX;

/// Tunnel-sequence NACK bodies remembered to drop their second copy
/// (tuning knob).
const RECENT_NACKS: usize = 64;
/// Gaps asked for by tunnel sequence number, remembered so that their
/// late or second copies do not widen the release margin (tuning knob).
const ASKED_REMEMBERED: usize = 1024;
/// Resends remembered to answer a request once (tuning knob).
const RECENT_RESENDS: usize = 512;

/// Recovery counters, in `mpt status` under `recovery`.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RecoveryStats {
    /// Receiver: NACK packets sent and the gaps they asked for.
    pub nacks_sent: u64,
    pub gaps_requested: u64,
    /// Receiver: gaps filled by a retransmission in time, and given up.
    pub recovered: u64,
    pub gave_up: u64,
    /// Receiver: gaps not asked for because too many were pending.
    pub pending_full: u64,
    /// Sender: requests received, packets sent again, and requests for
    /// packets no longer in the ring (or queue full).
    pub requests_received: u64,
    pub retransmitted: u64,
    pub not_available: u64,
    /// Sender: bytes of packets held for resending now, the bound, and
    /// how long a copy is kept (ms).
    pub ring_bytes: u64,
    pub ring_bytes_max: u64,
    pub ring_keep_ms: u64,
    /// Receiver: packets shown lost by a path's own sequence numbers and
    /// asked for by them (path NACKs, `path_loss.rs`), and runs of path
    /// losses too long to ask for so.
    pub path_losses_requested: u64,
    pub path_gaps_too_long: u64,
    /// Sender: path NACK entries received, and those that named data
    /// still held (queued for resending).
    pub path_requests_received: u64,
    pub path_requests_resent: u64,
    /// Sender: NACKs dropped as the copy of one already answered, and
    /// requests for a packet whose resend was still on its way.
    pub nack_copies: u64,
    pub resend_in_flight: u64,
    /// Sender: requests that waited for the recovery path's budget longer
    /// than any receiver waits for the answer (`RECOVERY_WAIT_MAX_NS`),
    /// dropped unsent.
    pub resends_expired: u64,
    /// Receiver: how long the answers to its requests took, smoothed, and
    /// the wait that timing sets (ms; 0 before the first answer:
    /// `rtt.rs`).
    pub answer_ms: u64,
    pub answer_wait_ms: u64,
    /// Receiver: the waits' backoff now (1: none; `BACKOFF_MAX`), and
    /// the answers that came after their gap was given up (each backs
    /// the waits off, `Recovery::on_late_answer`).
    pub wait_backoff: u64,
    pub late_answers: u64,
    /// Sender: packets sent again because the path they left on stalled
    /// (no report covered them in time, `path/stall.rs`).
    pub stall_resends: u64,
    /// Sender: resends sent once more on the least lossy path (a resend
    /// lost again is a loss the inner TCP sees), and those not sent for
    /// want of that path's pacing budget.
    pub resend_copies: u64,
    pub resend_copies_skipped: u64,
}

/// A resend to send once more: on which path, as what, and its header's
/// class and sequence number (the body is `Recovery::resend_copy_body`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ResendCopy {
    pub path: PathId,
    pub ty: PacketType,
    pub class: u8,
    pub seq: u64,
}

struct Stored {
    seq: u64,
    class: u8,
    bytes: Vec<u8>,
}

/// Recovery state of one tunnel (both roles: every peer sends and receives).
pub struct Recovery {
    ring: Vec<Stored>,
    /// Slots holding a copy, oldest first, with the sequence number they
    /// held and the time when stored (a slot reused since is skipped).
    held: VecDeque<(usize, u64, Nanos)>,
    /// Bytes of the copies held (their buffers' capacities).
    held_bytes: usize,
    /// How long a copy is kept ([`keep_for`]).
    keep_ns: Nanos,
    /// Buffers of expired copies, for reuse (at most [`SPARE_BUFFERS`]).
    spare: Vec<Vec<u8>>,
    /// Sender: sequence numbers asked for, to send again, with when the
    /// request came.
    retransmit: VecDeque<(u64, Nanos)>,
    /// Receiver: gaps asked for, ascending, with when their wait starts,
    /// the wait, and the latest they may be held (the request plus
    /// [`RECOVERY_WAIT_MAX_NS`]); the deadline is the start plus the wait
    /// times the backoff now ([`Recovery::deadline_of`]).
    pending: VecDeque<(u64, Nanos, Nanos, Nanos)>,
    /// Receiver: gaps to put into NACKs.
    nack_out: VecDeque<u64>,
    /// Receiver: every gap below this has been considered already.
    considered_upto: u64,
    /// Receiver: when the release last found a gap the policy gave up
    /// still within its wait (held back for its answer); `None` when the
    /// last release held nothing back. The policy's deadline for what was
    /// given up by then is past, and not due again before recovery's own
    /// ([`Tunnel::release_deadline`](super::Tunnel)).
    pub(super) held_at: Option<Nanos>,
    scratch: Vec<u64>,
    /// Sender: what each recent path sequence number carried.
    pub(super) sent: SentByPath,
    /// Receiver: path losses to put into path NACKs: (the peer's path id,
    /// the path sequence number's low 16 bits).
    pub(super) path_nack_out: VecDeque<(u8, u16)>,
    /// A NACK body to send once more, on this second path.
    nack_copy: Option<(PathId, Vec<u8>)>,
    /// Sender: a resend's body to send once more, on the least lossy
    /// path ([`ResendCopy`]); `resend_copy_body` holds its bytes.
    pub(super) resend_copy: Option<ResendCopy>,
    pub(super) resend_copy_body: Vec<u8>,
    /// Sender: hashes of the last tunnel-sequence NACK bodies, so that the
    /// second copy of one is not answered twice.
    recent_nacks: VecDeque<u64>,
    /// Sender: the last packets sent again, and when, so that a request
    /// for one whose resend is still on its way is not answered twice.
    recent_resends: VecDeque<(u64, Nanos)>,
    /// Receiver: the last gaps asked for by tunnel sequence number,
    /// ascending, with when (0 once their answer was timed).
    pub(super) asked: VecDeque<(u64, Nanos)>,
    /// Receiver: how long answers took, from a gap's request (or from
    /// when its answer could follow those still due) to the arrival of
    /// the packet asked for, within the wait or after it (those are what
    /// it must learn); an answer that never comes gives no sample.
    pub(super) resend_delay: SmoothedRtt,
    /// Receiver: the size of the data packets arriving (inner bytes),
    /// smoothed ([`PACKET_BYTES_GAIN_SHIFT`]): an answer is a whole
    /// packet, several datagrams when the tunnel MTU cuts it in pieces.
    pub(super) packet_bytes: u64,
    /// Receiver: the waits' backoff (a multiplier, 1 to
    /// [`BACKOFF_MAX`]) and when it last changed ([`Recovery::on_late_answer`]).
    backoff: u64,
    backoff_at: Nanos,
    pub stats: RecoveryStats,
}

impl Recovery {
    pub fn new() -> Self {
        Self {
            ring: (0..RING_PACKETS)
                .map(|_| Stored {
                    seq: EMPTY_SLOT,
                    class: 0,
                    bytes: Vec::new(),
                })
                .collect(),
            held: VecDeque::with_capacity(RING_PACKETS),
            held_bytes: 0,
            keep_ns: Nanos::MAX,
            spare: Vec::new(),
            retransmit: VecDeque::with_capacity(MAX_RETRANSMIT_QUEUE),
            pending: VecDeque::with_capacity(MAX_PENDING),
            nack_out: VecDeque::with_capacity(MAX_PENDING),
            considered_upto: 0,
            held_at: None,
            scratch: Vec::with_capacity(MAX_PENDING),
            sent: SentByPath::default(),
            path_nack_out: VecDeque::new(),
            nack_copy: None,
            resend_copy: None,
            resend_copy_body: Vec::new(),
            recent_nacks: VecDeque::with_capacity(RECENT_NACKS),
            recent_resends: VecDeque::with_capacity(RECENT_RESENDS),
            asked: VecDeque::with_capacity(ASKED_REMEMBERED),
            resend_delay: SmoothedRtt::default(),
            packet_bytes: 0,
            backoff: BACKOFF_START,
            backoff_at: 0,
            stats: RecoveryStats {
                ring_bytes_max: RING_BYTES_MAX as u64,
                wait_backoff: BACKOFF_START,
                ..RecoveryStats::default()
            },
        }
    }

    /// Keep copies for `keep_ns` ([`keep_for`]); older ones go at the next
    /// store.
    pub fn set_keep(&mut self, keep_ns: Nanos) {
        self.keep_ns = keep_ns;
        self.stats.ring_keep_ms = keep_ns / NANOS_PER_MS;
    }

    /// Keep a copy of data packet `seq` (its inner bytes), stored at `now`,
    /// within [`RING_BYTES_MAX`]: copies older than the keep time, and the
    /// oldest ones beyond the bound, make room.
    pub fn store(&mut self, now: Nanos, seq: u64, class: u8, inner: &[u8]) {
        let i = self.make_room(now, seq, inner.len());
        let s = &mut self.ring[i];
        if s.bytes.capacity() > RING_BYTES_MAX / 4 {
            s.bytes = Vec::new();
        }
        if s.bytes.capacity() == 0 {
            // A spare buffer much larger than the packet would count its
            // whole capacity against the bound: it is freed instead.
            if let Some(b) = self.spare.pop().filter(|b| b.capacity() <= 2 * inner.len()) {
                s.bytes = b;
            }
        }
        s.bytes.clear();
        s.bytes.extend_from_slice(inner);
        self.keep_in(now, i, seq, class);
    }

    /// Keep data packet `seq`, `pkt` itself (all of it is the packet), as
    /// [`Recovery::store`] keeps a copy: the ring takes the buffer, and
    /// `pkt` becomes a buffer to build the next packet in (a spare, or the
    /// slot's previous one: its length and bytes are left as they were).
    /// One copy of every packet fewer for a sender that builds packets
    /// outside its datagram buffers (the TUN offload's segments).
    pub fn store_owned(&mut self, now: Nanos, seq: u64, class: u8, pkt: &mut Vec<u8>) {
        let i = self.make_room(now, seq, pkt.len());
        let s = &mut self.ring[i];
        let old = std::mem::replace(&mut s.bytes, std::mem::take(pkt));
        *pkt = if old.capacity() > 0 && old.capacity() <= RING_BYTES_MAX / 4 {
            old
        } else {
            self.spare.pop().unwrap_or_default()
        };
        self.keep_in(now, i, seq, class);
    }

    /// Free the slot of `seq` and, oldest first, the copies held beyond the
    /// keep time or beyond the bound with `len` more bytes; the slot's
    /// index.
    fn make_room(&mut self, now: Nanos, seq: u64, len: usize) -> usize {
        let i = (seq % RING_PACKETS as u64) as usize;
        // The slot's own buffer is reused; its bytes leave the count.
        self.held_bytes -= self.ring[i].bytes.capacity();
        self.ring[i].seq = EMPTY_SLOT;
        while let Some(&(old, old_seq, at)) = self.held.front() {
            let need = len.max(self.ring[i].bytes.capacity());
            let full = self.held_bytes + need > RING_BYTES_MAX;
            if !full && now.saturating_sub(at) <= self.keep_ns {
                break;
            }
            self.held.pop_front();
            if old != i {
                self.evict(old, old_seq);
            }
        }
        i
    }

    /// Slot `i` now holds packet `seq`: count it and remember when.
    fn keep_in(&mut self, now: Nanos, i: usize, seq: u64, class: u8) {
        let s = &mut self.ring[i];
        s.seq = seq;
        s.class = class;
        self.held_bytes += s.bytes.capacity();
        if self.held.len() >= RING_PACKETS {
            // The oldest entry goes, in O(1): its slot was reused since
            // (the stores of the last RING_PACKETS sequence numbers), or,
            // sequence numbers skipped, it is the oldest copy held and
            // makes room. (A scan for stale entries here, on every store
            // once the deque filled, cost a tunnel of MTU 1420 nine tenths
            // of its throughput: 475 Mbit/s on one unshaped path.)
            if let Some((old, old_seq, _)) = self.held.pop_front() {
                if old != i {
                    self.evict(old, old_seq);
                }
            }
        }
        self.held.push_back((i, seq, now));
        self.stats.ring_bytes = self.held_bytes as u64;
    }

    /// The inner bytes of data packet `seq` (a fragmented packet's first
    /// sequence number), while the ring holds them.
    pub fn stored(&self, seq: u64) -> Option<&[u8]> {
        let s = &self.ring[(seq % RING_PACKETS as u64) as usize];
        (s.seq == seq).then_some(s.bytes.as_slice())
    }

    /// Free the copy in `slot` if it still holds `seq` (its buffer goes
    /// to the spares).
    fn evict(&mut self, slot: usize, seq: u64) {
        let s = &mut self.ring[slot];
        if s.seq != seq {
            return;
        }
        self.held_bytes -= s.bytes.capacity();
        s.seq = EMPTY_SLOT;
        let b = std::mem::take(&mut s.bytes);
        if self.spare.len() < SPARE_BUFFERS && b.capacity() <= RING_BYTES_MAX / 4 {
            self.spare.push(b);
        }
    }

    /// The ring slot of the packet that sequence number `seq` belongs to
    /// (a packet sent as fragments takes one number per piece, and is kept
    /// under its first), and the piece's index.
    fn find(&self, seq: u64, body_max: usize) -> Option<(usize, usize)> {
        // `seq` comes from the peer's NACK and may be any number,
        // the empty slots' mark included.
        if seq == EMPTY_SLOT {
            return None;
        }
        for k in 0..(MAX_FRAGMENTS as u64).min(seq + 1) {
            let i = ((seq - k) % RING_PACKETS as u64) as usize;
            let s = &self.ring[i];
            if s.seq == seq - k {
                let count = wire::pieces(s.bytes.len(), body_max).unwrap_or(1) as u64;
                return (k < count).then_some((i, k as usize));
            }
        }
        None
    }

    /// The peer asked for these packets (by tunnel sequence numbers, or
    /// by the path sequence numbers they left with on our path; `last_sent`
    /// is the latest path sequence number we sent on the path named). A
    /// tunnel sequence number sent again less than `in_flight` ago, or
    /// still waiting to be, is not sent once more: the peer asked before
    /// that copy could arrive (its path NACK and its release policy both
    /// ask for one loss).
    pub fn on_nack(
        &mut self,
        now: Nanos,
        in_flight: Nanos,
        body: &NackBody<'_>,
        raw: &[u8],
        body_max: usize,
        last_sent: impl Fn(PathId) -> Option<u32>,
    ) {
        let kind = body.kind();
        if kind == NackKind::Tunnel {
            // The copy sent on a second path names the same gaps: a gap is
            // asked for once, so the same body twice is a copy.
            let h = fnv1a(raw);
            if self.recent_nacks.contains(&h) {
                self.stats.nack_copies += 1;
                return;
            }
            if self.recent_nacks.len() == RECENT_NACKS {
                self.recent_nacks.pop_front();
            }
            self.recent_nacks.push_back(h);
        }
        for entry in body.seqs() {
            let seq = match kind {
                NackKind::Tunnel => {
                    let fresh = |&(s, at): &(u64, Nanos)| s == entry && now < at + in_flight;
                    if self.recent_resends.iter().any(fresh) || self.queued(entry) {
                        self.stats.requests_received += 1;
                        self.stats.resend_in_flight += 1;
                        continue;
                    }
                    entry
                }
                NackKind::Path(path) => {
                    self.stats.path_requests_received += 1;
                    let Some(last) = last_sent(path) else {
                        continue;
                    };
                    let Some(seq) = self.sent.take(path, entry as u16, last) else {
                        continue;
                    };
                    // Its gap may have been asked for by tunnel sequence
                    // number an instant before (equal paths): one resend.
                    // A resend lost on its way is asked for a round trip
                    // after it left, past half of `in_flight`.
                    let twin = |&(s, at): &(u64, Nanos)| s == seq && now < at + in_flight / 2;
                    if self.recent_resends.iter().any(twin) || self.queued(seq) {
                        self.stats.resend_in_flight += 1;
                        continue;
                    }
                    self.stats.path_requests_resent += 1;
                    seq
                }
            };
            self.stats.requests_received += 1;
            let have = self.find(seq, body_max).is_some();
            if have && self.retransmit.len() < MAX_RETRANSMIT_QUEUE {
                self.retransmit.push_back((seq, now));
            } else {
                self.stats.not_available += 1;
            }
        }
    }

    /// Whether `seq` waits to be sent again already. Its two requests (a
    /// path NACK and the release policy's, for one loss) often both come
    /// before a paced resend leaves: on two 4 Mbit/s links 43 % of the
    /// resends arrived as duplicates when only those sent were looked at.
    /// A scan: the queue holds what one path's pacing budget holds back.
    fn queued(&self, seq: u64) -> bool {
        self.retransmit.iter().any(|&(s, _)| s == seq)
    }

    /// Queue `seq` for sending again: the path it left on stalled
    /// (`path/stall.rs`). Returns whether a copy was held and queued (or
    /// waits already).
    pub fn resend_stalled(&mut self, now: Nanos, seq: u64, body_max: usize) -> bool {
        if self.queued(seq) {
            return true;
        }
        if self.find(seq, body_max).is_none() || self.retransmit.len() >= MAX_RETRANSMIT_QUEUE {
            return false;
        }
        self.retransmit.push_back((seq, now));
        self.stats.stall_resends += 1;
        true
    }
}

/// FNV-1a, 64 bits: a NACK body's identity among the last few.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Default for Recovery {
    fn default() -> Self {
        Self::new()
    }
}

#[path = "recovery_flow.rs"]
mod flow;

#[path = "recovery_wait.rs"]
mod wait;
pub use wait::*;

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
