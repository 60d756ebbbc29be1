//! Peers pair their paths by name, whatever order their files list them
//! in (wire v6, `tunnel/pairing.rs`), in the virtual-time simulation.

mod common;

use common::*;
use mpt_core::tunnel::Event;

/// A secure pair whose server lists its paths in the reverse order of the
/// client's: each path keeps its name, socket and addresses.
fn crossed(n: usize, rename_server_path: Option<(usize, &str)>) -> Sim {
    let server = TestConfig::new(0, n)
        .secure()
        .with(|c| {
            c.paths.reverse();
            if let Some((i, name)) = rename_server_path {
                c.paths.iter_mut().find(|p| p.local_key == i).unwrap().name = name.into();
            }
        })
        .tunnel();
    let client = TestConfig::new(1, n).secure().tunnel();
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.0); 3][..n]), [server, client], 7);
    sim.link_of[0] = (0..n).rev().collect();
    sim
}

#[test]
fn paths_listed_in_another_order_pair_by_name() {
    let mut sim = crossed(3, None);
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 600, MS, 0);
    sim.deliver_until(end + 1_000 * MS);
    assert_in_order_exactly_once(&sim.delivered[1], 600, &sim.lost_data);
    assert!(sim.drops_seen.is_empty(), "{:?}", sim.drops_seen);
    // Every link carried data (the server's path 0 is the client's 2).
    assert!(
        sim.sent_on_path.iter().all(|n| *n > 100),
        "{:?}",
        sim.sent_on_path
    );
    // Both sides paired each path with the peer's of the same name.
    for side in 0..2 {
        let t = &sim.t[side];
        for i in 0..3u8 {
            let peer = t.peer_path_id(i).expect("paired");
            let name = &t.path(i).unwrap().cfg.name;
            let theirs = sim.t[1 - side].path(peer).unwrap().cfg.name.clone();
            assert_eq!(*name, theirs, "side {side} path {i}");
        }
        assert!(t.path(0).unwrap().up && t.path(2).unwrap().up);
    }
    let paired = sim
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::PathPaired { .. }))
        .count();
    assert_eq!(paired, 6, "told once per path and side");
    // The server's path 0 is named p2 and paired with the client's 2.
    assert_eq!(sim.t[0].peer_path_id(0), Some(2));
}

#[test]
fn a_path_the_peer_lacks_is_told_and_its_packets_dropped() {
    // The server calls the path on socket 1 "dsl"; the client calls it p1.
    let mut sim = crossed(3, Some((1, "dsl")));
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 300, MS, 0);
    sim.deliver_until(end + 1_000 * MS);
    // Traffic keeps to the two paths both sides know.
    assert_in_order_exactly_once(&sim.delivered[1], 300, &sim.lost_data);
    assert_eq!(sim.sent_on_path[1], 0, "{:?}", sim.sent_on_path);
    // Each side says what it got that it cannot place, once.
    for (side, theirs) in [(0usize, "p1"), (1, "dsl")] {
        let told: Vec<_> = sim
            .events
            .iter()
            .filter_map(|(_, s, e)| match e {
                Event::PathMismatch {
                    name, ours: None, ..
                } if *s == side => Some(name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(told, vec![theirs.to_string()], "side {side}");
        let unmatched = sim.t[side].unmatched_peer_paths();
        assert_eq!(unmatched.len(), 1);
        assert_eq!(unmatched[0].1, theirs);
        assert!(count(&sim, side, DropReason::UnknownPath) > 0);
        assert!(
            !sim.t[side]
                .path(sim.link_of[side].iter().position(|l| *l == 1).unwrap() as u8)
                .unwrap()
                .up
        );
    }
}

#[test]
fn plaintext_peers_pair_by_name_too() {
    let server = TestConfig::new(0, 2).with(|c| c.paths.reverse()).tunnel();
    let client = TestConfig::new(1, 2).tunnel();
    // Equal delays: a plaintext receiver starts at the first sequence it
    // sees, so the first packet must not be overtaken.
    let mut sim = Sim::with_tunnels(links(&[(5, 0, 0.0), (5, 0, 0.0)]), [server, client], 3);
    sim.link_of[0] = vec![1, 0];
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 200, MS, 0);
    sim.deliver_until(end + 1_000 * MS);
    assert_in_order_exactly_once(&sim.delivered[1], 200, &sim.lost_data);
    assert!(sim.drops_seen.is_empty(), "{:?}", sim.drops_seen);
    assert!(
        sim.sent_on_path.iter().all(|n| *n > 50),
        "{:?}",
        sim.sent_on_path
    );
}
