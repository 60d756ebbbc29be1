//! The queue of one traffic class: per-flow queues served by Deficit Round
//! Robin (Shreedhar and Varghese, SIGCOMM 1995), each with its own CoDel
//! (RFC 8289), as FQ-CoDel arranges them (RFC 8290).
//!
//! Flows hash into [`FLOW_BUCKETS`] buckets, set-associatively
//! ([`FLOW_WAYS`]: a flow takes a free bucket of its set, so concurrent
//! flows rarely share one). An active bucket is served a
//! quantum of bytes per round, so backlogged flows share the class's
//! service equally in bytes whatever their packet sizes or rates. As in
//! RFC 8290 §4.1, a flow that becomes active goes to a list of *new*
//! flows, served before the *old* (backlogged) ones for one quantum: a
//! sparse flow (a VoIP-like or M2M stream, a TCP flow that backed off and
//! comes back) is served at once instead of after a round of the
//! backlogged ones; a new flow that empties moves to the old list, so that
//! it cannot take that priority again and again. When the
//! class is at its packet limit, the fattest bucket loses packets from its
//! head (RFC 8290 §4.1): the flow that sends beyond its share pays for it,
//! not the others; a packet of the fattest flow itself is refused at the
//! input without being copied. A flow that does not answer drops (and
//! brings well over an equal share into the class) is, in addition, held
//! to its fair share at the input ([`super::share`]); a flow that backs
//! off is never policed, so it cannot be starved by one that does not.
//! Where CoDel would drop an ECN-capable packet, it is marked CE and served
//! instead ([`super::ecn`]). An ECN-capable packet that waited a good part
//! of the class's bound ([`Serve::mark_sojourn_ns`]) is marked as well,
//! whatever CoDel's state: CoDel waits an interval of standing queue
//! before its first signal, and a TCP in slow start doubles its queue in
//! that time, past the bound, where packets are dropped. With the early
//! mark, an ECN flow leaves slow start on a mark instead of on losses.
//!
//! Invariants:
//! * `packets` and `bytes` are the sums over the buckets; a bucket that
//!   holds packets is in exactly one of `new` and `old`; an empty bucket
//!   is in at most `old` (until its turn comes);
//! * within a flow, packets leave in the order they came;
//! * buffers are recycled through the caller's pool (of at most
//!   [`super::POOL_BUFFERS`]): no allocation per packet after warm-up;
//!   memory is bounded by `limit` packets and `limit_bytes` bytes: a class
//!   at either bound makes room from its fattest flow, as when it is full.

use std::collections::VecDeque;

use super::codel::{Codel, Params};
use super::ecn;
use super::share::{FairShare, Police, UNRESPONSIVE_DROPS};
use crate::Nanos;

pub use super::FLOW_BUCKETS;
/// Buckets per set of the set-associative flow table (tuning knob, as
/// CAKE's 8-way hashing): a flow takes a free bucket of its set, so two
/// flows share one only when more than this many of the set's are busy.
/// With a plain hash, 17 flows in 256 buckets collide in 4 runs of 10: two
/// TCP flows then get half a share each, and one that lands on a policed
/// flood's bucket is policed with it (0.0 Mbit/s beside 7.1 for the rest).
pub const FLOW_WAYS: usize = 8;
const FLOW_SETS: usize = FLOW_BUCKETS / FLOW_WAYS;
/// A bucket is busy while it holds packets, is listed, is policed, or
/// admitted a packet within this long (tuning knob: two fair-share
/// windows, so that a flow whose packets seldom wait keeps its bucket).
const FLOW_IDLE_NS: Nanos = 2 * super::share::WINDOW_NS;

/// Packets dropped from the fattest flow at once when the class is full
/// (tuning knob; RFC 8290's implementation drops up to 64).
const DROP_BATCH_PACKETS: usize = 16;

/// How [`ClassQueue::pop`] serves: the time, the class's bounds and
/// CoDel's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Serve {
    pub now: Nanos,
    /// Packets that entered before this are dropped on the way (they
    /// waited beyond the class's bound).
    pub expired_before: Nanos,
    /// An ECN-capable packet that waited at least this long is marked CE
    /// whatever CoDel's state (see the module documentation).
    pub mark_sojourn_ns: Nanos,
    /// CoDel's one-packet allowance.
    pub mtu: usize,
    pub codel: Params,
}

