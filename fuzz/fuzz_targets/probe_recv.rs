//! Fuzz mpt-probe's receiver (`StreamStats`, with the probe header parser
//! and the two-step send stamps): any sequence of datagrams, each
//! prefixed here by one length byte, at any arrival times, is counted
//! (received, duplicate or invalid), never a panic; every probe received
//! gets exactly one send time, the kernel's or its user stamp.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpt_probe::StreamStats;

fuzz_target!(|data: &[u8]| {
    let mut s = StreamStats::default();
    let mut rest = data;
    let mut datagrams = 0u64;
    let mut arrival = 1_000_000u64;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (d, more) = tail.split_at(n);
        arrival = arrival.wrapping_add(u64::from(len) * 997);
        s.on_datagram(d, arrival);
        datagrams += 1;
        rest = more;
    }
    let m = s.summary(None);
    assert_eq!(m.received + m.duplicates + m.invalid, datagrams);
    assert_eq!(m.send_stamps.kernel + m.send_stamps.user, m.received);
});
