//! Emulation model of one link direction, in virtual time (sans-IO).
//!
//! Each frame that enters is either lost or scheduled for release at
//! `arrival + delay + jitter`. Loss is random (Bernoulli) or bursty
//! (Gilbert's two-state model: no loss in the good state, every packet lost
//! in the bad state; parameters derived from the mean loss rate π and mean
//! burst length b as r = 1/b, p = π·r/(1−π), so that the stationary loss
//! rate p/(p+r) equals π). Jitter is normal with standard deviation
//! `jitter_ms`, truncated so that no frame leaves before it arrived.
//!
//! `rate_mbit` serialises frames like a link of that capacity: each frame
//! starts when the previous one has left and takes `bytes · 8 / rate`
//! (its Ethernet frame's bytes, header included, no preamble or FCS), then
//! the delay and jitter apply. Unlike tbf there is no burst: back-to-back
//! frames leave exactly one transmission time apart, which is what
//! dispersion measurements of capacity need.
//!
//! `trace` replaces a fixed rate with a capacity trace in mahimahi's
//! format: frames wait in a drop-tail bottleneck queue for the trace's
//! delivery opportunities (`trace.rs` states exactly how), then the delay
//! and jitter apply.
//!
//! `duplicate` sends an exact second copy of a frame (a replay, as far as
//! the receiver can tell); `corrupt` flips one random bit in the UDP payload
//! of an IPv4/UDP frame and clears its UDP checksum, so the damaged datagram
//! reaches the application (the test of authenticated encryption) instead
//! of being discarded by the kernel.
//!
//! `wmm` models a Wi-Fi link with Wi-Fi Multimedia: frames whose IP DSCP
//! RFC 8325 maps to the voice access category (EF, VOICE-ADMIT, CS6, CS7)
//! are held in a FIFO of their own, so they neither wait for best-effort
//! frames that drew a longer delay nor, with `rate_mbit`, for the
//! best-effort backlog: a voice frame is sent as soon as it arrives
//! (strict priority; the best-effort frames after it start that much
//! later). Other frames, and every frame without `wmm`, share one FIFO.
//!
//! Invariants:
//! * without `reorder`, frames of one access category leave in arrival
//!   order (release times are made monotonic, as a real link's FIFO does);
//! * at most `limit` frames are held; a frame arriving at a full queue is
//!   dropped and counted (`dropped_queue`);
//! * every frame is counted exactly once: passed, lost or queue-dropped.

use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// Settings of one direction.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DirSpec {
    pub delay_ms: f64,
    pub jitter_ms: f64,
    /// Mean loss rate, 0..1.
    pub loss: f64,
    /// Mean loss burst length in packets (1 = independent losses).
    pub loss_burst: f64,
    /// Largest number of frames held.
    pub limit: usize,
    /// Let jitter reorder frames (netem's default) instead of keeping FIFO.
    pub reorder: bool,
    /// Probability of sending a frame twice.
    pub duplicate: f64,
    /// Probability of flipping one bit of an IPv4/UDP frame's payload.
    pub corrupt: f64,
    /// Link capacity in Mbit/s (0: unlimited; rate is then left to tbf).
    pub rate_mbit: f64,
    /// Voice frames (by DSCP) in a queue of their own, first (Wi-Fi WMM).
    pub wmm: bool,
    /// Mark ECN-capable frames CE when they wait longer than this in the
    /// rate queue, ms (0: never; `ecn.rs`).
    pub ecn_mark_ms: f64,
    /// A capacity trace (mahimahi format, `trace.rs`) instead of a fixed
    /// rate: the file's path.
    pub trace: Option<String>,
    /// Where in the trace the replay starts, ms.
    pub trace_start_ms: f64,
    /// The trace's drop-tail queue in bytes (0: `queue_ms` decides).
    pub queue_bytes: u64,
    /// The trace's queue in ms at its mean rate (0 with `queue_bytes` 0:
    /// only `limit` frames).
    pub queue_ms: f64,
    /// The parsed trace (read by [`DirSpec::load_trace`]).
    #[serde(skip)]
    pub trace_data: Option<std::sync::Arc<crate::trace::Trace>>,
}

impl Default for DirSpec {
    fn default() -> Self {
        Self {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            loss: 0.0,
            loss_burst: 1.0,
            limit: 10_000,
            reorder: false,
            duplicate: 0.0,
            corrupt: 0.0,
            rate_mbit: 0.0,
            wmm: false,
            ecn_mark_ms: 0.0,
            trace: None,
            trace_start_ms: 0.0,
            queue_bytes: 0,
            queue_ms: 0.0,
            trace_data: None,
        }
    }
}

