//! Fuzz the control request parser (`mpt-control`): any line a local
//! client writes yields a request or an error, never a panic; a request
//! parsed survives its own line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(r) = mpt_control::Request::parse(line) {
            let again = mpt_control::Request::parse(&r.to_line());
            assert_eq!(again.as_ref(), Ok(&r), "{line}");
        }
    }
});
