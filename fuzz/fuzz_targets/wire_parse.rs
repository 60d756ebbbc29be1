//! Fuzz the header, probe-body and NACK-body parsers: no input may panic,
//! every accepted header re-encodes to the same bytes, and every accepted
//! NACK body re-encodes to the bytes it was parsed from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpt_core::wire::{write_header, Header, NackBody, ProbeBody, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::new_checked(data) {
        let mut out = [0u8; HEADER_LEN];
        write_header(&mut out, h.packet_type(), &h.fields());
        assert_eq!(&out[..], &data[..HEADER_LEN]);
        let _ = ProbeBody::parse(h.body());
    }
    if let Ok(n) = NackBody::parse(data) {
        let seqs: Vec<u64> = n.seqs().collect();
        let mut out = vec![0u8; 4 + 8 * seqs.len()];
        let len = NackBody::write(&seqs, &mut out).expect("parsed counts are writable");
        if data[2..4] == [0, 0] {
            assert_eq!(&out[..len], &data[..len]);
        }
    }
    let _ = mpt_core::wire::inner_traffic_class(data);
});
