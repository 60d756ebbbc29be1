//! QoS by early demultiplexing (the ED-SGSN design, Lefebvre's thesis):
//! every inner packet is classified before it is queued anywhere, policed
//! at the input, and queued per class and per flow.
//!
//! * [`classify`] — class by DSCP, protocol, ports and addresses; flow by
//!   a keyed 5-tuple hash;
//! * [`meter`] — token buckets (maximum rate at the input, guaranteed
//!   rate at the output) and delay histograms;
//! * [`drr`] — a class's per-flow queues, Deficit Round Robin between them
//!   and CoDel (RFC 8289) in each, as FQ-CoDel (RFC 8290), which marks
//!   ECN-capable packets CE instead of dropping them ([`ecn`], RFC 3168);
//! * [`Qos`] — the stage: strict priority between classes by configured
//!   precedence, except that a class under its guaranteed rate is served
//!   first;
//! * [`mark`] — the outer header's DSCP per class (RFC 2983's uniform or
//!   pipe model), so that the networks a path crosses (a Wi-Fi access
//!   point's WMM queues, RFC 8325) can put real-time datagrams first too.
//!
//! Real-time classes do not wait here: the tunnel sends their packets on
//! the path with the lowest expected delay at once, or puts them at the
//! head of that path's queue (see `tunnel/qos.rs`).
//!
//! Invariants:
//! * a packet is dropped, if at all, at the input (maximum rate, class
//!   full) or when it leaves the stage (AQM, waited beyond its class's
//!   bound); each drop is counted by class and reason;
//! * exactly one class is the default (it matches everything), and class
//!   indices fit the wire's class byte ([`MAX_CLASSES`]);
//! * the stage never reorders packets of one flow.

pub mod classify;
pub mod codel;
pub mod drr;
pub mod ecn;
pub mod mark;
pub mod meter;
pub mod share;

use serde::{Deserialize, Serialize};

use self::classify::{flow_hash, inspect, ClassMatch};
use self::drr::{ClassQueue, Item, Pushed, Serve};
pub use self::mark::OuterDscp;
use self::meter::{DelayHistogram, DelayPercentiles, RateBucket};
use crate::Nanos;

/// Flow buckets per class (tuning knob; FQ-CoDel's default is 1024, a
/// tunnel carries fewer concurrent flows per class): [`drr`]'s flow table
/// and [`share`]'s per-flow counts.
pub const FLOW_BUCKETS: usize = 256;

/// Most classes (the class byte's low bits carry the index; tuning bound).
pub const MAX_CLASSES: usize = 16;

/// Packets one class holds at most (tuning knob: a memory bound; the time
/// bound and CoDel normally act far earlier).
pub const CLASS_LIMIT_PACKETS: usize = 4096;

/// Bytes one class holds at most (tuning knob: a memory bound; 27 ms of
/// 10 Gbit/s, where 4096 packets of the tunnel MTU would be 47 MB; the
/// time bound and CoDel act far earlier).
pub const CLASS_LIMIT_BYTES: usize = 32 << 20;

/// Spare packet buffers the stage keeps (tuning knob: a burst at a high
/// rate; beyond it, buffers are allocated and freed after).
pub const POOL_BUFFERS: usize = 256;

/// Keep `buf` for the next packet if the pool has room.
fn give_back(pool: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    if pool.len() < POOL_BUFFERS {
        pool.push(buf);
    }
}

/// An ECN-capable packet that waited this fraction of its class's bound
/// is marked CE whatever CoDel's state (tuning knob, [`drr`]'s early
/// mark): 25 ms of the default 100. A TCP in slow start roughly doubles
/// the queue each round trip, so the mark must come before half the
/// bound, less a round trip, for its answer to arrive before the bound.
pub const EARLY_MARK_DIVISOR: u64 = 4;

/// DSCP code points treated as real-time by default: EF (RFC 3246) and
/// VOICE-ADMIT (RFC 5865).
pub const DEFAULT_REALTIME_DSCP: [u8; 2] = [46, 44];

