//! Human-readable reports of [`Summary`] and [`StampReport`] (the JSON
//! form is their serde serialisation).
//!
//! Invariant: every figure in the JSON that a reader needs to judge a run
//! (counts, delay percentiles, jitter, reordering, capacity) appears in the
//! text too, with its unit; absent figures are written as "-".

use std::fmt::Write;

use crate::{StampReport, Summary};

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

/// The receiver's summary as a few lines of text.
pub fn summary_text(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "received {} of {} probes: lost {} ({:.3} %), {} duplicates, {} invalid",
        s.received,
        s.expected,
        s.lost,
        s.loss * 100.0,
        s.duplicates,
        s.invalid
    );
    let _ = writeln!(
        o,
        "one-way delay ms: min {} p50 {} mean {} p99 {} max {}",
        opt_ms(s.owd_min_ms),
        opt_ms(s.owd_p50_ms),
        opt_ms(s.owd_mean_ms),
        opt_ms(s.owd_p99_ms),
        opt_ms(s.owd_max_ms)
    );
    let st = &s.send_stamps;
    let _ = writeln!(
        o,
        "departures stamped by: kernel {}, user space {} ({} kernel stamps not believed)",
        st.kernel, st.user, st.rejected
    );
    let _ = writeln!(
        o,
        "jitter (RFC 3550) {:.3} ms; throughput {:.2} Mbit/s",
        s.jitter_ms, s.mbps
    );
    let r = &s.reordering;
    let _ = writeln!(
        o,
        "reordering (RFC 4737): {} packets ({:.3} %), extent max {} mean {:.2}, 3-reordered {}",
        r.reordered,
        r.ratio * 100.0,
        r.extent_max,
        r.extent_mean,
        r.n3_reordered
    );
    if let Some(c) = &s.capacity {
        let _ = writeln!(
            o,
            "capacity (dispersion, median of {} pairs in {} trains): {:.2} Mbit/s \
             (whole trains: median {:.2}, p10 {:.2}, p90 {:.2})",
            c.pairs, c.trains, c.mbps, c.train_mbps, c.p10_mbps, c.p90_mbps
        );
    }
    o
}

/// The stamping self-test as text.
pub fn stamp_text(r: &StampReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "clock: resolution {} ns (clock_getres), smallest step seen {} ns",
        r.clock_resolution_ns, r.clock_granularity_ns
    );
    let _ = writeln!(
        o,
        "{} back-to-back packets of {} bytes on the loopback:",
        r.packets, r.size
    );
    for (name, d) in [
        ("send -> kernel receive stamp", &r.kernel_latency),
        ("send -> user receive stamp  ", &r.user_latency),
    ] {
        let _ = writeln!(
            o,
            "  {name}: min {} p50 {} p99 {} ns, jitter: IQR {} ns, sd {:.0} ns",
            d.min_ns, d.p50_ns, d.p99_ns, d.iqr_ns, d.sd_ns
        );
    }
    let _ = writeln!(
        o,
        "  spacing of kernel stamps of consecutive packets: min {} p50 {} ns",
        r.kernel_spacing_min_ns, r.kernel_spacing_p50_ns
    );
    o
}
