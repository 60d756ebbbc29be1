//! Path NACKs (wire version 8): loss recovery that starts from the path a
//! packet was lost on, one path round trip after the loss, instead of
//! after the release policy has proven a tunnel-wide gap lost.
//!
//! Every packet carries its path's sequence number, and a path is FIFO, so
//! the arrival of path sequence `n` after `m < n - 1` shows `m + 1 .. n`
//! lost on that path at once. The receiver cannot tell which tunnel
//! sequence numbers those were (the sender chose the path), but the sender
//! can: it keeps, per path, the tunnel sequence number each recent path
//! sequence number carried ([`SentByPath`]). So the receiver names the
//! lost path sequence numbers ([`crate::wire::NackKind::Path`]) and the
//! sender resends the data they carried from its ring, as for a
//! tunnel-sequence NACK (`recovery.rs`).
//!
//! Why: the release policy proves a gap lost only once every live path
//! has delivered something later, or its lateness has passed — the
//! slowest path's delay above the fastest (55 ms on an 18 ms + 73 ms
//! pair) plus a margin. Its request and the answer then take another
//! round trip, which together overrun the reorder buffer's `max_delay`,
//! and the inner TCP sees the loss after all. A path NACK leaves one
//! round trip of the lossy path after the next arrival on it.
//!
//! Invariants:
//! * an entry is consumed when its data is queued for resending, so the
//!   copies of one path NACK (sent on two paths) resend once;
//! * a path sequence number that carried no data (a probe, a report), or
//!   no longer in the map ([`SENT_MAP_ENTRIES`] per path), is counted and
//!   ignored;
//! * a gap of more than [`PATH_LOSS_MAX`] packets (an outage) is left to
//!   the release policy and tunnel-sequence NACKs;
//! * memory: the map is allocated per path on its first data packet, and
//!   only with recovery on.

use super::Tunnel;
use crate::{Nanos, PathId};

/// Path sequence numbers remembered per path (tuning knob: 8192 datagrams
/// are 90 ms of a 1 Gbit/s path, beyond a NACK's round trip; 128 KiB).
pub const SENT_MAP_ENTRIES: usize = 8192;
/// Largest run of path losses asked for by path sequence number (tuning
/// knob: a longer run is an outage, whose data the policy resends).
pub const PATH_LOSS_MAX: u64 = 32;
/// Most packets sent again when a path stalls (tuning knob: the tail a
/// cwnd-limited inner TCP waits for; an inner ACK stream's newest ACKs).
pub const STALL_RESEND_MAX: u16 = 32;

const NOTHING: u64 = u64::MAX;

/// Sender: per own path, the tunnel sequence number (of a data packet or
/// piece) that each recent path sequence number carried.
#[derive(Default)]
pub(super) struct SentByPath {
    maps: Vec<Box<[(u32, u64)]>>,
}

impl SentByPath {
    /// Data `tunnel_seq` left on `path` as path sequence `path_seq`.
    pub fn on_sent(&mut self, path: PathId, path_seq: u32, tunnel_seq: u64) {
        let p = usize::from(path);
        if self.maps.len() <= p {
            self.maps.resize_with(p + 1, || Box::new([]));
        }
        if self.maps[p].is_empty() {
            self.maps[p] = vec![(0u32, NOTHING); SENT_MAP_ENTRIES].into_boxed_slice();
        }
        self.maps[p][path_seq as usize % SENT_MAP_ENTRIES] = (path_seq, tunnel_seq);
    }

    /// The tunnel sequence number that path sequence `low16` (its low 16
    /// bits, widened to the latest number at or below `last_sent`) carried
    /// on `path`, consumed; `None` if it carried none or is forgotten.
    pub fn take(&mut self, path: PathId, low16: u16, last_sent: u32) -> Option<u64> {
        let back = u32::from((last_sent as u16).wrapping_sub(low16));
        let full = last_sent.wrapping_sub(back);
        let map = self.maps.get_mut(usize::from(path))?;
        let e = map.get_mut(full as usize % SENT_MAP_ENTRIES)?;
        if e.0 != full || e.1 == NOTHING {
            return None;
        }
        Some(std::mem::replace(&mut e.1, NOTHING))
    }
}

