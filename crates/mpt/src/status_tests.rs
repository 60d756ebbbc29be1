//! Tests of the verbose status view (`status.rs`).

use super::*;
use serde_json::json;

/// A path's status as a daemon would send it (only these fields).
fn path(v: Value) -> PathStatus {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_path_shows_its_weight_or_its_cap() {
    assert_eq!(
        share(&path(json!({"weight": 3, "sending": null}))),
        "weight 3  "
    );
    assert_eq!(
        share(&path(json!({"weight": 1, "sending": {"cap_mbps": null}}))),
        ""
    );
    assert_eq!(
        share(&path(json!({"weight": 1, "sending": {"cap_mbps": 5.0}}))),
        "cap 5 Mbit/s  "
    );
}

#[test]
fn one_way_delay_is_absolute_only_when_the_clocks_are_consistent() {
    let ok = json!({"owd_clocks": "consistent", "owd_min_ms": 10.0021, "rtt_min_ms": 20.1});
    assert_eq!(owd_note(&path(ok.clone())), "min 10.002 ms");
    let off = json!({"owd_clocks": "offset", "owd_min_ms": -3.0, "rtt_min_ms": 20.0});
    assert!(owd_note(&path(off.clone())).contains("clocks differ"));
    assert!(owd_note(&path(off.clone())).contains("RTT/2 = 10.000 ms"));
    assert_eq!(owd_note(&path(json!({}))), "no samples yet");
}

#[test]
fn the_fec_line_says_what_was_rebuilt_and_what_was_asked_for() {
    let f: mpt_core::tunnel::FecStats = serde_json::from_value(json!({
        "blocks": 10, "repairs_sent": 30, "repairs_received": 28, "rebuilt": 5,
        "unrecoverable": 1, "losses_deferred": 7, "nacks_saved": 5, "nacks_after_wait": 2
    }))
    .unwrap();
    assert_eq!(
        fec_line(&f),
        "fec: sent 30 repairs for 10 blocks; received 28, rebuilt 5 packets (1 blocks lost more than their repairs, 0 repairs inconsistent); 7 losses waited for repairs, 5 of them rebuilt in time, 2 asked for after"
    );
}