impl DirSpec {
    /// Check ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let finite = |v: f64, n: &str| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{n} must be a finite number"))
            }
        };
        finite(self.delay_ms, "delay_ms")?;
        finite(self.jitter_ms, "jitter_ms")?;
        finite(self.loss, "loss")?;
        finite(self.loss_burst, "loss_burst")?;
        finite(self.rate_mbit, "rate_mbit")?;
        finite(self.ecn_mark_ms, "ecn_mark_ms")?;
        if !(0.0..=10_000.0).contains(&self.ecn_mark_ms) {
            return Err("ecn_mark_ms must be within 0..10000 (0: never mark)".into());
        }
        if !(0.0..=100_000.0).contains(&self.rate_mbit) {
            return Err("rate_mbit must be within 0..100000 (0: unlimited)".into());
        }
        if !(0.0..=60_000.0).contains(&self.delay_ms) {
            return Err("delay_ms must be within 0..60000".into());
        }
        if !(0.0..=60_000.0).contains(&self.jitter_ms) {
            return Err("jitter_ms must be within 0..60000".into());
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err("loss must be a fraction within 0..1 (0.02 = 2%)".into());
        }
        if self.loss_burst < 1.0 {
            return Err("loss_burst (mean burst length in packets) must be at least 1".into());
        }
        for (v, n) in [(self.duplicate, "duplicate"), (self.corrupt, "corrupt")] {
            if !(0.0..=1.0).contains(&v) || !v.is_finite() {
                return Err(format!("{n} must be a probability within 0..1"));
            }
        }
        if self.limit == 0 {
            return Err("limit must be at least 1 packet".into());
        }
        finite(self.trace_start_ms, "trace_start_ms")?;
        finite(self.queue_ms, "queue_ms")?;
        if self.trace_start_ms < 0.0 || self.queue_ms < 0.0 {
            return Err("trace_start_ms and queue_ms must not be negative".into());
        }
        if self.trace.is_some() && self.rate_mbit > 0.0 {
            return Err("trace and rate_mbit exclude each other: the trace is the rate".into());
        }
        Ok(())
    }

    /// Read and parse `trace` (relative to `base`); the message names the
    /// file and line.
    pub fn load_trace(&mut self, base: &std::path::Path) -> Result<(), String> {
        let Some(t) = &self.trace else {
            return Ok(());
        };
        let path = base.join(t);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("trace {}: cannot read: {e}", path.display()))?;
        let trace = crate::trace::Trace::parse(&text)
            .map_err(|e| format!("trace {}: {e}", path.display()))?;
        self.trace_data = Some(std::sync::Arc::new(trace));
        Ok(())
    }

    /// The trace's queue limit in bytes.
    fn queue_limit_bytes(&self) -> u64 {
        match (&self.trace_data, self.queue_bytes) {
            (_, b) if b > 0 => b,
            (Some(t), _) if self.queue_ms > 0.0 => ((t.mean_bps() / 8.0 * self.queue_ms / 1e3)
                as u64)
                .max(crate::trace::OPPORTUNITY_BYTES),
            _ => u64::MAX,
        }
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DirStats {
    pub received: u64,
    pub passed: u64,
    pub lost: u64,
    pub dropped_queue: u64,
    pub max_held: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames marked CE instead of waiting on (`ecn_mark_ms`).
    pub ecn_marked: u64,
    /// Sum of scheduled added delay of passed frames, ns.
    pub added_delay_ns_sum: u64,
    /// How late frames left after their release time (the emulator's own
    /// imprecision, from the `now` it polled with): sum and largest, ns.
    pub late_ns_sum: u64,
    pub late_ns_max: u64,
}

#[derive(Debug)]
struct Held {
    release: u64,
    order: u64,
    frame: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.release, self.order) == (o.release, o.order)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    // Reversed: BinaryHeap is a max-heap and we want the earliest release.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.release, o.order).cmp(&(self.release, self.order))
    }
}

/// Flip one bit (chosen by `r`) in the UDP payload of an Ethernet/IPv4/UDP
/// frame and clear the UDP checksum (optional in IPv4, RFC 768). Returns
/// whether the frame was such a frame with a payload.
pub fn corrupt_udp4(frame: &mut [u8], r: u64) -> bool {
    const ETH: usize = 14;
    if frame.len() < ETH + 20 + 8 || frame[12..14] != [0x08, 0x00] || frame[ETH + 9] != 17 {
        return false;
    }
    let ihl = usize::from(frame[ETH] & 0x0f) * 4;
    let udp = ETH + ihl;
    let payload = udp + 8;
    if ihl < 20 || frame.len() <= payload {
        return false;
    }
    let bits = (frame.len() - payload) as u64 * 8;
    let bit = r % bits;
    frame[payload + (bit / 8) as usize] ^= 1 << (bit % 8);
    frame[udp + 6] = 0;
    frame[udp + 7] = 0;
    true
}

