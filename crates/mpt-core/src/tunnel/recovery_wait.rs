//! The receiver's wait for a resend: how long a gap asked for again is
//! held before it is given up ([`Recovery::wait`]), its backoff when
//! answers come after their gap was given up ([`BACKOFF_MAX`], RFC 6298
//! §5.5), the reorder buffer's hold that follows from it
//! ([`Recovery::hold`]), and the size of the packets arriving, which
//! spaces the answers to several gaps (`recovery_flow.rs`).
//!
//! Invariants: a gap is held at most [`RECOVERY_WAIT_MAX_NS`] from its
//! request, whatever the backoff, and the reorder buffer's timeout does
//! not give up a gap before its wait ([`Recovery::waits_below`]); the
//! backoff is a power of two from 1 to [`BACKOFF_MAX`], grows only on a
//! late answer and shrinks only with time; nothing here allocates.

use super::{Recovery, RECOVERY_WAIT_MAX_NS};
use crate::{Nanos, NANOS_PER_MS};

pub const WAIT_MIN: Nanos = 20 * NANOS_PER_MS;
pub const WAIT_NO_RTT: Nanos = 20 * NANOS_PER_MS;
/// The smoothing of the arriving packets' size: each packet moves it by
/// 2^-shift of the difference (tuning knob: 1/16, RFC 6298's gain for the
/// variance, follows a change of packet size within tens of packets).
pub const PACKET_BYTES_GAIN_SHIFT: u32 = 4;
/// The waits' backoff: an answer that comes after its gap was given up
/// doubles every wait, those of gaps still pending included, at most once
/// per [`BACKOFF_BUMP_GAP_NS`] and up to [`BACKOFF_MAX`] times (within
/// [`RECOVERY_WAIT_MAX_NS`]); it halves after [`BACKOFF_DECAY_NS`]
/// without one. RFC 6298 §5.5 backs its timeout off the same way, and
/// RACK widens its reordering window on the same evidence (RFC 8985
/// §6.2.1). Tuning knobs: when a fast path's start overshot, or its
/// queue was lost at a capacity drop, the answers to a hundred gaps left
/// at the rate the path was cut to and came up to three of the waits set
/// before any answer late; given up, each was a loss to the inner TCP.
pub const BACKOFF_MAX: u64 = 8;
/// The backoff before any evidence, as RFC 6298 §2.1 starts its timeout
/// high until the first samples (tuning knob: the first answers of a
/// start that overshot came up to three waits late, before any late one
/// could teach the backoff); it decays to 1 like any other.
pub const BACKOFF_START: u64 = 2;
pub const BACKOFF_BUMP_GAP_NS: Nanos = 20 * NANOS_PER_MS;
pub const BACKOFF_DECAY_NS: Nanos = 10_000 * NANOS_PER_MS;

impl Recovery {
    /// How long a gap is waited for: the request goes out on the fastest
    /// path and the answer may come back on the recovery path (the least
    /// lossy fast one, [`Tunnel::recovery_path`]), so a round trip of
    /// each, which leaves a margin of half of that; at least two round
    /// trips of the fastest and [`WAIT_MIN`], at most
    /// [`RECOVERY_WAIT_MAX_NS`].
    /// The answers' own timing raises it: the timeout of the delays they
    /// took (their RFC 6298 timeout, [`crate::rtt::SmoothedRtt`]), as a resend is paced on its path and waits
    /// in its bottleneck queue, which no round trip shows.
    pub fn wait(&self, best_rtt: Option<Nanos>, recovery_rtt: Option<Nanos>) -> Nanos {
        best_rtt
            .map_or(WAIT_NO_RTT, |r| {
                (2 * r).max(r + recovery_rtt.unwrap_or(r)).max(WAIT_MIN)
            })
            .max(self.resend_delay.timeout().unwrap_or(0))
            .min(RECOVERY_WAIT_MAX_NS)
    }

