//! `mpt-netem`: link emulator for kernels without netem.
//!
//! It runs in a router namespace between two hosts and forwards Ethernet
//! frames between interface pairs like a transparent bridge, applying delay,
//! jitter, random or bursty loss and a queue limit per direction (see
//! `model`). Rate is left to tbf/htb on the hosts' interfaces, or set per
//! direction with `rate_mbit` (an exact per-frame serialiser, no burst).
//!
//! ```text
//!  host A  l1a ──── r1a [ mpt-netem ] r1b ──── l1b  host B
//!          l2a ──── r2a [           ] r2b ──── l2b
//! ```
//!
//! Usage: `mpt-netem CONFIG.json`, where the file holds
//! `{"links": [{"a": "r1a", "b": "r1b", "a_to_b": {...}, "b_to_a": {...}}]}`
//! with direction fields `delay_ms`, `jitter_ms`, `loss`, `loss_burst`,
//! `limit`, `reorder`, `rate_mbit`, `wmm`, `ecn_mark_ms` (with `rate_mbit`:
//! mark ECN-capable frames CE beyond that wait, `ecn.rs`), `trace` (a mahimahi capacity
//! trace, relative to the file; with `trace_start_ms`, `queue_bytes`,
//! `queue_ms`), and at the top `spin_us`: when a
//! release is due within that many µs, busy-poll instead of sleeping, so
//! frames leave within about a microsecond of their time (for measurement
//! scenarios; it costs a core while traffic flows), and `busy_poll`: never
//! sleep, so that a frame reaching an idle emulator is read at once (a
//! whole core for the emulator's lifetime). It prints `ready T0` on stdout once
//! forwarding (T0: its start on the monotonic clock, ns, where traces start), and on
//! SIGINT/SIGTERM prints per-direction counters as one JSON line and exits.
//! SIGHUP re-reads the file: the same links with new settings take effect
//! for frames arriving from then on (lab events that change a link).
//! SIGUSR1 restarts every trace's replay from its start offset now and
//! prints `restart T0` (the lab does so before each transfer, so that each
//! system measured sees the same window of the trace).
//!
//! Invariants: every frame is counted once (passed, lost, queue-dropped, or
//! send error); a bad configuration exits with status 2 and a message naming
//! the field, before any socket is opened.

mod ecn;
mod model;
mod rng;
mod trace;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use model::{DirSpec, Direction};
use mpt_sys::packet::{monotonic_ns, set_timer_slack_ns, wait_readable, PacketSocket};
use mpt_sys::stamp;
use serde::Deserialize;
use std::os::fd::AsRawFd;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkCfg {
    a: String,
    b: String,
    #[serde(default)]
    a_to_b: DirSpec,
    #[serde(default)]
    b_to_a: DirSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cfg {
    links: Vec<LinkCfg>,
    #[serde(default)]
    seed: u64,
    /// Busy-poll when the next release is closer than this (µs); 0 sleeps.
    #[serde(default)]
    spin_us: u64,
    /// Never sleep: a frame arriving at an idle emulator is read at once
    /// rather than after the process wakes up (measurement of short
    /// transmission times; costs a whole core).
    #[serde(default)]
    busy_poll: bool,
}

struct Dir {
    from: usize,
    to: usize,
    model: Direction,
    send_errors: u64,
    name: String,
}

fn load(path: &str) -> Result<Cfg, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
    let cfg: Cfg = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    if cfg.spin_us > 1_000_000 {
        return Err(format!("{path}: spin_us must be at most 1000000"));
    }
    if cfg.links.is_empty() {
        return Err(format!("{path}: links: at least one link is needed"));
    }
    let base = std::path::Path::new(path)
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let mut cfg = cfg;
    for (i, l) in cfg.links.iter_mut().enumerate() {
        for (n, d) in [("a_to_b", &mut l.a_to_b), ("b_to_a", &mut l.b_to_a)] {
            d.validate()
                .and_then(|()| d.load_trace(&base))
                .map_err(|e| format!("{path}: links[{i}].{n}: {e}"))?;
        }
    }
    Ok(cfg)
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: mpt-netem CONFIG.json");
        return ExitCode::from(2);
    };
    let cfg = match load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(cfg, &path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Re-read the configuration (SIGHUP): new delay, jitter and loss for the
/// same links; anything else is refused with a message and the old settings
/// stay.
fn reload(path: &str, cfg: &Cfg, dirs: &mut [Dir]) {
    let new = match load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reload refused: {e}");
            return;
        }
    };
    let same = new.links.len() == cfg.links.len()
        && new
            .links
            .iter()
            .zip(&cfg.links)
            .all(|(n, o)| n.a == o.a && n.b == o.b);
    if !same {
        eprintln!("reload refused: {path}: the links must stay the same");
        return;
    }
    for (i, l) in new.links.iter().enumerate() {
        dirs[2 * i].model.set_spec(l.a_to_b.clone());
        dirs[2 * i + 1].model.set_spec(l.b_to_a.clone());
    }
    eprintln!("reloaded {path}");
}