impl Serve {
    /// At `now`, without a bound or an early mark, with RFC 8289's
    /// parameters.
    pub fn at(now: Nanos, mtu: usize) -> Self {
        Self {
            now,
            expired_before: 0,
            mark_sojourn_ns: Nanos::MAX,
            mtu,
            codel: Params::default(),
        }
    }
}

/// One waiting packet.
#[derive(Debug)]
pub struct Item {
    /// When it entered mpt.
    pub at: Nanos,
    pub buf: Vec<u8>,
    /// Marked CE instead of dropped, by CoDel or as it neared the bound
    /// ([`super::ecn`]).
    pub marked: bool,
}

#[derive(Debug, Default)]
struct Flow {
    q: VecDeque<Item>,
    bytes: usize,
    deficit: i64,
    codel: Codel,
    /// In the new or the old list.
    listed: bool,
    police: Police,
    /// The full flow hash of the flow holding the bucket, and when it last
    /// brought a packet (`None`: never held).
    tag: u64,
    seen: Option<Nanos>,
}

/// What [`ClassQueue::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued; `dropped` packets of the fattest flow made room.
    Queued { dropped: usize },
    /// Refused: the class is full and this packet's flow is the fattest
    /// (`dropped` packets of other flows went before it was).
    Refused { dropped: usize },
}

/// One class's flows. See the module documentation.
#[derive(Debug)]
pub struct ClassQueue {
    flows: Vec<Flow>,
    /// Flows that became active, served first (RFC 8290's new_flows).
    new: VecDeque<usize>,
    /// Backlogged flows (RFC 8290's old_flows).
    old: VecDeque<usize>,
    packets: usize,
    bytes: usize,
    limit: usize,
    limit_bytes: usize,
    quantum: i64,
    aqm: bool,
    share: FairShare,
    /// Until when some flow is flagged ([`super::share`]): before, the
    /// input needs no flow hash for packets that do not wait here.
    policing_until: Nanos,
    flag_episodes: u64,
}

impl ClassQueue {
    /// A class holding at most `limit` packets, serving `quantum` bytes per
    /// flow and round, with CoDel on each flow if `aqm`.
    pub fn new(limit: usize, quantum: usize, aqm: bool) -> Self {
        Self {
            flows: (0..FLOW_BUCKETS).map(|_| Flow::default()).collect(),
            new: VecDeque::new(),
            old: VecDeque::new(),
            packets: 0,
            bytes: 0,
            limit: limit.max(1),
            limit_bytes: usize::MAX,
            quantum: quantum.max(1) as i64,
            aqm,
            share: FairShare::default(),
            policing_until: 0,
            flag_episodes: 0,
        }
    }

    /// Hold at most `bytes` bytes as well (at least one packet).
    pub fn with_limit_bytes(mut self, bytes: usize) -> Self {
        self.limit_bytes = bytes;
        self
    }

    pub fn packets(&self) -> usize {
        self.packets
    }

