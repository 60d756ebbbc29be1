//! The data path allocates nothing per packet once warm.
//!
//! A counting global allocator (counting only on the test's own thread)
//! watches an encrypted tunnel pair carry 20,000 packets through the split
//! API the I/O layer uses (`send_unsealed`, `Sealer::seal`, `recv_start`,
//! `Opener::open`, `recv_finish`, `deliver_ready`) over two paths,
//! with every other pair of packets swapped so that the reorder buffer holds
//! and releases packets too. After a warm-up, not one allocation may happen,
//! with loss recovery off or on.

use mpt_core::testing::{addr, TestConfig};
use mpt_core::tunnel::{Received, RecvStart, Tunnel};
use mpt_core::wire::HEADER_LEN;
use mpt_core::{Nanos, NANOS_PER_MS};
use mpt_sys::alloc::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const MS: Nanos = NANOS_PER_MS;
const PATHS: usize = 2;

fn tunnel(side: u8, recover: bool) -> Tunnel {
    TestConfig::new(side, PATHS)
        .secure()
        .adapt_to_loss(false)
        .recover(recover)
        .tunnel()
}

/// Exchange control packets (handshake, probes) until both have a session.
fn handshake(t: &mut [Tunnel; 2]) {
    let mut now = 0;
    let mut buf = [0u8; 512];
    for _ in 0..50 {
        now += MS;
        for side in 0..2 {
            t[side].handle_timeout(now);
            while let Some(tx) = t[side].poll_transmit(now, &mut buf) {
                let mut d = buf[..tx.len].to_vec();
                let from = addr(side as u8, tx.path as usize);
                let _ = t[1 - side].recv(now, tx.local_key, from, &mut d);
            }
        }
        if t[0].has_session() && t[1].has_session() {
            return;
        }
    }
    panic!("no session");
}

#[test]
fn the_warm_data_path_allocates_nothing() {
    check_no_allocation(false);
}

/// With loss recovery on, the sender also copies every packet into its
/// ring; once each ring slot has been used, that allocates nothing either.
#[test]
fn the_warm_data_path_allocates_nothing_with_recovery() {
    check_no_allocation(true);
}

fn check_no_allocation(recover: bool) {
    let mut t = [tunnel(0, recover), tunnel(1, recover)];
    handshake(&mut t);
    let [a, b] = &mut t;
    let now = 100 * MS;
    // Two datagram buffers, reused: packets go out in pairs, the second
    // pair member first every other time.
    let mut bufs = [vec![0u8; 2048], vec![0u8; 2048]];
    let mut lens = [0usize; 2];
    let mut keys = [0usize; 2];
    let mut delivered = 0u64;
    let mut run = |count: u64, a: &mut Tunnel, b: &mut Tunnel| {
        for pair in 0..count / 2 {
            for k in 0..2 {
                let buf = &mut bufs[k];
                buf[HEADER_LEN..HEADER_LEN + 1200].fill(0);
                buf[HEADER_LEN] = 0x45;
                let tx = a.send_unsealed(now, buf, 1200).expect("sent");
                assert!(a.sealer().seal(tx.seal, &mut buf[..tx.len]));
                (lens[k], keys[k]) = (tx.len, tx.local_key);
            }
            let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                let d = &mut bufs[k][..lens[k]];
                let from = addr(0, keys[k]);
                let r = match b.recv_start(now, keys[k], from, d, 0) {
                    RecvStart::Open(t) => {
                        let opened = b.opener().open(&t, d);
                        b.recv_finish(now, from, d, &t, opened)
                    }
                    RecvStart::Done(r) => r,
                };
                match r {
                    Received::Deliver { .. } => delivered += 1,
                    Received::Consumed => {}
                    Received::Dropped(why) => panic!("dropped: {why:?}"),
                }
                delivered += b.deliver_ready(|_| Ok(())) as u64;
            }
            // What the event loop does on every turn.
            let _ = (a.poll_timeout(), b.poll_timeout());
        }
    };
    // Warm-up: fills the reorder pool and, with recovery, the whole ring.
    let warm = 6_000;
    run(warm, a, b);
    CountingAlloc::count_here(true);
    run(20_000, a, b);
    CountingAlloc::count_here(false);
    assert_eq!(delivered, warm + 20_000, "everything delivered");
    assert_eq!(CountingAlloc::counted(), 0, "allocations on the warm path");
    assert!(
        b.reorder_stats().reordered > 0,
        "the reorder buffer took part"
    );
}