/// When a frame arrived, on the monotonic clock: the kernel's receive stamp
/// (real-time clock) moved to the monotonic clock, so that the time the
/// frame waited for this process to wake up counts as part of its delay,
/// as on a real link; now if the kernel gave no stamp.
fn arrival_ns(kernel_realtime: Option<u64>) -> u64 {
    let mono = monotonic_ns();
    let Some(k) = kernel_realtime else {
        return mono;
    };
    let waited = stamp::realtime_ns().saturating_sub(k);
    // A stamp from the future or from long ago (clock stepped) is ignored.
    if waited > 1_000_000_000 {
        return mono;
    }
    mono.saturating_sub(waited)
}

/// Send every frame whose release time has come.
fn release_due(dirs: &mut [Dir], socks: &[PacketSocket]) {
    let now = monotonic_ns();
    for d in dirs.iter_mut() {
        while let Some(f) = d.model.poll_release(now) {
            if socks[d.to].send(&f).is_err() {
                d.send_errors += 1;
            }
        }
    }
}

fn run(cfg: Cfg, path: &str) -> std::io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
    let usr1 = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&usr1))?;
    set_timer_slack_ns(1);
    let mut socks = vec![];
    let mut dirs = vec![];
    for (i, l) in cfg.links.iter().enumerate() {
        let a = socks.len();
        socks.push(PacketSocket::open(&l.a)?);
        socks.push(PacketSocket::open(&l.b)?);
        for s in &socks[a..] {
            stamp::enable_rx_timestamps(s)?;
        }
        let seed = cfg.seed.wrapping_add(2 * i as u64);
        dirs.push(Dir {
            from: a,
            to: a + 1,
            model: Direction::new(l.a_to_b.clone(), seed),
            send_errors: 0,
            name: format!("{}->{}", l.a, l.b),
        });
        dirs.push(Dir {
            from: a + 1,
            to: a,
            model: Direction::new(l.b_to_a.clone(), seed + 1),
            send_errors: 0,
            name: format!("{}->{}", l.b, l.a),
        });
    }
    let fds: Vec<_> = socks.iter().map(|s| s.as_raw_fd()).collect();
    // Which direction reads from socket k.
    let reader: Vec<usize> = (0..socks.len())
        .map(|k| dirs.iter().position(|d| d.from == k).unwrap_or(0))
        .collect();
    // The traces' replay starts now; the lab reads this time (the
    // monotonic clock, as its own) to know what a trace offered when.
    let t0 = monotonic_ns();
    for d in &mut dirs {
        d.model.start_at(t0);
    }
    println!("ready {t0}");
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        if hup.swap(false, Ordering::Relaxed) {
            reload(path, &cfg, &mut dirs);
        }
        if usr1.swap(false, Ordering::Relaxed) {
            let t0 = monotonic_ns();
            for d in &mut dirs {
                d.model.restart_trace(t0);
            }
            println!("restart {t0}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        let now = monotonic_ns();
        let next = dirs.iter().filter_map(|d| d.model.next_release()).min();
        // Wake `spin_us` early and busy-poll the rest of the way.
        let timeout = if cfg.busy_poll {
            Some(0)
        } else {
            next.map(|t| t.saturating_sub(now).saturating_sub(cfg.spin_us * 1_000))
        };
        let ready = wait_readable(&fds, timeout.or(Some(200_000_000)))?;
        for (k, r) in ready.iter().enumerate() {
            if !r {
                continue;
            }
            loop {
                match stamp::try_recv_stamped(&socks[k], &mut buf) {
                    Ok((n, kernel)) => {
                        let arrival = arrival_ns(kernel);
                        dirs[reader[k]].model.on_frame(arrival, buf[..n].to_vec());
                        // Frames falling due while a burst is read leave
                        // on time, not after the burst.
                        release_due(&mut dirs, &socks);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        release_due(&mut dirs, &socks);
    }
    let stats: Vec<_> = dirs
        .iter()
        .map(|d| serde_json::json!({ "direction": d.name, "stats": d.model.stats, "send_errors": d.send_errors }))
        .collect();
    println!("{}", serde_json::json!({ "directions": stats }));
    Ok(())
}
