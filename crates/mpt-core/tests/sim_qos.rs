//! QoS in virtual time: two tunnels over simulated paths whose capacity is
//! the tunnel's own pacing cap (`rate_cap_bps`), so that mpt's queue is the
//! bottleneck, as on a real link it is made to be. Flows of UDP-like inner
//! packets with their own ports and DSCP, at fixed rates above or below
//! their share; every figure is compared with QoS off in the same test.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::*;
use mpt_core::qos::classify::ClassMatch;
use mpt_core::qos::{ClassConfig, OuterDscp, QosConfig};
use mpt_core::tunnel::Tunnel;
use mpt_core::wire::HEADER_LEN;
use mpt_core::Nanos;

const STEP: Nanos = MS / 10;
const EF: u8 = 46 << 2;

/// A constant-rate flow from side 0: `size`-byte packets every `gap`.
#[derive(Clone)]
struct Flow {
    sport: u16,
    tos: u8,
    size: usize,
    gap: Nanos,
    next: Nanos,
    sent: u64,
}

fn flow(sport: u16, tos: u8, size: usize, mbit: f64) -> Flow {
    Flow {
        sport,
        tos,
        size,
        gap: (size as f64 * 8.0 / mbit * 1000.0) as Nanos,
        next: 0,
        sent: 0,
    }
}

/// An IPv4/UDP packet of `f` whose index (bytes 20..28, what the shared
/// simulation reads) is the source port and the flow's packet count.
fn packet(f: &Flow) -> (u64, Vec<u8>) {
    let idx = (u64::from(f.sport) << 48) | (9999 << 32) | f.sent;
    let mut p = vec![0u8; f.size];
    p[0] = 0x45;
    p[1] = f.tos;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 9, 0, 1]);
    p[16..20].copy_from_slice(&[10, 9, 0, 2]);
    p[20..28].copy_from_slice(&idx.to_be_bytes());
    (idx, p)
}

fn pair(caps_mbit: &[u64], qos: Option<QosConfig>) -> [Tunnel; 2] {
    let side = |s: u8| {
        let mut c = TestConfig::new(s, caps_mbit.len()).ecf().with(|c| {
            for (p, cap) in c.paths.iter_mut().zip(caps_mbit) {
                p.rate_cap_bps = Some(cap * 1_000_000);
            }
        });
        if let Some(q) = qos.clone() {
            c = c.qos(q);
        }
        c.tunnel()
    };
    [side(0), side(1)]
}

/// What arrived: per source port, (packets, one-way delays in ns).
#[derive(Default)]
struct Outcome {
    got: HashMap<u16, Vec<Nanos>>,
}

impl Outcome {
    fn packets(&self, port: u16) -> usize {
        self.got.get(&port).map_or(0, Vec::len)
    }
    fn mean_delay_ms(&self, port: u16) -> f64 {
        let d = &self.got[&port];
        d.iter().sum::<Nanos>() as f64 / d.len() as f64 / MS as f64
    }
}

/// Run `flows` from `from` to `until`, counting arrivals after `measure_from`
/// (and what each flow sent from then on, in `Flow::sent`).
struct Run {
    sim: Sim,
    flows: Vec<Flow>,
    sent_at: HashMap<u64, Nanos>,
    seen: usize,
    out: Outcome,
    sent_measured: HashMap<u16, u64>,
    /// Outer TOS bytes of the datagrams each flow sent at once (those that
    /// waited are in `Sim::queued_tos`).
    outer_tos: HashMap<u16, BTreeSet<u8>>,
}

impl Run {
    fn new(links: Vec<Link>, t: [Tunnel; 2], flows: Vec<Flow>) -> Self {
        Self {
            sim: Sim::with_tunnels(links, t, 7),
            flows,
            sent_at: HashMap::new(),
            seen: 0,
            out: Outcome::default(),
            sent_measured: HashMap::new(),
            outer_tos: HashMap::new(),
        }
    }

    fn until(&mut self, start: Nanos, end: Nanos, measure_from: Nanos) {
        let mut now = start;
        while now < end {
            for k in 0..self.flows.len() {
                while self.flows[k].next <= now {
                    let (idx, pkt) = packet(&self.flows[k]);
                    let f = &mut self.flows[k];
                    f.sent += 1;
                    f.next += f.gap;
                    if now >= measure_from {
                        *self.sent_measured.entry(f.sport).or_default() += 1;
                        self.sent_at.insert(idx, now);
                    }
                    let mut buf = vec![0u8; HEADER_LEN + pkt.len() + 16];
                    buf[HEADER_LEN..HEADER_LEN + pkt.len()].copy_from_slice(&pkt);
                    if let Some(tx) = self.sim.t[0].send(now, &mut buf, pkt.len()) {
                        self.outer_tos.entry(f.sport).or_default().insert(tx.tos);
                        buf.truncate(tx.len);
                        self.sim.emit(now, 0, tx.path as usize, buf, Some(idx));
                    }
                }
            }
            self.sim.pump_control(now);
            self.sim.deliver_until(now);
            for idx in &self.sim.delivered[1][self.seen..] {
                if let Some(at) = self.sent_at.get(idx) {
                    let port = (idx >> 48) as u16;
                    self.out.got.entry(port).or_default().push(now - at);
                }
            }
            self.seen = self.sim.delivered[1].len();
            now += STEP;
        }
    }

