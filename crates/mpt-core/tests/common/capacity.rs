//! The capacity simulations' shared pieces (`sim_capacity.rs` and its
//! benches, `sim_capacity_bench.rs`): what side 0 offers, the lab sweep's
//! links, and one TCP-like flow's goodput.
//!
//! Invariants: everything is virtual time; a seed fixes every draw.

use mpt_core::fec::Repairs;

use super::tcp::{offer_packet, tcp_flow};
use super::*;

/// The inner packets' size, bytes.
pub const PKT: usize = 1400;

/// Side 0 offers inner packet `idx` at `now`.
pub fn offer(sim: &mut Sim, now: Nanos, idx: u64) {
    offer_packet(sim, now, idx, PKT);
}

/// A link of the lab's sweep: (rate Mbit/s, delay ms, jitter's standard
/// deviation ms, loss), its jitter uniform over 3.5 standard deviations
/// (the lab's is normal: the same spread), a 50 ms buffer.
pub fn sweep_link(rate_mbit: f64, delay_ms: f64, sd_ms: f64, loss: f64) -> Link {
    Link {
        delay: (delay_ms * MS as f64) as Nanos,
        jitter: (sd_ms * 3.5 * MS as f64) as Nanos,
        loss,
        up: true,
        rate_mbit,
        queue_ns: 50 * MS,
    }
}

/// One TCP-like flow (Reno slow start, multiplicative decrease by 0.7,
/// losses seen as gaps in what the tunnel delivers, acknowledgements back
/// after `ack_ms`) over `links` for `secs`, the links' random draws from
/// `seed`: its goodput over the last `secs - 2` s, Mbit/s.
pub fn tcp_goodput_seeded(links: Vec<Link>, ack_ms: u64, secs: u64, seed: u64) -> f64 {
    let n = links.len();
    let cfg = |side| {
        TestConfig::new(side, n)
            .ecf()
            .recover(true)
            .adapt_to_loss(false)
            .with(|c| {
                c.mtu = 1500;
                c.reorder_window = 4096;
                c.reorder_max_delay = 100 * MS;
                // Forward error correction as the daemon has it (blocks of
                // 32, repairs by the path's loss); SIM_FEC="k,m" (m a
                // number or "loss") or "off" changes it (a bench knob).
                c.fec = match std::env::var("SIM_FEC").ok().as_deref() {
                    None => Some((32, Repairs::ByLoss)),
                    Some("off") => None,
                    Some(v) => v.split_once(',').and_then(|(k, m)| {
                        let m = match m {
                            "loss" => Repairs::ByLoss,
                            m => Repairs::Fixed(m.parse().ok()?),
                        };
                        Some((k.parse().ok()?, m))
                    }),
                };
            })
            .tunnel()
    };
    let mut sim = Sim::with_tunnels(links, [cfg(0), cfg(1)], seed);
    tcp_flow(&mut sim, PKT, ack_ms, secs)
}