impl Tunnel {
    /// Path `peer_path` of the peer (its own id), our `pid`, showed
    /// `count` packets lost from path sequence `first` on: ask for them by
    /// path sequence, or, where the path's repairs arrive, once they had
    /// their chance to rebuild them (`fec.rs`).
    pub(super) fn recovery_on_path_loss(
        &mut self,
        now: Nanos,
        peer_path: u8,
        pid: PathId,
        first: u64,
        count: u64,
    ) {
        let Some(r) = self.recovery.as_mut() else {
            return;
        };
        if count > PATH_LOSS_MAX {
            r.stats.path_gaps_too_long += 1;
            return;
        }
        for k in 0..count {
            let seq = (first + k) as u16;
            if let Some(f) = self.fec.as_mut().filter(|f| f.defers(now, pid)) {
                if f.defer(now, peer_path, pid, seq) {
                    continue;
                }
            }
            self.recovery_ask_path(peer_path, seq);
        }
    }

    /// Ask for path sequence `seq` of the peer's path `peer_path`.
    pub(super) fn recovery_ask_path(&mut self, peer_path: u8, seq: u16) {
        let Some(r) = self.recovery.as_mut() else {
            return;
        };
        if r.path_nack_out.len() >= super::recovery::MAX_PENDING {
            r.stats.pending_full += 1;
            return;
        }
        r.path_nack_out.push_back((peer_path, seq));
        r.stats.path_losses_requested += 1;
    }

    /// Path `pid` stalled or went down (`path/stall.rs`): send again, on
    /// the recovery path (usable, not stalled), the newest data it carried
    /// that no report covered (at most [`STALL_RESEND_MAX`]); nothing if
    /// no other path qualifies. Its packets may only be waiting in a
    /// link's queue: the receiver drops the second copy.
    pub(super) fn resend_stalled(&mut self, now: Nanos, pid: PathId) {
        if self.paths[usize::from(pid)].tx_packets == 0 || !self.fresh_carrier_besides(Some(pid)) {
            return;
        }
        let Some(r) = self.recovery.as_mut() else {
            return;
        };
        let p = &self.paths[usize::from(pid)];
        let last = p.tx_seq.wrapping_sub(1);
        let body_max = self.frag.body_max;
        for low16 in p.uncovered(STALL_RESEND_MAX) {
            if let Some(seq) = r.sent.take(pid, low16, last) {
                r.resend_stalled(now, seq, body_max);
            }
        }
    }

    /// A data packet or piece `tunnel_seq` leaves on `path` as path
    /// sequence `path_seq`.
    pub(super) fn recovery_on_sent(&mut self, path: PathId, path_seq: u32, tunnel_seq: u64) {
        if let Some(r) = self.recovery.as_mut() {
            r.sent.on_sent(path, path_seq, tunnel_seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_sequence_maps_back_to_its_data_once() {
        let mut m = SentByPath::default();
        // Path 1 carried data 100..110 as path sequences 65530..65540
        // (across the 16-bit wrap); 65535 was a probe.
        for (k, ps) in (65_530u32..65_540).enumerate() {
            if ps != 65_535 {
                m.on_sent(1, ps, 100 + k as u64);
            }
        }
        let last = 65_539;
        assert_eq!(m.take(1, 65_532u32 as u16, last), Some(102));
        assert_eq!(m.take(1, 65_532u32 as u16, last), None, "consumed");
        assert_eq!(m.take(1, 65_535u32 as u16, last), None, "a probe");
        assert_eq!(
            m.take(1, 65_537u32 as u16, last),
            Some(107),
            "after the wrap"
        );
        assert_eq!(m.take(0, 1, last), None, "no such path");
        // Overwritten after SENT_MAP_ENTRIES more packets.
        for ps in 65_540u32..65_540 + SENT_MAP_ENTRIES as u32 {
            m.on_sent(1, ps, 0);
        }
        assert_eq!(
            m.take(1, 65_538u32 as u16, 65_539 + SENT_MAP_ENTRIES as u32),
            None
        );
    }
}