/// DSCPs of the voice access category (RFC 8325 §4: EF and VOICE-ADMIT
/// map to UP 6; CS6 and CS7, network control, to UP 7; both are AC_VO).
const VOICE_DSCP: [u8; 4] = [46, 44, 48, 56];

/// Whether an Ethernet frame carries an IPv4 or IPv6 packet whose DSCP is
/// in the voice access category.
fn is_voice(frame: &[u8]) -> bool {
    let dscp = match (frame.get(12..14), frame.get(14), frame.get(15)) {
        (Some([0x08, 0x00]), _, Some(tos)) => tos >> 2,
        (Some([0x86, 0xdd]), Some(b0), Some(b1)) => (((b0 & 0x0f) << 4) | (b1 >> 4)) >> 2,
        _ => return false,
    };
    VOICE_DSCP.contains(&dscp)
}

/// Queue a frame in FIFO order: it leaves no earlier than the frame
/// before it (`last`, updated). Returns its release time.
fn fifo_push(
    q: &mut VecDeque<Held>,
    last: &mut u64,
    release: u64,
    order: u64,
    frame: Vec<u8>,
) -> u64 {
    let release = release.max(*last);
    *last = release;
    q.push_back(Held {
        release,
        order,
        frame,
    });
    release
}

/// One emulated direction.
pub struct Direction {
    spec: DirSpec,
    rng: Rng,
    bad: bool,
    p_enter_bad: f64,
    p_leave_bad: f64,
    fifo: VecDeque<Held>,
    heap: BinaryHeap<Held>,
    last_release: u64,
    /// The voice access category's FIFO and its last release (`wmm`).
    voice: VecDeque<Held>,
    last_voice: u64,
    /// When the emulated link finishes sending the last frame (rate), ns.
    link_free: u64,
    order: u64,
    /// The trace's bottleneck (`trace`), from [`Direction::start_at`].
    bottleneck: Option<crate::trace::Bottleneck>,
    pub stats: DirStats,
}

/// Gilbert-Elliott transition probabilities (enter bad, leave bad) for a
/// mean loss and mean burst length.
fn burst_model(spec: &DirSpec) -> (f64, f64) {
    if spec.loss_burst > 1.0 && spec.loss > 0.0 {
        let r = 1.0 / spec.loss_burst;
        (spec.loss * r / (1.0 - spec.loss), r)
    } else {
        (0.0, 1.0)
    }
}

impl Direction {
    /// Change delay, jitter, loss and the rest from now on (a lab event);
    /// frames already held keep their release times.
    pub fn set_spec(&mut self, spec: DirSpec) {
        (self.p_enter_bad, self.p_leave_bad) = burst_model(&spec);
        // A trace keeps replaying where it stands (its file is not read
        // again).
        let trace = self.spec.trace_data.take();
        self.spec = spec;
        if self.spec.trace.is_some() {
            self.spec.trace_data = trace;
        }
    }

    pub fn new(spec: DirSpec, seed: u64) -> Self {
        let (p, r) = burst_model(&spec);
        let mut d = Self {
            spec,
            rng: Rng::new(seed),
            bad: false,
            p_enter_bad: p,
            p_leave_bad: r,
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            last_release: 0,
            voice: VecDeque::new(),
            last_voice: 0,
            link_free: 0,
            order: 0,
            bottleneck: None,
            stats: DirStats::default(),
        };
        d.start_at(0);
        d
    }

    /// The emulator started at monotonic `t0` ns: a trace's replay starts
    /// there (at its `trace_start_ms`).
    pub fn start_at(&mut self, t0: u64) {
        self.bottleneck = self.spec.trace_data.as_ref().map(|t| {
            crate::trace::Bottleneck::new(
                std::sync::Arc::clone(t),
                t0,
                self.spec.trace_start_ms as u64,
                self.spec.queue_limit_bytes(),
            )
        });
    }

    /// Restart a trace's replay at `t0` (see [`crate::trace::Bottleneck::restart`]).
    pub fn restart_trace(&mut self, t0: u64) {
        if let Some(b) = self.bottleneck.as_mut() {
            b.restart(t0);
        }
    }

    /// Frames the trace's bottleneck has served by `now` go on to the
    /// delay stage.
    fn serve_bottleneck(&mut self, now: u64) {
        let Some(b) = self.bottleneck.as_mut() else {
            return;
        };
        let mut out = vec![];
        b.serve(now, |at, f| out.push((at, f)));
        for (at, frame) in out {
            let release = at + self.delay_ns();
            self.order += 1;
            let order = self.order;
            fifo_push(
                &mut self.fifo,
                &mut self.last_release,
                release,
                order,
                frame,
            );
        }
    }

    /// The delay stage's delay for one frame (with jitter), ns.
    fn delay_ns(&mut self) -> u64 {
        let mut delay = self.spec.delay_ms * 1e6;
        if self.spec.jitter_ms > 0.0 {
            delay += self.rng.normal() * self.spec.jitter_ms * 1e6;
        }
        delay.max(0.0) as u64
    }