    /// Let what is in flight arrive (nothing more is sent).
    fn drain(&mut self, start: Nanos, end: Nanos) {
        let flows = std::mem::take(&mut self.flows);
        self.until(start, end, end);
        self.flows = flows;
    }

    fn share(&self, port: u16) -> f64 {
        self.out.packets(port) as f64 / self.sent_measured[&port] as f64
    }
}

/// Wi-Fi-like 5 ms and LTE-like 20 ms paths of 10 Mbit/s each; bulk at
/// 30 Mbit/s and a G.711-like VoIP stream (EF) for three seconds.
fn voip_next_to_bulk(qos: Option<QosConfig>) -> Run {
    let bulk = flow(5001, 0, 1400, 30.0);
    let mut voip = flow(7100, EF, 200, 0.08);
    voip.next = 3 * MS;
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (20, 0, 0.0)]),
        pair(&[10, 10], qos),
        vec![bulk, voip],
    );
    r.until(0, 4_000 * MS, 1_000 * MS);
    r.drain(4_000 * MS, 4_500 * MS);
    r
}

#[test]
fn voip_keeps_its_delay_next_to_bulk_with_qos_and_waits_behind_it_without() {
    let on = voip_next_to_bulk(Some(QosConfig::standard()));
    let off = voip_next_to_bulk(None);
    let (d_on, d_off) = (on.out.mean_delay_ms(7100), off.out.mean_delay_ms(7100));
    println!("VoIP one-way delay next to bulk: QoS on {d_on:.2} ms, off {d_off:.2} ms");
    assert!(
        d_on < 7.0,
        "real-time class on the 5 ms path without waiting: {d_on}"
    );
    assert!(
        d_off > 30.0,
        "without QoS VoIP waits in the bulk queue: {d_off}"
    );
    assert_eq!(on.share(7100), 1.0, "no VoIP packet lost");
    // Bulk keeps the tunnel full either way.
    let (b_on, b_off) = (on.out.packets(5001), off.out.packets(5001));
    println!("bulk packets delivered: on {b_on}, off {b_off}");
    assert!(b_on as f64 > 0.97 * b_off as f64, "{b_on} vs {b_off}");
    // The status shows the classes.
    let st = on.sim.t[0].status(4_000 * MS);
    let classes = st.qos.expect("QoS status");
    assert_eq!(classes[0].name, "realtime");
    assert!(classes[0].counters.packets >= 150);
    assert!(classes[1].counters.dropped_full + classes[1].counters.dropped_aqm > 0);
}

#[test]
fn real_time_datagrams_carry_the_inner_dscp_outside_unless_configured_not_to() {
    let tos = |qos: QosConfig| {
        let mut r = voip_next_to_bulk(Some(qos));
        for (idx, tos) in &r.sim.queued_tos {
            let port = (idx >> 48) as u16;
            r.outer_tos.entry(port).or_default().insert(*tos);
        }
        r.outer_tos.remove(&7100).zip(r.outer_tos.remove(&5001))
    };
    let (voip, bulk) = tos(QosConfig::standard()).expect("both flows sent");
    assert_eq!(voip, BTreeSet::from([EF]), "uniform model (RFC 2983)");
    assert_eq!(bulk, BTreeSet::from([0]), "best effort: pipe model");
    let mut cfg = QosConfig::standard();
    cfg.classes[0].outer_dscp = OuterDscp::Zero;
    cfg.classes[1].outer_dscp = OuterDscp::Fixed(10);
    let (voip, bulk) = tos(cfg).expect("both flows sent");
    assert_eq!(voip, BTreeSet::from([0]));
    assert_eq!(bulk, BTreeSet::from([10 << 2]), "AF11 on every datagram");
}

/// Three flows at 4 Mbit/s and one at 25 through 20 Mbit/s: the fair
/// share is 5 Mbit/s each.
fn flood(qos: Option<QosConfig>) -> Run {
    let flows = vec![
        flow(6001, 0, 1200, 4.0),
        flow(6002, 0, 1200, 4.0),
        flow(6003, 0, 1200, 4.0),
        flow(6666, 0, 1400, 25.0),
    ];
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (5, 0, 0.0)]),
        pair(&[10, 10], qos),
        flows,
    );
    r.until(0, 4_000 * MS, 1_000 * MS);
    r.drain(4_000 * MS, 4_500 * MS);
    r
}

