//! Path-aware sending over trace-driven links in virtual time: each
//! link's bottleneck replays an LTE-like capacity trace (mahimahi's
//! format, `common/trace.rs`), as the lab's `two-lte` and `lte-trace`
//! scenarios have them. A radio link's capacity moves by a factor of
//! several within a second; what the sender's rate control leaves unused
//! is lost for good.
//!
//! What it checks: a TCP-like flow through the tunnel carries most of
//! what two such links offered; the trace model itself.

mod common;

use common::tcp::{offer_packet, tcp_flow};
use common::trace::TraceLink;
use common::*;
use mpt_core::Nanos;

const PKT: usize = 1400;

/// A trace link: (A-to-B trace, B-to-A trace, delay ms, queue ms, start s).
type TraceSpec<'a> = (&'a str, &'a str, u64, u64, u64);

/// A trace file of the lab's (`lab/traces/`).
fn lab_trace(name: &str) -> String {
    let p = format!("{}/../../lab/traces/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Links of (down trace, up trace, delay ms, queue ms, start s): the
/// share of what the down traces offered over the measured window that
/// a TCP-like flow from side 0 got in `secs`, and its goodput.
fn tcp_share(links: &[TraceSpec], secs: u64, seed: u64) -> (f64, f64) {
    let mut sim = trace_sim(links, seed);
    let mbit = tcp_flow(&mut sim, PKT, 10, secs);
    if std::env::var("SIM_REORDER").is_ok() {
        let st = sim.t[1].status((600 + secs * 1_000) * MS);
        let r = st.recovery.clone().unwrap_or_default();
        println!(
            "  lost {} late {} policy {} timeout {} margin {} | asked {} path {} recovered {} gave_up {} answer {} wait {} expired {}",
            st.reorder.stats.lost,
            st.reorder.stats.late_delivered,
            st.reorder.stats.policy_releases,
            st.reorder.stats.timeout_releases,
            st.reorder.late_margin_ms,
            r.gaps_requested,
            r.path_losses_requested,
            r.recovered,
            r.gave_up,
            r.answer_ms,
            r.answer_wait_ms,
            sim.t[0].status((600 + secs * 1_000) * MS).recovery.map_or(0, |r| r.resends_expired)
        );
    }
    // tcp_flow measures from 2.5 s to its end.
    let (from, to) = (2_500 * MS, (500 + secs * 1_000) * MS);
    let offered_mbit = offered(&sim, from, to) as f64 * 8.0 / ((to - from) as f64 / 1e9) / 1e6;
    (mbit / offered_mbit, mbit)
}

/// A tunnel pair (path-aware sending, recovery on, the daemon's default
/// reorder `max_delay_ms` of 100, or `SIM_MAX_DELAY_MS`) over trace links
/// of (down, up, delay ms, queue ms, start s). `SIM_REORDER=1` prints the
/// receiver's reorder and recovery counters after each TCP-like flow.
fn trace_sim(links: &[TraceSpec], seed: u64) -> Sim {
    let n = links.len();
    let sim_links: Vec<Link> = links
        .iter()
        .map(|l| Link {
            delay: l.2 * MS,
            jitter: 0,
            loss: 0.0,
            up: true,
            rate_mbit: 0.0,
            queue_ns: 0,
        })
        .collect();
    let max_delay_ms: u64 = std::env::var("SIM_MAX_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let cfg = |side| {
        TestConfig::new(side, n)
            .ecf()
            .recover(true)
            .reorder(4096, max_delay_ms * MS)
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(sim_links, [cfg(0), cfg(1)], seed);
    for (i, l) in links.iter().enumerate() {
        let start: Nanos = l.4 * 1_000 * MS;
        sim.set_trace(i, 0, TraceLink::new(l.0, start, l.3));
        sim.set_trace(i, 1, TraceLink::new(l.1, start, l.3));
    }
    sim
}

/// Open loop: side 0 offers `offer_mbit` over the trace links for
/// `secs`: the share of what the links offered after the first 2 s that
/// arrived, and the longest time (ns) a path that was up sent less
/// than a tenth of what its trace offered, when that was at least
/// 1 Mbit/s (in 100 ms steps).
fn open_loop(links: &[TraceSpec], offer_mbit: f64, secs: u64) -> (f64, Nanos) {
    let mut sim = trace_sim(links, 7);
    let gap = (PKT as f64 * 8_000.0 / offer_mbit) as Nanos;
    let (start, warm, end) = (500 * MS, 2_500 * MS, (500 + secs * 1_000) * MS);
    sim.deliver_until(start);
    let mut at_warm = 0;
    let (mut now, mut idx) = (start, 0u64);
    let timeline = std::env::var("SIM_OPEN_TIMELINE").is_ok();
    let (mut next_print, mut printed) = (start, vec![0u64; links.len()]);
    let (mut next_step, mut stepped) = (start, vec![0usize; links.len()]);
    let mut seen = 0;
    let (mut idle, mut idle_max) = (vec![0 as Nanos; links.len()], 0 as Nanos);
    while now < end {
        sim.deliver_until(now);
        if at_warm == 0 && now >= warm {
            at_warm = sim.arrived_bytes.iter().map(|b| b[0]).sum::<u64>().max(1);
        }
        offer_packet(&mut sim, now, idx, PKT);
        idx += 1;
        sim.pump_control(now);
        if now >= next_step + 100 * MS {
            let st = sim.t[0].status(now);
            // Every datagram side 0 sent counts (resends and control too).
            for d in &sim.departures[seen..] {
                if d.1 == 0 {
                    stepped[d.2] += d.3;
                }
            }
            seen = sim.departures.len();
            for (i, p) in st.paths.iter().enumerate() {
                let c = stepped[i];
                let o = sim.traces[i][0]
                    .as_ref()
                    .map_or(0, |t| t.offered_bytes(next_step, now));
                let offers = o as f64 * 8.0 / ((now - next_step) as f64 / 1e9) >= 1e6;
                if (c as u64) * 10 < o && offers && p.state == "up" {
                    idle[i] += now - next_step;
                    idle_max = idle_max.max(idle[i]);
                } else {
                    idle[i] = 0;
                }
                stepped[i] = 0;
            }
            next_step = now;
        }
        if timeline && now >= next_print {
            let st = sim.t[0].status(now);
            let mut line = format!("{:5.2}s", (now - start) as f64 / 1e9);
            for (i, p) in st.paths.iter().enumerate() {
                let s = p.sending.clone().unwrap_or_default();
                let c = sim.arrived_bytes[i][0];
                let o = sim.traces[i][0]
                    .as_ref()
                    .map_or(0, |t| t.offered_bytes(now - 100 * MS, now));
                line += &format!(
                    " | {:4}{} rtt {:5.0} paced {:5.1} q {:5.1} {:8} carried {:5.1} offered {:5.1}",
                    p.state,
                    if p.stalled { " STALLED" } else { "" },
                    p.rtt_ms.unwrap_or(-1.0),
                    s.pacing_mbps.unwrap_or(0.0),
                    s.queueing_ms.unwrap_or(-1.0),
                    s.control,
                    (c - printed[i]) as f64 * 8.0 / 0.1 / 1e6,
                    o as f64 * 8.0 / 0.1 / 1e6
                );
                printed[i] = c;
            }
            if std::env::var("SIM_OPEN_DROPS").is_ok() {
                let q = st.queue.as_ref().map(|q| (q.packets_now, q.stats.rerouted));
                line += &format!(" | queue {q:?} drops {:?}", st.drops);
            }
            println!("{line}");
            next_print += 100 * MS;
        }
        now += gap;
    }
    if std::env::var("SIM_DEBUG").is_ok() {
        for (i, t) in sim.traces.iter().enumerate() {
            if let Some(t) = &t[0] {
                let st = sim.t[0].status(end);
                println!(
                    "  path {i}: offered {:.1} Mbit/s, carried {:.1} (whole run), {}",
                    t.offered_bytes(start, end) as f64 * 8.0 / ((end - start) as f64 / 1e9) / 1e6,
                    sim.arrived_bytes[i][0] as f64 * 8.0 / ((end - start) as f64 / 1e9) / 1e6,
                    st.paths[i].state
                );
            }
        }
    }
    let carried = sim.arrived_bytes.iter().map(|b| b[0]).sum::<u64>() - at_warm;
    (carried as f64 / offered(&sim, warm, end) as f64, idle_max)
}

/// Bytes the down traces offered in `[from, to)`.
fn offered(sim: &Sim, from: Nanos, to: Nanos) -> u64 {
    sim.traces
        .iter()
        .filter_map(|t| t[0].as_ref())
        .map(|t| t.offered_bytes(from, to))
        .sum()
}

/// Over the lab's LTE traces (one with outages of 2-8 s), a path that is
/// up and whose trace offers capacity is never left idle for a second
/// while the sender has data: once, a path that went down handed its
/// whole queue to the other at once, whose pacer then owed it for seconds
/// (`a_dead_paths_queue_moves_to_the_other_paced` in `sim_capacity.rs`).
/// The open loop also carries most of what the traces offer.
#[test]
fn trace_links_are_not_left_idle() {
    let (a_down, a_up) = (lab_trace("lte-a.down"), lab_trace("lte-a.up"));
    let (b_down, b_up) = (lab_trace("lte-b.down"), lab_trace("lte-b.up"));
    for start in [0, 40, 80] {
        let links = [
            (a_down.as_str(), a_up.as_str(), 30, 100, start),
            (b_down.as_str(), b_up.as_str(), 40, 100, start),
        ];
        let (share, idle) = open_loop(&links, 40.0, 20);
        println!(
            "from {start} s: {:.1} % of the offered, longest idle {} ms",
            100.0 * share,
            idle / MS
        );
        assert!(idle < 1_000 * MS, "from {start} s: idle {} ms", idle / MS);
        assert!(share > 0.6, "from {start} s: {:.1} %", 100.0 * share);
    }
}

#[test]
fn the_trace_model_serves_opportunities_and_loops() {
    // Opportunities at 1, 1, 3 and 4 ms; period 4 ms.
    let mut t = TraceLink::new("1\n1\n3\n4\n", 0, 1000);
    assert_eq!(t.enqueue(0, 1500), Some(MS));
    assert_eq!(t.enqueue(0, 1000), Some(MS));
    // 500 bytes of the second opportunity are left: a 1000-byte packet
    // takes them and 500 of the next.
    assert_eq!(t.enqueue(0, 1000), Some(3 * MS));
    // Idle after 4 ms: the next loop starts at 5 ms.
    assert_eq!(t.enqueue(4 * MS + 1, 100), Some(5 * MS));
    assert_eq!(t.offered_bytes(0, 4 * MS + 1), 4 * 1500);
    // The queue's limit (2 packets at least) drops the rest.
    let mut t = TraceLink::new("1000\n", 0, 1);
    assert!(t.enqueue(0, 1500).is_some());
    assert!(t.enqueue(0, 1500).is_some());
    assert_eq!(t.enqueue(0, 1500), None);
}

/// The TCP-like flow and the open loop over the links `at(start)` gives,
/// one window of `secs` from each of `starts` (seconds into the
/// traces): each window and the means, printed.
fn bench<'a>(
    label: &str,
    starts: &[u64],
    secs: u64,
    offer_mbit: f64,
    at: impl Fn(u64) -> Vec<TraceSpec<'a>>,
) {
    let mut shares = vec![];
    // SIM_STARTS=60,75 runs those windows only.
    let only: Option<Vec<u64>> = std::env::var("SIM_STARTS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    for &start in only.as_deref().unwrap_or(starts) {
        let links = at(start);
        let (share, mbit) = tcp_share(&links, secs, 11);
        let (open, idle) = open_loop(&links, offer_mbit, secs);
        println!(
            "{label} from {start} s: TCP {mbit:.2} Mbit/s, {:.1} % of the offered; open loop {:.1} %, longest idle {} ms",
            100.0 * share,
            100.0 * open,
            idle / MS
        );
        shares.push((share, open));
    }
    let n = shares.len() as f64;
    let tcp = shares.iter().map(|s| s.0).sum::<f64>() / n;
    let open = shares.iter().map(|s| s.1).sum::<f64>() / n;
    println!(
        "{label}, mean share: TCP {:.1} %, open loop {:.1} %",
        100.0 * tcp,
        100.0 * open
    );
}

/// The lab's `two-lte` (both links' buffers `queue_ms`) in virtual time,
/// every 15 s window of its traces.
fn two_lte_bench(label: &str, queue_ms: u64) {
    let (a_down, a_up) = (lab_trace("lte-a.down"), lab_trace("lte-a.up"));
    let (b_down, b_up) = (lab_trace("lte-b.down"), lab_trace("lte-b.up"));
    bench(
        label,
        &[0, 15, 30, 45, 60, 75, 90, 105],
        30,
        40.0,
        |start| {
            vec![
                (&a_down, &a_up, 30, queue_ms, start),
                (&b_down, &b_up, 40, queue_ms, start),
            ]
        },
    );
}

/// The lab's `two-lte` in virtual time (bench: `cargo test --release
/// --test sim_trace two_lte -- --ignored --nocapture`; `SIM_TIMELINE=1`
/// for the flow every 100 ms, `SIM_OPEN_TIMELINE=1` for the open loop).
#[test]
#[ignore]
fn two_lte() {
    two_lte_bench("two-lte", 100);
}

/// `two_lte` with shallow buffers (30 ms at each trace's mean rate, 100
/// in the lab's scenario): what a radio link's deeper queueing target does
/// where the buffer holds less than it (bench, as `two_lte`).
#[test]
#[ignore]
fn two_lte_shallow() {
    two_lte_bench("two-lte, 30 ms buffers", 30);
}

/// Two recorded LTE traces (`../shared/traces/`, Saturator's AT&T and
/// Verizon; skipped where the folder is missing): the check that what
/// was tuned on the lab's synthetic traces holds on real ones (bench:
/// `cargo test --release --test sim_trace recorded -- --ignored
/// --nocapture`).
#[test]
#[ignore]
fn recorded_lte() {
    let dir = format!("{}/../../../shared/traces", env!("CARGO_MANIFEST_DIR"));
    let read = |n: &str| std::fs::read_to_string(format!("{dir}/{n}")).ok();
    let (Some(a_down), Some(a_up), Some(b_down), Some(b_up)) = (
        read("ATT-LTE-driving-2016.down"),
        read("ATT-LTE-driving-2016.up"),
        read("Verizon-LTE-short.down"),
        read("Verizon-LTE-short.up"),
    ) else {
        println!("no recorded traces in {dir}: skipped");
        return;
    };
    let starts = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90];
    bench("AT&T + Verizon", &starts, 20, 60.0, |start| {
        vec![
            (&a_down, &a_up, 30, 100, start),
            (&b_down, &b_up, 40, 100, start),
        ]
    });
}

/// Each of `two_lte`'s traces alone (bench, as `two_lte`): what the rate
/// control leaves unused without a second path.
#[test]
#[ignore]
fn one_lte() {
    for (down, up, delay) in [
        ("lte-a.down", "lte-a.up", 30),
        ("lte-b.down", "lte-b.up", 40),
    ] {
        let (d, u) = (lab_trace(down), lab_trace(up));
        let starts = [0, 15, 30, 45, 60, 75, 90, 105];
        bench(&format!("{down} alone"), &starts, 30, 40.0, |start| {
            vec![(&d, &u, delay, 100, start)]
        });
    }
}