    fn held(&self) -> usize {
        let bn = self
            .bottleneck
            .as_ref()
            .map_or(0, crate::trace::Bottleneck::len);
        self.fifo.len() + self.heap.len() + self.voice.len() + bn
    }

    fn is_lost(&mut self) -> bool {
        if self.spec.loss <= 0.0 {
            return false;
        }
        if self.spec.loss_burst <= 1.0 {
            return self.rng.chance(self.spec.loss);
        }
        // Gilbert: decide the state for this packet, then lose it if bad.
        if self.bad {
            if self.rng.chance(self.p_leave_bad) {
                self.bad = false;
            }
        } else if self.rng.chance(self.p_enter_bad) {
            self.bad = true;
        }
        self.bad
    }

    /// A frame arrived at `now` (ns).
    pub fn on_frame(&mut self, now: u64, mut frame: Vec<u8>) {
        self.stats.received += 1;
        if self.is_lost() {
            self.stats.lost += 1;
            return;
        }
        if self.spec.corrupt > 0.0 && self.rng.chance(self.spec.corrupt) {
            let r = self.rng.next_u64();
            if corrupt_udp4(&mut frame, r) {
                self.stats.corrupted += 1;
            }
        }
        if self.spec.duplicate > 0.0 && self.rng.chance(self.spec.duplicate) {
            self.stats.duplicated += 1;
            self.enqueue(now, frame.clone());
        }
        self.enqueue(now, frame);
    }

    fn enqueue(&mut self, now: u64, mut frame: Vec<u8>) {
        if self.held() >= self.spec.limit {
            self.stats.dropped_queue += 1;
            return;
        }
        if self.bottleneck.is_some() {
            self.serve_bottleneck(now);
            if let Some(b) = self.bottleneck.as_mut() {
                if !b.push(now, frame) {
                    self.stats.dropped_queue += 1;
                }
            }
            self.stats.max_held = self.stats.max_held.max(self.held() as u64);
            return;
        }
        let mut delay = self.spec.delay_ms * 1e6;
        if self.spec.jitter_ms > 0.0 {
            delay += self.rng.normal() * self.spec.jitter_ms * 1e6;
        }
        let voice = self.spec.wmm && is_voice(&frame);
        let mut sent = now;
        if self.spec.rate_mbit > 0.0 {
            // Transmission time in ns: bits / (Mbit/s · 1e6) · 1e9.
            let tx_ns = (frame.len() as f64 * 8.0 * 1e3 / self.spec.rate_mbit).round() as u64;
            if voice {
                // Ahead of the backlog, which then starts later.
                sent = now + tx_ns;
                self.link_free = self.link_free.max(now) + tx_ns;
            } else {
                sent = now.max(self.link_free) + tx_ns;
                self.link_free = sent;
            }
            let waits_ns = sent - tx_ns - now;
            if self.spec.ecn_mark_ms > 0.0
                && waits_ns as f64 > self.spec.ecn_mark_ms * 1e6
                && crate::ecn::mark_ce(&mut frame)
            {
                self.stats.ecn_marked += 1;
            }
        }
        let mut release = sent + delay.max(0.0) as u64;
        self.order += 1;
        let order = self.order;
        if voice {
            release = fifo_push(&mut self.voice, &mut self.last_voice, release, order, frame);
        } else if self.spec.reorder {
            self.heap.push(Held {
                release,
                order,
                frame,
            });
        } else {
            release = fifo_push(
                &mut self.fifo,
                &mut self.last_release,
                release,
                order,
                frame,
            );
        }
        self.stats.added_delay_ns_sum += release - now;
        self.stats.max_held = self.stats.max_held.max(self.held() as u64);
    }

    /// Earliest pending release time.
    pub fn next_release(&self) -> Option<u64> {
        [
            self.bottleneck
                .as_ref()
                .and_then(crate::trace::Bottleneck::next_service),
            self.voice.front().map(|h| h.release),
            self.fifo.front().map(|h| h.release),
            self.heap.peek().map(|h| h.release),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A frame due at `now`, if any.
    pub fn poll_release(&mut self, now: u64) -> Option<Vec<u8>> {
        self.serve_bottleneck(now);
        let h = if self.voice.front().is_some_and(|h| h.release <= now) {
            self.voice.pop_front()
        } else if self.fifo.front().is_some_and(|h| h.release <= now) {
            self.fifo.pop_front()
        } else if self.heap.peek().is_some_and(|h| h.release <= now) {
            self.heap.pop()
        } else {
            None
        }?;
        self.stats.passed += 1;
        let late = now - h.release;
        self.stats.late_ns_sum += late;
        self.stats.late_ns_max = self.stats.late_ns_max.max(late);
        Some(h.frame)
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
