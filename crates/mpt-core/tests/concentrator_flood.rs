//! A concentrator under a flood of initiations with a valid mac1: beyond
//! its load threshold it answers with cookie replies instead of doing the
//! peer lookup's Diffie-Hellman, and a real client that gets one comes in
//! with its next initiation (valid mac2).

use mpt_core::concentrator::Concentrator;
use mpt_core::stats::DropReason;
use mpt_core::testing::{addr, client_addr, client_config, client_peer, concentrator_template};
use mpt_core::tunnel::{Received, Tunnel};
use mpt_core::NANOS_PER_MS;

#[test]
fn beyond_the_load_threshold_only_cookie_holders_get_in() {
    let mut conc = Concentrator::new(concentrator_template(2)).unwrap();
    conc.add_peer(client_peer(0)).unwrap();
    let mut admitted = 0;
    let mut cookies = 0;
    let mut clients = vec![];
    for k in 0..40u64 {
        let now = k * NANOS_PER_MS;
        let mut t = Tunnel::new(client_config(0, 2), now);
        let mut buf = [0u8; 512];
        let tx = t.poll_transmit(now, &mut buf).unwrap();
        let from = client_addr(0, tx.path as usize);
        let mut d = buf[..tx.len].to_vec();
        match conc.recv(now, tx.local_key, from, &mut d).1 {
            Received::Dropped(DropReason::HandshakeCookieSent) => cookies += 1,
            _ => admitted += 1,
        }
        clients.push((t, tx.path, from));
    }
    // Ten at once, then about one more per 100 ms: the rest get cookies.
    assert!((10..=11).contains(&admitted), "{admitted} admitted");
    assert_eq!(cookies, 40 - admitted);
    assert_eq!(conc.cookies_sent(), cookies as u64);
    // The last client gets its cookie reply and tries again, with mac2.
    let mut reply = None;
    while let Some((socket, dst, d)) = conc.poll_transmit() {
        reply = Some((socket, dst, d));
    }
    let (socket, dst, mut d) = reply.expect("a cookie reply");
    let (mut t, path, from) = clients.pop().unwrap();
    assert_eq!(dst, from, "the reply goes where the initiation came from");
    let now = 41 * NANOS_PER_MS;
    let r = t.recv(now, path as usize, addr(0, socket), &mut d);
    assert_eq!(r, Received::Consumed);
    let mut buf = [0u8; 512];
    let tx = t
        .poll_transmit(now, &mut buf)
        .expect("a new initiation, with mac2");
    let mut d = buf[..tx.len].to_vec();
    let (peer, r) = conc.recv(now, tx.local_key, from, &mut d);
    assert_eq!(peer, Some(0), "{r:?}");
    assert_ne!(r, Received::Dropped(DropReason::HandshakeCookieSent));
}