    /// Whether a packet of `len` bytes does not fit (a bound reached).
    fn over(&self, len: usize) -> bool {
        self.packets >= self.limit || (self.packets > 0 && self.bytes + len > self.limit_bytes)
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }
    /// The buckets that are listed (new, then old).
    fn listed(&self) -> impl Iterator<Item = usize> + '_ {
        self.new.iter().chain(self.old.iter()).copied()
    }

    /// Flows with packets waiting.
    pub fn active_flows(&self) -> usize {
        self.listed()
            .filter(|f| !self.flows[*f].q.is_empty())
            .count()
    }

    /// The bucket of flow `hash` at `now`: the one of its set that it
    /// holds, else a free one of its set (taken), else one the set's
    /// flows share (see [`FLOW_WAYS`]).
    fn bucket(&mut self, hash: u64, now: Nanos) -> usize {
        let set = (hash % FLOW_SETS as u64) as usize * FLOW_WAYS;
        let ways = set..set + FLOW_WAYS;
        let busy = |f: &Flow| {
            f.listed
                || !f.q.is_empty()
                || f.police.flagged(now)
                || f.seen.is_some_and(|t| now.saturating_sub(t) < FLOW_IDLE_NS)
        };
        let at = ways
            .clone()
            .find(|&i| self.flows[i].tag == hash && busy(&self.flows[i]))
            .or_else(|| ways.clone().find(|&i| !busy(&self.flows[i])));
        let i = match at {
            Some(i) => i,
            None => set + ((hash / FLOW_SETS as u64) % FLOW_WAYS as u64) as usize,
        };
        let f = &mut self.flows[i];
        if f.tag != hash && !busy(f) {
            f.tag = hash;
            f.police = Police::default();
            f.codel = Codel::default();
        }
        f.seen = Some(f.seen.map_or(now, |t| t.max(now)));
        i
    }

    /// The bucket holding the most bytes.
    fn fattest(&self) -> Option<usize> {
        self.listed()
            .filter(|f| !self.flows[*f].q.is_empty())
            .max_by_key(|f| self.flows[*f].bytes)
    }

    /// Whether a packet of `len` bytes of flow `hash` may enter the class
    /// at `now` (every packet of the class, whether it waits here or not):
    /// a flow that does not answer drops is held to its fair share
    /// ([`super::share`]). Counts the packet for the class's rate.
    pub fn admit(&mut self, hash: u64, now: Nanos, len: usize) -> bool {
        let f = self.bucket(hash, now);
        self.share.on_offered(now, f, len);
        let allowance = self.share.allowance_bps();
        if !self.flows[f].police.admit(now, len, allowance) {
            // Still beyond its allowance: the flag stays up while the
            // flow still offers a heavy flow's rate ([`super::share`]).
            if self.share.heavy(f) {
                self.flag(f, now);
            }
            return false;
        }
        self.share.on_admitted(now, f, len);
        true
    }

    /// The class's fair-share state (status).
    pub fn share(&self) -> &FairShare {
        &self.share
    }

    /// What the class can carry, bytes per second ([`super::share`]).
    pub fn set_capacity(&mut self, bps: Option<u64>) {
        self.share.set_capacity(bps);
    }

    /// Whether some flow of the class is flagged at `now`: every packet
    /// entering the class must then go through [`Self::admit`] (else only
    /// those that wait here, which are hashed anyway).
    pub fn policing(&self, now: Nanos) -> bool {
        now < self.policing_until
    }

    /// Flag flow `hash` at `now` as if it had misbehaved (tests: a flow
    /// flagged by mistake).
    #[cfg(test)]
    pub(crate) fn flag_flow(&mut self, hash: u64, now: Nanos) {
        let f = self.bucket(hash, now);
        self.flag(f, now);
    }

    /// Flows flagged (episodes of policing begun), for status.
    pub fn flag_episodes(&self) -> u64 {
        self.flag_episodes
    }

    fn flag(&mut self, f: usize, now: Nanos) {
        if self.flows[f].police.flag(now) {
            self.flag_episodes += 1;
        }
        self.policing_until = self
            .policing_until
            .max(self.flows[f].police.flagged_until());
    }

    /// Queue `pkt` of flow `hash`, making room in the fattest flow when
    /// the class is full; dropped buffers go back to `pool`.
    pub fn push(&mut self, hash: u64, at: Nanos, pkt: &[u8], pool: &mut Vec<Vec<u8>>) -> Pushed {
        let f = self.bucket(hash, at);
        let mut dropped = 0;
        if self.over(pkt.len()) {
            let Some(fat) = self.fattest() else {
                return Pushed::Refused { dropped: 0 };
            };
            if self.share.heavy(fat) {
                self.flag(fat, at);
            }
            if fat == f {
                return Pushed::Refused { dropped: 0 };
            }
            // A batch from the fattest flow (RFC 8290 §4.1); then, while a
            // large packet still does not fit, one at a time from the
            // fattest flow of the moment.
            while dropped < DROP_BATCH_PACKETS && self.drop_head(fat, pool) {
                dropped += 1;
            }
            while self.over(pkt.len()) {
                match self.fattest() {
                    Some(g) if g != f && self.drop_head(g, pool) => dropped += 1,
                    _ => return Pushed::Refused { dropped },
                }
            }
        }
        let mut buf = pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(pkt);
        let flow = &mut self.flows[f];
        if !flow.listed {
            flow.listed = true;
            flow.deficit = self.quantum;
            self.new.push_back(f);
        }
        flow.bytes += pkt.len();
        flow.q.push_back(Item {
            at,
            buf,
            marked: false,
        });
        self.packets += 1;
        self.bytes += pkt.len();
        Pushed::Queued { dropped }
    }

    /// Drop the head of flow `f` to make room; whether it had one.
    fn drop_head(&mut self, f: usize, pool: &mut Vec<Vec<u8>>) -> bool {
        let Some(item) = self.flows[f].q.pop_front() else {
            return false;
        };
        self.take(f, item.buf.len());
        super::give_back(pool, item.buf);
        true
    }

    fn take(&mut self, f: usize, len: usize) {
        self.flows[f].bytes -= len;
        self.packets -= 1;
        self.bytes -= len;
    }

    /// The flow DRR serves next (RFC 8290 §4.2): the first new flow, else
    /// the first old one, with deficit left; a flow out of deficit gets a
    /// quantum more and goes to the end of the old list; an empty new flow
    /// moves to the old list, an empty old flow leaves. A later
    /// [`Self::pop`] serves exactly the flow found.
    fn select(&mut self) -> Option<usize> {
        loop {
            let (f, from_new) = match self.new.front() {
                Some(f) => (*f, true),
                None => (*self.old.front()?, false),
            };
            let flow = &mut self.flows[f];
            if flow.deficit <= 0 {
                flow.deficit += self.quantum;
                self.unlist_front(from_new);
                self.old.push_back(f);
                continue;
            }
            if flow.q.is_empty() {
                self.unlist_front(from_new);
                if from_new {
                    self.old.push_back(f);
                } else {
                    let flow = &mut self.flows[f];
                    flow.listed = false;
                    flow.deficit = 0;
                }
                continue;
            }
            return Some(f);
        }
    }

    fn unlist_front(&mut self, from_new: bool) {
        if from_new {
            self.new.pop_front();
        } else {
            self.old.pop_front();
        }
    }

    /// Length of the packet DRR serves next.
    pub fn peek_len(&mut self) -> Option<usize> {
        let f = self.select()?;
        self.flows[f].q.front().map(|i| i.buf.len())
    }

    /// Serve the next packet by DRR. Packets that entered before
    /// `serve.expired_before`, and those CoDel drops, are dropped on the
    /// way and handed to `dropped` (`true`: CoDel's; their buffers go to
    /// `pool`); an ECN-capable packet CoDel would drop, or that waited
    /// `serve.mark_sojourn_ns`, is marked CE and served (`marked`).
    /// A drop does not use the flow's deficit (as in RFC 8290), so a flow
    /// losing packets is not served less for it.
    pub fn pop(
        &mut self,
        serve: Serve,
        pool: &mut Vec<Vec<u8>>,
        mut dropped: impl FnMut(&Item, bool),
    ) -> Option<Item> {
        let now = serve.now;
        loop {
            let f = self.select()?;
            let mut item = self.flows[f].q.pop_front()?;
            let len = item.buf.len();
            self.take(f, len);
            let flow = &mut self.flows[f];
            let sojourn = now.saturating_sub(item.at);
            let expired = item.at < serve.expired_before;
            let aqm = !expired
                && self.aqm
                && flow
                    .codel
                    .should_drop(now, sojourn, flow.bytes, serve.mtu, serve.codel);
            // An ECN-capable packet is marked instead (it still counts
            // in CoDel's drop count: a flow that ignores the marks is
            // flagged as one that ignores drops).
            let early = !expired && self.aqm && sojourn >= serve.mark_sojourn_ns;
            item.marked = (aqm || early) && ecn::mark_ce(&mut item.buf);
            let drop = expired || (aqm && !item.marked);
            if !drop {
                flow.deficit -= len as i64;
            }
            let unresponsive = aqm && flow.codel.count() >= UNRESPONSIVE_DROPS;
            if unresponsive && self.share.heavy(f) {
                self.flag(f, now);
            }
            if drop {
                dropped(&item, aqm);
                super::give_back(pool, item.buf);
                continue;
            }
            return Some(item);
        }
    }

    /// When the oldest head of any flow entered.
    pub fn oldest(&self) -> Option<Nanos> {
        self.listed()
            .filter_map(|f| self.flows[f].q.front().map(|i| i.at))
            .min()
    }
}

#[cfg(test)]
#[path = "drr_tests.rs"]
mod tests;
