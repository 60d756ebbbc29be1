//! Cookie and MAC tests. The MAC vectors were computed independently with
//! Python's `hashlib.blake2s` (keyed, 16-byte digest):
//!
//! ```text
//! pub    = bytes(range(32)); dgram = bytes([2, 4] + [0]*34) + bytes(range(100))
//! mac1   = blake2s(dgram, key=blake2s(b"mac1----" + pub), digest_size=16)
//! mac2   = blake2s(dgram + mac1, key=b"\xab"*16, digest_size=16)
//! cookie = blake2s(192.0.2.1 ‖ 5001 (6 bytes), key=b"\x07"*32, digest_size=16)
//! ```

use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn vector_dgram() -> Vec<u8> {
    let mut d = vec![2u8, 4];
    d.extend([0u8; 34]);
    d.extend(0u8..100);
    d.extend([0u8; MACS_LEN]);
    d
}

fn public() -> PublicKey {
    let mut k = [0u8; 32];
    k.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    PublicKey(k)
}

#[test]
fn macs_match_an_independent_implementation() {
    let keys = MacKeys::new(&public());
    let mut d = vector_dgram();
    let m1 = keys.write_macs(&mut d, Some(&[0xab; 16])).unwrap();
    assert_eq!(hex(&m1), "e7fa3104253cc0f722a4b53efa05b980");
    let n = d.len();
    assert_eq!(hex(&d[n - 32..n - 16]), "e7fa3104253cc0f722a4b53efa05b980");
    assert_eq!(hex(&d[n - 16..]), "06668c6045900d669ccca1cc88787007");
    assert!(keys.check_mac1(&d));
    // Without a cookie, mac2 is zeros.
    keys.write_macs(&mut d, None).unwrap();
    assert_eq!(&d[n - 16..], &[0u8; 16]);
    // Any change of the datagram, or another receiver key, fails mac1.
    d[5] ^= 1;
    assert!(!keys.check_mac1(&d));
    d[5] ^= 1;
    assert!(!MacKeys::new(&PublicKey([9; 32])).check_mac1(&d));
    assert!(!keys.check_mac1(&d[..10]));
}

#[test]
fn cookie_binds_the_source_address_and_rotates() {
    let src: SocketAddr = "192.0.2.1:5001".parse().unwrap();
    let mut maker = CookieMaker::new(&public());
    let c = maker.cookie(0, &src, || [7; 32]);
    assert_eq!(hex(&c), "0d618ce1ce2f3bac976176cca067676c");
    // An initiation with mac2 from this cookie passes from src only.
    let keys = MacKeys::new(&public());
    let mut d = vector_dgram();
    keys.write_macs(&mut d, Some(&c)).unwrap();
    assert!(maker.check_mac2(1, &d, &src, || unreachable!()));
    let other: SocketAddr = "192.0.2.1:5002".parse().unwrap();
    assert!(!maker.check_mac2(1, &d, &other, || unreachable!()));
    // After the secret's lifetime, a new secret: the old cookie fails.
    assert!(!maker.check_mac2(COOKIE_SECRET_LIFETIME, &d, &src, || [8; 32]));
}

#[test]
fn cookie_reply_round_trip_and_forgery() {
    let server = public();
    let src: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
    let mut maker = CookieMaker::new(&server);
    let initiator_keys = MacKeys::new(&server);
    let mut init = vector_dgram();
    let mac1 = initiator_keys.write_macs(&mut init, None).unwrap();
    let mut body = [0u8; COOKIE_REPLY_BODY_LEN];
    let n = maker
        .write_reply(0, &init, &src, 0x0a0b_0c0d, [3; 24], || [1; 32], &mut body)
        .unwrap();
    assert_eq!(n, COOKIE_REPLY_BODY_LEN);
    assert_eq!(cookie_reply_receiver(&body), Some(0x0a0b_0c0d));
    let cookie = initiator_keys.open_cookie_reply(&body, &mac1).unwrap();
    // The cookie it carries makes a mac2 the responder accepts from src.
    initiator_keys.write_macs(&mut init, Some(&cookie)).unwrap();
    assert!(maker.check_mac2(1, &init, &src, || unreachable!()));
    // A reply for another initiation (other mac1), a flipped bit, or a
    // reply sealed for another server key: refused.
    assert!(initiator_keys.open_cookie_reply(&body, &[0; 16]).is_none());
    let mut bad = body;
    bad[40] ^= 1;
    assert!(initiator_keys.open_cookie_reply(&bad, &mac1).is_none());
    assert!(MacKeys::new(&PublicKey([9; 32]))
        .open_cookie_reply(&body, &mac1)
        .is_none());
    assert!(initiator_keys
        .open_cookie_reply(&body[..59], &mac1)
        .is_none());
}
