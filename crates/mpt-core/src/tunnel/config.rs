//! What a [`super::Tunnel`] is made from: its paths, MTU, reorder window,
//! scheduler, security, recovery and QoS, as the daemon's configuration
//! (`mpt-config`) builds them; and the memory bounds of its send queue.
//!
//! Invariants: every field has the meaning `docs/config.md` gives its key;
//! nothing here is read after [`super::Tunnel::new`] except through the
//! tunnel (a reload builds a new config and applies what may change).

use crate::crypto::state::SecurityConfig;
use crate::path::PathConfig;
use crate::qos::QosConfig;
use crate::sched::Share;
use crate::Nanos;

/// Which reorder release policy to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseKind {
    /// Only `max_delay` and window overflow release gaps.
    Timeout,
    /// Also release once every live path has moved past a gap.
    PathFrontier,
}

/// Which scheduler places packets on paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedKind {
    /// Earliest expected arrival over paced paths, capacity learned
    /// ([`crate::sched::Ecf`], [`crate::pace::TargetDelay`]).
    Ecf,
    /// Static weights, unpaced ([`crate::sched::SmoothWrr`]).
    Wrr,
}

/// Largest number of packets in the send queue whatever its time bound
/// (tuning knob: a memory bound, 16 MiB of 1400-byte packets).
pub const QUEUE_MAX_PACKETS: usize = 12_000;
/// Largest number of bytes in the send queue whatever its time bound
/// (tuning knob: a memory bound; 27 ms of 10 Gbit/s, where 12,000 packets
/// of the tunnel MTU would be 137 MB; the time bound, `queue_ms` at the
/// paths' pacing rates, acts first below 2.7 Gbit/s).
pub const QUEUE_MAX_BYTES: usize = 32 << 20;

/// Configuration of the core tunnel.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    pub paths: Vec<PathConfig>,
    /// Largest inner packet accepted from the TUN.
    pub mtu: usize,
    /// Most inner bytes one datagram carries on the smallest path (its MTU
    /// less the outer headers and the tag); inner packets up to `mtu` that
    /// are larger travel as fragments (`fragment.rs`). `None`: `mtu`, so
    /// nothing is cut.
    pub datagram_body: Option<usize>,
    pub reorder_window: usize,
    pub reorder_max_delay: Nanos,
    pub release: ReleaseKind,
    /// Whether path weights share packets or bytes.
    pub share: Share,
    pub scheduler: SchedKind,
    /// Longest expected wait in the send queue (paced schedulers).
    pub queue_max: Nanos,
    /// Local push-back: how long of its paths' delivery rate a path
    /// socket may leave in the host's own queues (0: off, the sockets
    /// keep their large buffers; the I/O layer reads it,
    /// [`crate::tunnel::Tunnel::local_queue`]).
    pub local_queue: Nanos,
    /// `None`: plaintext (lab comparisons only).
    pub security: Option<SecurityConfig>,
    /// Seed for session indices and ephemeral keys (from the OS at start).
    pub seed: [u8; 32],
    /// Lower a path's weight while its packets get lost (see
    /// [`super::loss_weight_factor`]).
    pub adapt_to_loss: bool,
    /// Ask for lost data packets again and resend asked ones (see
    /// `recovery.rs`); both peers need it.
    pub recover: bool,
    /// Traffic classes (`None`: no QoS, one FIFO per path as before).
    pub qos: Option<QosConfig>,
    /// Lower the MSS of routed TCP SYNs that leave through the tunnel to
    /// what fits one datagram (`mss.rs`); `None`: never.
    pub mss_clamp: Option<crate::mss::MssClamp>,
    /// Forward error correction (`fec.rs`, `tunnel/fec.rs`): blocks of
    /// up to this many data packets per path, with repairs fixed or by
    /// the path's loss; `None`: off. Both peers need it.
    pub fec: Option<(usize, crate::fec::Repairs)>,
}
