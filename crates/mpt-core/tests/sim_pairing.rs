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
fn a_path_the_peer_names_otherwise_pairs_by_its_socket() {
    // The server calls the path on socket 1 "dsl"; the client calls it p1.
    // Each side has one path that the socket (and address) it arrives at
    // can mean: they pair by that, as a concentrator's clients, which name
    // their paths as they like, pair with the server's sockets.
    let mut sim = crossed(3, Some((1, "dsl")));
    sim.deliver_until(1_000 * MS);
    let end = sim.run_traffic(1_000 * MS, 300, MS, 0);
    sim.deliver_until(end + 1_000 * MS);
    assert_in_order_exactly_once(&sim.delivered[1], 300, &sim.lost_data);
    assert!(sim.drops_seen.is_empty(), "{:?}", sim.drops_seen);
    assert!(sim.sent_on_path[1] > 50, "{:?}", sim.sent_on_path);
    for (side, theirs) in [(0usize, "p1"), (1, "dsl")] {
        let told: Vec<_> = sim
            .events
            .iter()
            .filter_map(|(_, s, e)| match e {
                Event::PathPairedBySocket { name, .. } if *s == side => Some(name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(told, vec![theirs.to_string()], "side {side}: told once");
        assert!(sim.t[side].unmatched_peer_paths().is_empty());
        let on_link1 = sim.link_of[side].iter().position(|l| *l == 1).unwrap() as u8;
        assert!(sim.t[side].path(on_link1).unwrap().up, "side {side}");
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

/// A path config like `TestConfig`'s `i`-th, for a path added at runtime.
fn path_cfg(side: u8, i: usize, name: &str) -> mpt_core::path::PathConfig {
    let mut c = TestConfig::new(side, i + 1).config().paths.pop().unwrap();
    c.name = name.into();
    c
}

#[test]
fn paths_added_and_removed_at_runtime_carry_on_without_loss() {
    let mut sim = Sim::secure(links(&[(5, 0, 0.0), (8, 0, 0.0)]), 11, security(1, true));
    sim.deliver_until(1_000 * MS);
    let mut now = sim.run_traffic(1_000 * MS, 300, MS, 0);
    // The client drops its path p1 (a reload without it).
    assert!(sim.t[1].remove_path("p0", now).is_ok());
    let before = sim.sent_on_path.clone();
    now = sim.run_traffic(now, 300, MS, 300);
    // Data from the server still uses both; back to the client only p1...
    // The server learns nothing by name for p0 any more: the client sends
    // nothing on it, so the server stops hearing it and takes it down.
    sim.deliver_until(now + 2_000 * MS);
    now += 2_000 * MS;
    assert!(!sim.t[0].path(0).unwrap().up, "the server took p0 down");
    let on_p0 = sim.sent_on_path[0] - before[0];
    assert!(on_p0 < 100, "p0 carried {on_p0} after its removal");
    // Both sides add a third path p2 on a new link (their sockets 2).
    sim.links.push(sim.links[0]);
    sim.last_arrival.push([0, 0]);
    sim.sent_on_path.push(0);
    sim.client_src.push(addr(1, 2));
    sim.link_of[0].push(2);
    sim.link_of[1].push(2);
    assert_eq!(sim.t[0].add_path(path_cfg(0, 2, "p2"), now), Ok(2));
    assert_eq!(sim.t[1].add_path(path_cfg(1, 2, "p2"), now), Ok(2));
    sim.deliver_until(now + 1_000 * MS);
    now += 1_000 * MS;
    let end = sim.run_traffic(now, 400, MS, 600);
    sim.deliver_until(end + 1_000 * MS);
    assert_in_order_exactly_once(&sim.delivered[1], 1_000, &sim.lost_data);
    assert!(sim.sent_on_path[2] > 100, "{:?}", sim.sent_on_path);
    // The only drops: the server's probes on its p0, which the client no
    // longer has (the server still does).
    assert!(
        sim.drops_seen
            .iter()
            .all(|d| *d == (1, DropReason::UnknownPath)),
        "{:?}",
        sim.drops_seen
    );
    let c = &sim.t[1];
    assert!(c.path(1).unwrap().up && c.path(2).unwrap().up);
    assert!(c.is_removed(0));
    assert_eq!(
        c.peer_path_id(2),
        Some(2),
        "the client's p2 is the server's id 2"
    );
    let names: Vec<String> = c.status(end).paths.iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, ["p1", "p2"]);
    // Names stay unique; the last primary path stays.
    assert!(sim.t[1].add_path(path_cfg(1, 1, "p1"), end).is_err());
    assert!(sim.t[1].remove_path("p2", end).is_ok());
    assert!(sim.t[1]
        .remove_path("p1", end)
        .unwrap_err()
        .contains("last primary"));
}

#[test]
fn a_weight_changes_at_runtime_under_static_weights_only() {
    let mut sim = Sim::new(
        links(&[(5, 0, 0.0), (5, 0, 0.0)]),
        mpt_core::tunnel::ReleaseKind::PathFrontier,
        5,
    );
    sim.deliver_until(1_000 * MS);
    sim.t[0].set_weight("p1", 3).unwrap();
    let before = sim.sent_on_path.clone();
    let end = sim.run_traffic(1_000 * MS, 800, MS, 0);
    sim.deliver_until(end + 500 * MS);
    let (a, b) = (
        sim.sent_on_path[0] - before[0],
        sim.sent_on_path[1] - before[1],
    );
    let share = b as f64 / (a + b) as f64;
    assert!((share - 0.75).abs() < 0.05, "p1 carried {share}");
    assert!(sim.t[0].set_weight("p1", 0).is_err());
    let ecf = TestConfig::new(0, 2).ecf().tunnel();
    let mut ecf = ecf;
    assert!(ecf.set_weight("p0", 2).unwrap_err().contains("path-aware"));
}