    /// How long the reorder buffer may hold a packet with recovery on: a
    /// gap is asked for at most `max_delay` after the first later packet
    /// arrived (the release policy gives it up by then), and its answer
    /// is waited for ([`Recovery::wait`]), so the sum. Before, the hold was
    /// `max_delay` alone: on round trips over 50 ms every gap was given
    /// up before its resend could come, and the inner TCP saw the loss.
    pub fn hold(
        &self,
        best_rtt: Option<Nanos>,
        recovery_rtt: Option<Nanos>,
        max_delay: Nanos,
    ) -> Nanos {
        max_delay + self.backed_off(self.wait(best_rtt, recovery_rtt))
    }

    /// `wait` times the backoff now, within [`RECOVERY_WAIT_MAX_NS`].
    fn backed_off(&self, wait: Nanos) -> Nanos {
        wait.saturating_mul(self.backoff).min(RECOVERY_WAIT_MAX_NS)
    }

    /// When a pending gap (`start`, `wait`, `cap` as in `pending`) is
    /// given up: its wait backed off, from its start, within its cap.
    pub(super) fn deadline_of(&self, start: Nanos, wait: Nanos, cap: Nanos) -> Nanos {
        start.saturating_add(self.backed_off(wait)).min(cap)
    }

    /// Receiver: a data packet of `len` inner bytes arrived
    /// ([`Recovery::packet_bytes`]).
    pub fn on_packet_len(&mut self, len: usize) {
        let len = len as u64;
        self.packet_bytes = if self.packet_bytes == 0 {
            len
        } else {
            let p = self.packet_bytes;
            (p - (p >> PACKET_BYTES_GAIN_SHIFT) + (len >> PACKET_BYTES_GAIN_SHIFT)).max(1)
        };
    }

    /// Receiver: the answer to a gap given up came after all: back the
    /// waits off ([`BACKOFF_MAX`]). Returns whether they grew.
    pub fn on_late_answer(&mut self, now: Nanos) -> bool {
        if self.backoff >= BACKOFF_MAX || now < self.backoff_at.saturating_add(BACKOFF_BUMP_GAP_NS)
        {
            return false;
        }
        self.backoff *= 2;
        self.backoff_at = now;
        self.stats.wait_backoff = self.backoff;
        true
    }

    /// Receiver: halve the backoff after [`BACKOFF_DECAY_NS`] without a
    /// late answer (with the timers).
    pub fn decay_backoff(&mut self, now: Nanos) {
        if self.backoff_at == 0 {
            // The start's backoff counts from the first report.
            self.backoff_at = now;
        }
        if self.backoff > 1 && now >= self.backoff_at.saturating_add(BACKOFF_DECAY_NS) {
            self.backoff /= 2;
            self.backoff_at = now;
            self.stats.wait_backoff = self.backoff;
        }
    }

    /// Earliest deadline of a pending gap.
    pub fn deadline(&self) -> Option<Nanos> {
        self.pending
            .front()
            .map(|p| self.deadline_of(p.1, p.2, p.3))
    }

    /// The latest deadline of the gaps at or above `next` and below
    /// `seq` still waited for: the reorder buffer's timeout through `seq`
    /// must not give them up first. The answers to many gaps asked at
    /// once wait behind each other (`recovery_flow.rs`), so the last of
    /// them may be due after the buffer's hold: in a sweep case with a
    /// 9 Mbit/s recovery path, 21 gaps asked at a start that overshot
    /// were released by the buffer's timeout while still waited for, and
    /// all 21 answers came after (each a loss to the inner TCP).
    /// Pending gaps are in order of sequence and of start, so the first
    /// and the last below `seq` bound the rest.
    pub fn waits_below(&self, next: u64, seq: u64) -> Option<Nanos> {
        let lo = self.pending.partition_point(|p| p.0 < next);
        let hi = self.pending.partition_point(|p| p.0 < seq);
        let first = self.pending.get(lo).filter(|_| lo < hi)?;
        let last = self.pending.get(hi - 1)?;
        let d = |p: &(u64, Nanos, Nanos, Nanos)| self.deadline_of(p.1, p.2, p.3);
        Some(d(first).max(d(last)))
    }
}
