//! Wire parsers: headers, bodies, fragments, cookies (`mpt_core::wire`,
//! `mpt_core::crypto::cookie`). No state; see the crate doc.

use mpt_core::crypto::cookie::{self, MacKeys};
use mpt_core::crypto::keys::PrivateKey;
use mpt_core::wire::{
    write_fragment_header, write_header, Fragment, Header, NackBody, ProbeBody, ReportBody,
    ReportForBody, SessionUnknownBody, FRAGMENT_HEADER_LEN, HEADER_LEN, REPORT_BODY_LEN,
    REPORT_FOR_BODY_LEN, SESSION_UNKNOWN_BODY_LEN,
};

/// Fuzz the header, probe-body, receiver-report (for its own path or
/// another), NACK-body, fragment, session-unknown and
/// cookie-reply parsers and the MAC checks: no input may panic, every
/// accepted header, report, session-unknown body and fragment header
/// re-encodes to the same
/// bytes, every accepted NACK body re-encodes to the bytes it was parsed
/// from, and no cookie reply opens without the right key and mac1.
pub fn wire_parse(data: &[u8]) {
    if let Ok(h) = Header::new_checked(data) {
        let mut out = [0u8; HEADER_LEN];
        write_header(&mut out, h.packet_type(), &h.fields());
        assert_eq!(&out[..], &data[..HEADER_LEN]);
        let _ = ProbeBody::parse(h.body());
    }
    if let Ok(r) = ReportBody::parse(data) {
        let mut out = [0u8; REPORT_BODY_LEN];
        r.write(&mut out);
        assert_eq!(&out[..], &data[..REPORT_BODY_LEN]);
    }
    if let Ok(r) = ReportForBody::parse(data) {
        let mut out = [0u8; REPORT_FOR_BODY_LEN];
        r.write(&mut out);
        assert_eq!(&out[..], &data[..REPORT_FOR_BODY_LEN]);
    }
    if let Ok(n) = NackBody::parse(data) {
        let seqs: Vec<u64> = n.seqs().collect();
        let mut out = vec![0u8; 4 + 8 * seqs.len()];
        let len = NackBody::write(n.kind(), &seqs, &mut out).expect("parsed counts are writable");
        if data[2] == 1 || data[3] == 0 {
            assert_eq!(&out[..len], &data[..len]);
        }
    }
    if let Ok(f) = Fragment::parse(data) {
        let mut out = [0u8; FRAGMENT_HEADER_LEN];
        write_fragment_header(&mut out, usize::from(f.index), usize::from(f.count));
        assert_eq!(&out[..], &data[..FRAGMENT_HEADER_LEN]);
        assert!(Fragment::is_fragment(data));
        assert_eq!(f.piece, &data[FRAGMENT_HEADER_LEN..]);
    }
    if let Ok(b) = SessionUnknownBody::parse(data) {
        let mut out = [0u8; SESSION_UNKNOWN_BODY_LEN];
        b.write(&mut out);
        assert_eq!(&out[..], &data[..SESSION_UNKNOWN_BODY_LEN]);
    }
    let _ = mpt_core::wire::inner_traffic_class(data);
    let _ = cookie::cookie_reply_receiver(data);
    // The fuzzer cannot know the MAC keys' outputs: nothing opens.
    let keys = MacKeys::new(&PrivateKey::from_random([1; 32]).public());
    let _ = keys.check_mac1(data);
    if data.len() >= cookie::MAC_LEN {
        let (mac1, body) = data.split_at(cookie::MAC_LEN);
        let mut m = [0u8; cookie::MAC_LEN];
        m.copy_from_slice(mac1);
        assert!(keys.open_cookie_reply(body, &m).is_none());
    }
}