#[test]
fn a_flood_takes_only_what_the_well_behaved_flows_leave() {
    let on = flood(Some(QosConfig::standard()));
    let off = flood(None);
    for port in [6001, 6002, 6003] {
        println!(
            "flow {port}: delivered {:.3} of its sending with QoS, {:.3} without",
            on.share(port),
            off.share(port)
        );
        assert!(on.share(port) >= 0.95, "{port}: {}", on.share(port));
        assert!(off.share(port) < 0.8, "{port}: {}", off.share(port));
    }
    let d = on.sim.t[0].drops();
    assert!(d.get(DropReason::ClassFull) + d.get(DropReason::Aqm) > 0);
}

fn class(name: &str, priority: u8, ports: (u16, u16)) -> ClassConfig {
    ClassConfig {
        matcher: ClassMatch {
            ports: vec![ports],
            ..ClassMatch::default()
        },
        ..ClassConfig::best_effort(name, priority)
    }
}

#[test]
fn a_high_precedence_class_loses_nothing_at_overload() {
    // 12 Mbit/s of high precedence and 13 of best effort into 20: 1.25x.
    let qos = QosConfig {
        classes: vec![
            class("high", 0, (8000, 8000)),
            ClassConfig::best_effort("rest", 1),
        ],
    };
    let flows = vec![flow(8000, 0, 1200, 12.0), flow(5001, 0, 1400, 13.0)];
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (15, 0, 0.0)]),
        pair(&[10, 10], Some(qos)),
        flows,
    );
    r.until(0, 4_000 * MS, 1_000 * MS);
    r.drain(4_000 * MS, 4_500 * MS);
    println!(
        "high: {:.4} delivered; rest {:.3}",
        r.share(8000),
        r.share(5001)
    );
    assert_eq!(r.share(8000), 1.0);
    assert!(r.share(5001) > 0.4 && r.share(5001) < 0.8);
}

#[test]
fn a_guaranteed_rate_holds_under_higher_precedence() {
    // "high" would take everything; "low" is guaranteed 5 Mbit/s of 20.
    let mut low = class("low", 1, (5001, 5001));
    low.min_bps = Some(5_000_000);
    let qos = QosConfig {
        classes: vec![class("high", 0, (8000, 8000)), low],
    };
    let flows = vec![flow(8000, 0, 1400, 30.0), flow(5001, 0, 1400, 10.0)];
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (5, 0, 0.0)]),
        pair(&[10, 10], Some(qos)),
        flows,
    );
    r.until(0, 4_000 * MS, 1_000 * MS);
    r.drain(4_000 * MS, 4_500 * MS);
    let low_mbit = r.out.packets(5001) as f64 * 1400.0 * 8.0 / 3.0 / 1e6;
    let high_mbit = r.out.packets(8000) as f64 * 1400.0 * 8.0 / 3.0 / 1e6;
    println!("low class: {low_mbit:.2} Mbit/s, high {high_mbit:.2}");
    assert!((4.5..6.0).contains(&low_mbit), "{low_mbit}");
    assert!(high_mbit > 13.0, "{high_mbit}");
}

#[test]
fn a_redundant_call_loses_nothing_when_its_path_is_cut() {
    let mut qos = QosConfig::standard();
    qos.classes[0].redundant = true;
    let voip = flow(7100, EF, 200, 0.08);
    let bulk = flow(5001, 0, 1400, 8.0);
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (20, 0, 0.0)]),
        pair(&[10, 10], Some(qos)),
        vec![voip, bulk],
    );
    r.until(0, 1_500 * MS, 500 * MS);
    // The call's best path fails in the middle of the call.
    r.sim.links[0] = [Link {
        up: false,
        ..r.sim.links[0][0]
    }; 2];
    r.until(1_500 * MS, 3_000 * MS, 500 * MS);
    r.drain(3_000 * MS, 3_500 * MS);
    println!(
        "VoIP delivered {} of {}",
        r.out.packets(7100),
        r.sent_measured[&7100]
    );
    assert_eq!(r.share(7100), 1.0, "no VoIP packet lost");
    let dups = r
        .sim
        .drops_seen
        .iter()
        .filter(|(s, d)| *s == 1 && *d == DropReason::Duplicate)
        .count();
    assert!(
        dups > 40,
        "the second copies were dropped as duplicates: {dups}"
    );
}