/// Default ceiling of the default real-time class, bits per second: a
/// marked flood cannot starve the rest (tuning knob: ~100 G.711 calls).
pub const DEFAULT_REALTIME_MAX_BPS: u64 = 10_000_000;

/// One configured class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassConfig {
    pub name: String,
    /// Precedence: 0 is served first.
    pub priority: u8,
    /// Sent at once on the lowest-delay path, delivered on arrival.
    pub realtime: bool,
    /// Real-time packets go on the two best paths.
    pub redundant: bool,
    pub matcher: ClassMatch,
    /// Input policer: excess is dropped before it is queued.
    pub max_bps: Option<u64>,
    /// Served ahead of higher precedence while under this rate.
    pub min_bps: Option<u64>,
    /// Longest wait in the stage (`None`: the tunnel's `queue_ms`).
    pub queue_ns: Option<Nanos>,
    /// CoDel on the class's flows.
    pub aqm: bool,
    /// The outer header's DSCP for the class's datagrams ([`mark`]).
    pub outer_dscp: OuterDscp,
}

impl ClassConfig {
    /// A best-effort catch-all class with CoDel.
    pub fn best_effort(name: &str, priority: u8) -> Self {
        Self {
            name: name.into(),
            priority,
            realtime: false,
            redundant: false,
            matcher: ClassMatch::default(),
            max_bps: None,
            min_bps: None,
            queue_ns: None,
            aqm: true,
            outer_dscp: OuterDscp::Zero,
        }
    }
}

/// The classes of a tunnel, in matching order.
#[derive(Debug, Clone, PartialEq)]
pub struct QosConfig {
    pub classes: Vec<ClassConfig>,
}

impl QosConfig {
    /// What works with no configuration: EF and VOICE-ADMIT are real-time
    /// (up to [`DEFAULT_REALTIME_MAX_BPS`]), the rest best effort.
    pub fn standard() -> Self {
        let realtime = ClassConfig {
            name: "realtime".into(),
            priority: 0,
            realtime: true,
            redundant: false,
            matcher: ClassMatch {
                dscp: DEFAULT_REALTIME_DSCP.to_vec(),
                ..ClassMatch::default()
            },
            max_bps: Some(DEFAULT_REALTIME_MAX_BPS),
            min_bps: None,
            queue_ns: None,
            aqm: false,
            outer_dscp: OuterDscp::Inner,
        };
        Self {
            classes: vec![realtime, ClassConfig::best_effort("besteffort", 1)],
        }
    }

    /// The classes with a default: a catch-all `besteffort` (lowest
    /// precedence) is added if none is configured; at most [`MAX_CLASSES`].
    pub fn normalized(mut self) -> Self {
        self.classes.truncate(MAX_CLASSES - 1);
        if !self.classes.iter().any(|c| c.matcher.is_catch_all()) {
            let lowest = self.classes.iter().map(|c| c.priority).max().unwrap_or(0);
            let p = lowest.saturating_add(1);
            self.classes.push(ClassConfig::best_effort("besteffort", p));
        }
        self
    }
}

/// What [`Qos::enqueue`] did: whether the packet was queued, and how many
/// packets of the fattest flow of a full class (the packet itself or
/// others) were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    pub queued: bool,
    pub dropped_full: usize,
}

/// Counters of one class (`mpt status`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClassCounters {
    /// Packets and bytes sent (redundant copies not counted twice).
    pub packets: u64,
    pub bytes: u64,
    /// Over the class's maximum rate, dropped at the input.
    pub dropped_rate: u64,
    /// Class full: dropped from its fattest flow.
    pub dropped_full: u64,
    /// A flow that does not answer drops, beyond its fair share: dropped
    /// at the input.
    pub dropped_share: u64,
    /// Dropped by CoDel.
    pub dropped_aqm: u64,
    /// Marked CE by CoDel instead of dropped (ECN-capable packets).
    pub marked_aqm: u64,
    /// Waited beyond the class's bound, or for a path too long.
    pub dropped_expired: u64,
}

