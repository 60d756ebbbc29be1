//! Fuzz the header and probe-body parsers: no input may panic, and every
//! accepted header re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpt_core::wire::{write_header, Header, ProbeBody, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::new_checked(data) {
        let mut out = [0u8; HEADER_LEN];
        write_header(&mut out, h.packet_type(), &h.fields());
        assert_eq!(&out[..], &data[..HEADER_LEN]);
        let _ = ProbeBody::parse(h.body());
    }
    let _ = mpt_core::wire::inner_traffic_class(data);
});