#[test]
fn equal_flows_in_one_class_share_equally() {
    // Four flows at 10 Mbit/s into 20, with different packet sizes.
    let flows = vec![
        flow(6001, 0, 1400, 10.0),
        flow(6002, 0, 1000, 10.0),
        flow(6003, 0, 600, 10.0),
        flow(6004, 0, 1400, 10.0),
    ];
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (10, 0, 0.0)]),
        pair(&[10, 10], Some(QosConfig::standard())),
        flows,
    );
    r.until(0, 4_000 * MS, 1_000 * MS);
    r.drain(4_000 * MS, 4_500 * MS);
    let sizes = [
        (6001, 1400.0),
        (6002, 1000.0),
        (6003, 600.0),
        (6004, 1400.0),
    ];
    let rates: Vec<f64> = sizes
        .iter()
        .map(|(p, s)| r.out.packets(*p) as f64 * s * 8.0 / 3.0 / 1e6)
        .collect();
    let jain = rates.iter().sum::<f64>().powi(2) / (4.0 * rates.iter().map(|x| x * x).sum::<f64>());
    println!("rates {rates:.2?} Mbit/s, Jain's index {jain:.4}");
    assert!(jain >= 0.99, "{jain}");
    assert!(rates.iter().sum::<f64>() > 18.5);
}

/// How long each of `port`'s packets sent from `from_ns` on waited before
/// it left side 0's bottleneck on `link`: in mpt's queue, then in a FIFO
/// of `cap_mbit` fed with everything side 0 sent on that link.
fn waits_to_bottleneck(
    r: &Run,
    link: usize,
    cap_mbit: f64,
    port: u16,
    from_ns: Nanos,
) -> Vec<Nanos> {
    let mut busy_until: Nanos = 0;
    let mut waits = vec![];
    for &(at, from, l, len, idx) in &r.sim.departures {
        if from != 0 || l != link {
            continue;
        }
        let start = busy_until.max(at);
        let sent = idx
            .filter(|i| (i >> 48) as u16 == port && (i >> 32) & 0xffff == 9999)
            .and_then(|i| r.sent_at.get(&i));
        if let Some(&sent) = sent.filter(|s| **s >= from_ns) {
            waits.push(start - sent);
        }
        busy_until = start + (len as f64 * 8.0 * 1_000.0 / cap_mbit) as Nanos;
    }
    waits
}

#[test]
fn a_call_does_not_wait_behind_a_large_packets_train() {
    // Bulk in packets of eight datagrams (a tunnel MTU of several
    // datagrams, as by default) beside VoIP on the 5 ms path: the pieces
    // of a packet leave at the path's pacing rate, not as one train that
    // the bottleneck then holds in front of the next call packet (at 10
    // Mbit/s a train of eight datagrams takes 9 ms).
    let bulk = flow(5001, 0, 11_000, 30.0);
    let mut voip = flow(7100, EF, 200, 0.08);
    voip.next = 3 * MS;
    let side = |s: u8| {
        TestConfig::new(s, 2)
            .ecf()
            .qos(QosConfig::standard())
            .with(|c| {
                c.mtu = 12_000;
                c.datagram_body = Some(1_400);
                for p in &mut c.paths {
                    p.rate_cap_bps = Some(10_000_000);
                }
            })
            .tunnel()
    };
    let mut r = Run::new(
        links(&[(5, 0, 0.0), (20, 0, 0.0)]),
        [side(0), side(1)],
        vec![bulk, voip],
    );
    r.until(0, 3_000 * MS, 1_000 * MS);
    r.drain(3_000 * MS, 3_500 * MS);
    // The bottleneck faster than the pacing cap, as the rate control
    // keeps it while real-time packets flow.
    let waits = waits_to_bottleneck(&r, 0, 12.0, 7100, 1_000 * MS);
    assert!(
        waits.len() > 90,
        "the call used the 5 ms path: {}",
        waits.len()
    );
    let mean_ms = waits.iter().sum::<Nanos>() as f64 / waits.len() as f64 / MS as f64;
    let max_ms = *waits.iter().max().unwrap() as f64 / MS as f64;
    let datagram_ms = 1.5 * 8.0 / 10.0;
    println!(
        "VoIP before and at the bottleneck: mean wait {mean_ms:.2} ms, max {max_ms:.2} ms \
         (one datagram {datagram_ms:.2} ms)"
    );
    assert!(mean_ms < datagram_ms, "{mean_ms}");
    assert!(max_ms < 3.0 * datagram_ms, "{max_ms}");
    assert_eq!(r.share(7100), 1.0, "no VoIP packet lost");
    let bulk_mbit = r.out.packets(5001) as f64 * 11_000.0 * 8.0 / 2.0 / 1e6;
    println!("bulk {bulk_mbit:.1} Mbit/s of 20");
    assert!(bulk_mbit > 17.0, "{bulk_mbit}");
}