/// One class in `mpt status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ClassStatus {
    pub name: String,
    pub priority: u8,
    pub realtime: bool,
    pub redundant: bool,
    /// The outer header's DSCP: "inner" (copied), or a number.
    pub outer_dscp: String,
    pub queued_packets: usize,
    pub queued_bytes: usize,
    /// The class's bound in bytes ([`CLASS_LIMIT_BYTES`]).
    pub queued_bytes_max: usize,
    pub flows_now: usize,
    /// Flows sharing the class in the last measured window, and the fair
    /// share a flow that does not answer drops is held to (Mbit/s of
    /// inner packets; none: nothing to police against), [`share`].
    pub sharing_flows: u32,
    pub fair_share_mbps: Option<f64>,
    /// Flows held to their fair share so far (episodes of policing: a
    /// flood is one; a TCP flow among them is a sign of trouble).
    pub policed_flows: u64,
    /// Time in mpt (stage and path queue) of sent packets.
    pub delay: DelayPercentiles,
    #[serde(flatten)]
    pub counters: ClassCounters,
}

struct Class {
    cfg: ClassConfig,
    /// The class matches everything (the default).
    catch_all: bool,
    queue: ClassQueue,
    max: Option<RateBucket>,
    min: Option<RateBucket>,
    counters: ClassCounters,
    delay: DelayHistogram,
}

/// Why [`Qos`] dropped packets (the tunnel counts them by reason too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosDrop {
    Rate,
    Full,
    Aqm,
    Expired,
}

/// The QoS stage. See the module documentation.
pub struct Qos {
    classes: Vec<Class>,
    /// Class indices by precedence (stable for equal priorities).
    order: Vec<usize>,
    /// The class that matches everything.
    default: usize,
    key: u64,
    mtu: usize,
    /// The default bound on a packet's wait in the stage.
    queue_ns: Nanos,
    pool: Vec<Vec<u8>>,
    /// The class [`Qos::next_len`] chose, for [`Qos::pop`].
    next: Option<usize>,
    /// CoDel's parameters for the inner flows' round trip.
    codel: codel::Params,
}

impl Qos {
    /// `key` seeds the flow hash; `mtu` is CoDel's one-packet allowance.
    pub fn new(cfg: QosConfig, key: u64, mtu: usize, queue_ns: Nanos) -> Self {
        let cfg = cfg.normalized();
        let classes: Vec<Class> = cfg
            .classes
            .into_iter()
            .map(|c| Class {
                catch_all: c.matcher.is_catch_all(),
                queue: ClassQueue::new(CLASS_LIMIT_PACKETS, mtu.max(1500), c.aqm)
                    .with_limit_bytes(CLASS_LIMIT_BYTES),
                max: c.max_bps.map(RateBucket::new),
                min: c.min_bps.map(RateBucket::new),
                counters: ClassCounters::default(),
                delay: DelayHistogram::default(),
                cfg: c,
            })
            .collect();
        let default = classes.iter().position(|c| c.catch_all).unwrap_or(0);
        let mut order: Vec<usize> = (0..classes.len()).collect();
        order.sort_by_key(|i| classes[*i].cfg.priority);
        Self {
            classes,
            order,
            default,
            key,
            mtu,
            queue_ns,
            pool: Vec::new(),
            next: None,
            codel: codel::Params::default(),
        }
    }

    /// The outer TOS byte for inner packet `pkt` of class `class` (its
    /// index, as the class byte's low bits carry it; 0 if unknown).
    pub fn outer_tos(&self, class: usize, pkt: &[u8]) -> u8 {
        self.classes
            .get(class)
            .map_or(0, |c| c.cfg.outer_dscp.tos(pkt))
    }

    /// The round trip the inner flows see (the slowest usable path's):
    /// CoDel's interval and target follow it ([`codel::Params::for_rtt`]).
    pub fn set_rtt(&mut self, rtt_ns: Nanos) {
        self.codel = codel::Params::for_rtt(rtt_ns);
    }

    /// What the tunnel's paths can carry, inner bytes per second: each
    /// ordered class shares it out among its flows when it polices one
    /// ([`share`]; the real-time classes' few packets are not subtracted).
    pub fn set_capacity(&mut self, bps: Option<u64>) {
        for c in &mut self.classes {
            c.queue.set_capacity(bps);
        }
    }

