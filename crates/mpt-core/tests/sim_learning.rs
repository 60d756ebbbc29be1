//! Simulation tests of a learning server (no `remote` on its paths): it
//! takes every path's address from the first authentic packet on that
//! path, whatever the paths' delays and whichever path carried the
//! handshake (issue: a server learns every path). Harness in
//! `common/mod.rs`.

mod common;

use common::*;
use mpt_core::crypto::state::CryptoEvent;
use mpt_core::tunnel::Event;
use mpt_core::Nanos;

/// One-way delays of the three paths, ms.
const DELAYS_MS: [u64; 3] = [5, 40, 200];
/// The test configuration's probe interval (`keepalive`).
const PROBE_INTERVAL: Nanos = 100 * MS;

/// When side `side` first had a session, if it did.
fn session_at(sim: &Sim, side: usize) -> Option<Nanos> {
    sim.events
        .iter()
        .find(|(_, s, e)| {
            *s == side && matches!(e, Event::Security(CryptoEvent::Established { .. }))
        })
        .map(|e| e.0)
}

/// When the server first took an address for its path `path`.
fn learned_at(sim: &Sim, path: usize) -> Option<Nanos> {
    sim.events
        .iter()
        .find(|(_, s, e)| {
            *s == 0 && matches!(e, Event::RemoteChanged { path: p, from: None, .. } if *p as usize == path)
        })
        .map(|e| e.0)
}

/// Every path is learned within one probe interval plus its one-way delay
/// of the client's session, while the client sends data (whose packets on
/// the fast paths are always newer than a slow path's).
#[test]
fn a_learning_server_learns_every_path_whichever_carried_the_handshake() {
    for (h, dh) in DELAYS_MS.iter().enumerate() {
        let spec: Vec<(u64, u64, f64)> = DELAYS_MS.iter().map(|d| (*d, 0, 0.0)).collect();
        let mut sim = Sim::secure_learning(links(&spec), 70 + h as u64);
        // Until the server answers, the client reaches it on path h only.
        for (i, l) in sim.links.iter_mut().enumerate() {
            l[1].up = i == h;
        }
        let mut now = 0;
        while sim.t[0].path(h as u8).unwrap().remote.is_none() {
            now += MS;
            assert!(now < 20_000 * MS, "no handshake on path {h}");
            sim.deliver_until(now);
        }
        for l in &mut sim.links {
            l[1].up = true;
        }
        // The client sends data every millisecond from here on.
        let mut idx = 0;
        while now < 3_000 * MS + session_at(&sim, 1).unwrap_or(now) {
            sim.deliver_until(now);
            if session_at(&sim, 1).is_some() {
                sim.send_data(now, 1, idx);
                idx += 1;
            }
            sim.pump_control(now);
            now += MS;
        }
        let up = session_at(&sim, 1).expect("the client has a session");
        for (i, d) in DELAYS_MS.iter().enumerate() {
            let at = learned_at(&sim, i)
                .unwrap_or_else(|| panic!("handshake on path {h}: path {i} never learned"));
            let took = at.saturating_sub(up);
            println!(
                "handshake on path {h} ({dh} ms): path {i} ({d} ms) learned {} ms after the client's session",
                took / MS
            );
            if i != h {
                assert!(
                    took <= PROBE_INTERVAL + d * MS + 5 * MS,
                    "handshake on path {h}: path {i} ({d} ms) learned after {} ms",
                    took / MS
                );
            }
        }
        // Learned once, never moved: no challenge, no failed validation.
        assert!(!sim.events.iter().any(|(_, s, e)| *s == 0
            && matches!(
                e,
                Event::ValidationFailed { .. } | Event::RemoteChanged { from: Some(_), .. }
            )));
        assert!(idx > 1_000, "the client sent {idx} packets");
    }
}
