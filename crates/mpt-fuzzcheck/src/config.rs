//! Text a user or a local client writes: the configuration file and the
//! control protocol's request line. No state; see the crate doc.

/// Fuzz the configuration loader: any text yields a config or errors,
/// never a panic.
pub fn config_parse(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mpt_config::Config::parse(text, std::path::Path::new("fuzz.toml"));
    }
}

/// Fuzz the control request parser (`mpt-control`): any line a local
/// client writes yields a request or an error, never a panic; a request
/// parsed survives its own line.
pub fn control_request(data: &[u8]) {
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(r) = mpt_control::Request::parse(line) {
            let again = mpt_control::Request::parse(&r.to_line());
            assert_eq!(again.as_ref(), Ok(&r), "{line}");
        }
    }
}