    /// Change the default bound on a packet's wait.
    pub fn set_queue_bound(&mut self, queue_ns: Nanos) {
        self.queue_ns = queue_ns;
    }

    /// Take every waiting packet out, class by class, as (entry time,
    /// packet); the stage is empty after.
    pub fn take_all(&mut self) -> Vec<(Nanos, Vec<u8>)> {
        let mut out = vec![];
        for k in 0..self.classes.len() {
            let c = &mut self.classes[k];
            while !c.queue.is_empty() {
                match c
                    .queue
                    .pop(Serve::at(0, self.mtu), &mut self.pool, |_, _| {})
                {
                    Some(i) => out.push((i.at, i.buf)),
                    None => break,
                }
            }
        }
        out
    }

    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Class index of an inner packet (the default class for what is not
    /// IP, which the tunnel drops before).
    pub fn classify(&self, pkt: &[u8]) -> usize {
        let Some(p) = inspect(pkt) else {
            return self.default;
        };
        self.classes
            .iter()
            .position(|c| !c.catch_all && c.cfg.matcher.matches(&p))
            .unwrap_or(self.default)
    }

    /// The flow of an inner packet: a keyed hash of its 5-tuple.
    pub fn flow(&self, pkt: &[u8]) -> u64 {
        inspect(pkt).map_or(0, |p| flow_hash(&p, self.key))
    }

    pub fn is_realtime(&self, class: usize) -> bool {
        self.classes.get(class).is_some_and(|c| c.cfg.realtime)
    }

    pub fn is_redundant(&self, class: usize) -> bool {
        self.classes.get(class).is_some_and(|c| c.cfg.redundant)
    }

    /// The input policer: whether `len` bytes of `class` fit its maximum
    /// rate now (taken if so; counted as a drop if not).
    pub fn police(&mut self, class: usize, now: Nanos, len: usize) -> bool {
        let Some(c) = self.classes.get_mut(class) else {
            return false;
        };
        let ok = c.max.as_mut().is_none_or(|b| b.take(now, len));
        if !ok {
            c.counters.dropped_rate += 1;
        }
        ok
    }

    /// Whether ordered `class` polices a flow now (every packet entering
    /// it must then go through [`Self::admit`]).
    pub fn policing(&self, class: usize, now: Nanos) -> bool {
        self.classes
            .get(class)
            .is_some_and(|c| c.queue.policing(now))
    }

    /// The fair-share policer of flow `hash` of ordered `class`
    /// ([`share`]): whether its packet of `len` bytes may enter now
    /// (counted as a drop if not).
    pub fn admit(&mut self, class: usize, hash: u64, now: Nanos, len: usize) -> bool {
        let Some(c) = self.classes.get_mut(class) else {
            return false;
        };
        let ok = c.queue.admit(hash, now, len);
        if !ok {
            c.counters.dropped_share += 1;
        }
        ok
    }

    /// Queue a packet; returns whether it was queued and how many packets
    /// (of the fattest flow, or this one) were dropped to stay in bounds.
    pub fn enqueue(&mut self, class: usize, hash: u64, now: Nanos, pkt: &[u8]) -> Enqueued {
        let Some(c) = self.classes.get_mut(class) else {
            return Enqueued {
                queued: false,
                dropped_full: 1,
            };
        };
        match c.queue.push(hash, now, pkt, &mut self.pool) {
            Pushed::Queued { dropped } => {
                c.counters.dropped_full += dropped as u64;
                Enqueued {
                    queued: true,
                    dropped_full: dropped,
                }
            }
            Pushed::Refused { dropped } => {
                c.counters.dropped_full += dropped as u64 + 1;
                Enqueued {
                    queued: false,
                    dropped_full: dropped + 1,
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.classes.iter().all(|c| c.queue.is_empty())
    }

    pub fn packets(&self) -> usize {
        self.classes.iter().map(|c| c.queue.packets()).sum()
    }

    /// When the oldest waiting packet entered.
    pub fn oldest(&self) -> Option<Nanos> {
        self.classes.iter().filter_map(|c| c.queue.oldest()).min()
    }

    /// The class served next and the length of its next packet: a class
    /// under its guaranteed rate first, then by precedence.
    pub fn next_len(&mut self, now: Nanos) -> Option<(usize, usize)> {
        let guaranteed = self.order.iter().copied().find(|i| {
            let c = &mut self.classes[*i];
            !c.queue.is_empty() && c.min.as_mut().is_some_and(|b| b.fits(now, 1))
        });
        let class = guaranteed.or_else(|| {
            self.order
                .iter()
                .copied()
                .find(|i| !self.classes[*i].queue.is_empty())
        })?;
        self.next = Some(class);
        let len = self.classes[class].queue.peek_len()?;
        Some((class, len))
    }

    /// Serve the class [`Qos::next_len`] chose. Packets dropped on the way
    /// (CoDel, waited too long) are counted and reported to `dropped`.
    pub fn pop(&mut self, now: Nanos, mut dropped: impl FnMut(QosDrop)) -> Option<(usize, Item)> {
        let class = self.next.take()?;
        let bound = self.classes[class].cfg.queue_ns.unwrap_or(self.queue_ns);
        let c = &mut self.classes[class];
        let counters = &mut c.counters;
        let serve = Serve {
            now,
            expired_before: now.saturating_sub(bound),
            mark_sojourn_ns: (bound / EARLY_MARK_DIVISOR).max(self.codel.target_ns),
            mtu: self.mtu,
            codel: self.codel,
        };
        let item = c.queue.pop(serve, &mut self.pool, |_, aqm| {
            if aqm {
                counters.dropped_aqm += 1;
                dropped(QosDrop::Aqm);
            } else {
                counters.dropped_expired += 1;
                dropped(QosDrop::Expired);
            }
        });
        if item.as_ref().is_some_and(|i| i.marked) {
            counters.marked_aqm += 1;
        }
        item.map(|i| (class, i))
    }

    /// Drop everything waiting (no path for longer than the bound);
    /// returns how many packets.
    pub fn clear(&mut self, now: Nanos) -> usize {
        let mut n = 0;
        for k in 0..self.classes.len() {
            while !self.classes[k].queue.is_empty() {
                self.next = Some(k);
                let mut drop = 0;
                if let Some((_, i)) = self.pop(now, |_| drop += 1) {
                    self.classes[k].counters.dropped_expired += 1;
                    give_back(&mut self.pool, i.buf);
                    n += 1;
                }
                n += drop;
            }
        }
        n
    }

    /// Give a served packet's buffer back.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        give_back(&mut self.pool, buf);
    }

    /// A packet of `class` left mpt after `wait_ns` in it.
    pub fn sent(&mut self, class: usize, now: Nanos, wait_ns: Nanos, len: usize) {
        if let Some(c) = self.classes.get_mut(class) {
            c.counters.packets += 1;
            c.counters.bytes += len as u64;
            c.delay.record(wait_ns);
            if let Some(b) = c.min.as_mut() {
                b.charge(now, len);
            }
        }
    }

    /// Per-class status; `rt_queued` counts real-time packets waiting in
    /// the path queues, by class.
    pub fn status(&self, rt_queued: &[usize]) -> Vec<ClassStatus> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| ClassStatus {
                name: c.cfg.name.clone(),
                priority: c.cfg.priority,
                realtime: c.cfg.realtime,
                redundant: c.cfg.redundant,
                outer_dscp: c.cfg.outer_dscp.describe(),
                queued_packets: c.queue.packets() + rt_queued.get(i).copied().unwrap_or(0),
                queued_bytes: c.queue.bytes(),
                queued_bytes_max: CLASS_LIMIT_BYTES,
                flows_now: c.queue.active_flows(),
                sharing_flows: c.queue.share().flows(),
                policed_flows: c.queue.flag_episodes(),
                fair_share_mbps: c
                    .queue
                    .share()
                    .allowance_bps()
                    .map(|b| b as f64 * 8.0 / 1e6),
                delay: c.delay.percentiles(),
                counters: c.counters.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod closed_loop_tests;
#[cfg(test)]
mod tests;
