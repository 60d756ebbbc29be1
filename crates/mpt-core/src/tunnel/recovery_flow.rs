//! The tunnel's side of loss recovery (`recovery.rs` holds the ring of
//! copies and the gaps asked for): the ring sized from the paths' round
//! trips, which path carries requests and resends, how a gap's release
//! waits for its answer, and the requests and resends the tunnel sends
//! ([`Tunnel::poll_recovery`], one of the control packets of
//! `output.rs`).
//!
//! Invariants: those of `recovery.rs`; nothing here holds packets of its
//! own; with path-aware sending, resends leave only while the recovery
//! path has pacing budget and are charged to it, like its data (ahead of
//! the data waiting in its queue), and their deadline is when it next has
//! budget. A resend's second copy (on the least lossy path) leaves only
//! at once, within that path's budget, or not at all: it never waits.

use super::*;

impl Tunnel {
    /// Recovery counters; `None` when recovery is off.
    pub fn recovery_stats(&self) -> Option<&RecoveryStats> {
        self.recovery.as_ref().map(|r| &r.stats)
    }

    /// How long the ring keeps copies, for the usable paths' round trips
    /// now ([`keep_for`]), and the reorder buffer's hold for the waits
    /// (backed off, [`Recovery::on_late_answer`]; the backoff decays
    /// here); called with every rate report and when the waits back off.
    pub(in crate::tunnel) fn size_recovery_ring(&mut self, now: Nanos) {
        if self.recovery.is_none() {
            return;
        }
        let rtt_max = (0..self.paths.len())
            .filter(|i| self.paths[*i].usable)
            .map(|i| self.paths[i].srtt().unwrap_or(WAIT_NO_RTT))
            .max()
            .unwrap_or(WAIT_NO_RTT);
        let (best_rtt, recovery_rtt) = self.recovery_rtts();
        if let Some(r) = self.recovery.as_mut() {
            r.decay_backoff(now);
        }
        let Some(hold) = self
            .recovery
            .as_ref()
            .map(|r| r.hold(best_rtt, recovery_rtt, self.reorder_max_delay))
        else {
            return;
        };
        self.reorder.set_max_delay(hold);
        let keep = keep_for(self.queue_max, rtt_max, hold);
        if let Some(r) = self.recovery.as_mut() {
            r.set_keep(keep);
        }
    }

    /// How far apart the answers to several gaps arrive: one packet of
    /// the size data packets arrive at ([`Recovery::packet_bytes`]; as
    /// many datagrams as the tunnel MTU cuts it into, one at least), at
    /// the rate the recovery path delivers to us (at least
    /// [`ANSWER_RATE_MIN_BPS`]; 0 without one). Over a 4 Mbit/s path the
    /// answers to 14 gaps asked at once arrived 3 ms apart, the last 42 ms
    /// after the first, and the wait for each from its request ran out
    /// for most of them. (Counted as one datagram each, the answers to
    /// the 11 KB packets a host's TCP sends at the default MTU, eight
    /// datagrams each, were taken to come eight times sooner than they
    /// can.)
    fn answer_spacing(&self, now: Nanos) -> Nanos {
        let Some(p) = self.recovery_path() else {
            return 0;
        };
        let rate = self.paths[usize::from(p)]
            .rx_estimates(now)
            .rate_bps
            .unwrap_or(0)
            .max(ANSWER_RATE_MIN_BPS);
        let overhead = wire::HEADER_LEN + wire::TAG_RESERVE_LEN + wire::UDP_HEADER_LEN;
        let body = self.datagram_body_max().max(1) as u64;
        let len = self
            .recovery
            .as_ref()
            .map_or(0, |r| r.packet_bytes)
            .max(body);
        let pieces = len.div_ceil(body);
        let bits = (len + pieces * (overhead + wire::IPV4_HEADER_LEN) as u64) * 8;
        bits * 1_000 * crate::NANOS_PER_MS / rate
    }

    /// The lowest round trip of the usable paths, and the recovery path's.
    fn recovery_rtts(&self) -> (Option<Nanos>, Option<Nanos>) {
        let best_rtt = (0..self.paths.len())
            .filter(|i| self.paths[*i].usable)
            .filter_map(|i| self.paths[i].srtt())
            .min();
        let recovery_rtt = self
            .recovery_path()
            .and_then(|p| self.paths[usize::from(p)].srtt());
        (best_rtt, recovery_rtt)
    }

    /// Path `i` can carry what another path owes (resends, reports): it is
    /// usable and has a peer address.
    pub(in crate::tunnel) fn can_carry(&self, i: usize) -> bool {
        self.paths[i].usable && self.paths[i].remote.is_some()
    }

    /// Some path other than `except` can carry and has not stalled: the
    /// one rule by which resends and reports leave a stalled path
    /// (`path/stall.rs`); while none has, a stalled path is as good as
    /// any.
    pub(in crate::tunnel) fn fresh_carrier_besides(&self, except: Option<PathId>) -> bool {
        (0..self.paths.len()).any(|i| {
            Some(i) != except.map(usize::from) && self.can_carry(i) && !self.paths[i].stall.stalled
        })
    }

    /// The paths that may carry recovery traffic: those that can carry,
    /// less a stalled one while another is fresh (`path/stall.rs`).
    fn carriers(&self) -> impl Iterator<Item = usize> + '_ {
        let fresh = self.fresh_carrier_besides(None);
        (0..self.paths.len())
            .filter(move |&i| self.can_carry(i) && !(fresh && self.paths[i].stall.stalled))
    }

    /// The path to use for recovery traffic: the lowest RTT among the
    /// usable paths whose recent loss is within [`RECOVERY_LOSS_SLACK`] of
    /// the least. A request and its answer must arrive within the
    /// receiver's wait, two round trips of the fastest path
    /// ([`Recovery::wait`]): the least lossy path alone may be the slowest
    /// by far (a loss-free 68 ms path beside a 19 ms one losing 0.3 %), and
    /// an answer that comes after the wait is a loss to the inner TCP all
    /// the same.
    /// A stalled path (`path/stall.rs`) carries none while another can.
    pub(in crate::tunnel) fn recovery_path(&self) -> Option<PathId> {
        let least = self
            .carriers()
            .map(|i| self.paths[i].tx_loss_recent())
            .min_by(f64::total_cmp)?;
        self.carriers()
            .filter(|i| self.paths[*i].tx_loss_recent() <= least + RECOVERY_LOSS_SLACK)
            .min_by_key(|i| self.paths[*i].srtt().unwrap_or(Nanos::MAX))
            .map(|i| i as PathId)
    }

    /// The path a resend's second copy takes: the least lossy of those
    /// that can carry (lowest round trip among equals), leaving out a
    /// stalled one while another is fresh. A resend goes on the recovery
    /// path, the fastest within [`RECOVERY_LOSS_SLACK`] of the least
    /// loss: on a 13 Mbit/s path losing 1.6 % beside a clean one, resends
    /// were lost again, and each such loss cost the inner TCP a timeout.
    fn safest_path(&self) -> Option<PathId> {
        self.carriers()
            .min_by(|&a, &b| {
                let (pa, pb) = (&self.paths[a], &self.paths[b]);
                pa.tx_loss_recent().total_cmp(&pb.tx_loss_recent()).then(
                    pa.srtt()
                        .unwrap_or(Nanos::MAX)
                        .cmp(&pb.srtt().unwrap_or(Nanos::MAX)),
                )
            })
            .map(|i| i as PathId)
    }

    /// Where a resend on `path` is copied: the least lossy path, when
    /// `path` loses markedly more ([`RESEND_COPY_LOSS_RATIO`] times, and
    /// [`RESEND_COPY_LOSS_MIN`] more); `None`: no copy.
    fn copy_path(&self, path: PathId) -> Option<PathId> {
        let safe = self.safest_path().filter(|&p| p != path)?;
        let lossy = self.paths[usize::from(path)].tx_loss_recent();
        let least = self.paths[usize::from(safe)].tx_loss_recent();
        (lossy >= least * RESEND_COPY_LOSS_RATIO && lossy >= least + RESEND_COPY_LOSS_MIN)
            .then_some(safe)
    }

    /// The second copy of the last resend, on the least lossy path, if
    /// that path has pacing budget now (a copy never delays data: without
    /// budget it is dropped and counted).
    fn poll_resend_copy(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let r = self.recovery.as_mut()?;
        let c = r.resend_copy.take()?;
        let len = r.resend_copy_body.len();
        let usable = self
            .paths
            .get(usize::from(c.path))
            .is_some_and(|p| p.usable);
        if !usable || buf.len() < HEADER_LEN + len + TAG_LEN {
            return None;
        }
        if !self.pacing_allows(c.path, now) {
            let r = self.recovery.as_mut()?;
            r.stats.resend_copies_skipped += 1;
            return None;
        }
        let r = self.recovery.as_mut()?;
        buf[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&r.resend_copy_body);
        r.stats.resend_copies += 1;
        let t = self.control_transmit(now, c.path, c.ty, c.class, c.seq, buf, len)?;
        self.pacing_charge(c.path, t.len);
        Some(t)
    }

    /// Whether `path`'s pacer lets a datagram leave now (always, when
    /// sending is not paced). Resends and their copies ask this; data
    /// asks with its queues in mind (`send.rs`).
    pub(in crate::tunnel) fn pacing_allows(&mut self, path: PathId, now: Nanos) -> bool {
        if !self.paced {
            return true;
        }
        let s = &mut self.paths[usize::from(path)].sender;
        s.refill(now);
        s.has_budget()
    }

    /// Charge `len` bytes sent on `path` to its pacer.
    pub(in crate::tunnel) fn pacing_charge(&mut self, path: PathId, len: usize) {
        if self.paced {
            self.paths[usize::from(path)].sender.on_send(len);
        }
    }

    /// The release floor after recovery: gaps below the policy's `floor`
    /// are asked for once and held until answered or their wait ran out.
    pub(in crate::tunnel) fn recovery_floor(&mut self, now: Nanos, floor: u64) -> u64 {
        let Some(r) = self.recovery.as_ref() else {
            return floor;
        };
        let next = self.reorder.next_seq();
        let from = r.considered_upto.max(next);
        // The wait only matters for new gaps: no path scan otherwise.
        let (wait, spacing) = if floor > from {
            let (best_rtt, recovery_rtt) = self.recovery_rtts();
            (r.wait(best_rtt, recovery_rtt), self.answer_spacing(now))
        } else {
            (0, 0)
        };
        let Some(r) = self.recovery.as_mut() else {
            return floor;
        };
        while r.pending.front().is_some_and(|p| p.0 < next) {
            r.pending.pop_front();
        }
        if floor > from {
            r.scratch.clear();
            let room = MAX_PENDING - r.pending.len();
            self.reorder.missing(from, floor, room, &mut r.scratch);
            for &seq in &r.scratch {
                if r.asked.len() == ASKED_REMEMBERED {
                    r.asked.pop_front();
                }
                // The answers to the gaps still waiting leave the peer
                // before this one's, one after another at the recovery
                // path's rate: its wait starts behind them.
                let behind = (r.pending.len() as Nanos).saturating_mul(spacing);
                let start = now + behind.min(RECOVERY_WAIT_MAX_NS);
                r.asked.push_back((seq, start));
                r.pending
                    .push_back((seq, start, wait, now + RECOVERY_WAIT_MAX_NS));
                r.nack_out.push_back(seq);
                r.stats.gaps_requested += 1;
            }
            if r.scratch.len() == room && room < (floor - from) as usize {
                r.stats.pending_full += 1;
            }
            r.considered_upto = floor;
        }
        // Hold back from the first gap still within its wait.
        let mut hold = floor;
        while let Some(&(seq, start, wait, cap)) = r.pending.front() {
            if r.deadline_of(start, wait, cap) > now {
                hold = hold.min(seq);
                break;
            }
            r.pending.pop_front();
            r.stats.gave_up += 1;
        }
        r.held_at = (hold < floor).then_some(now);
        hold
    }

    /// When the release may run again if recovery held back part of what
    /// the policy gave up at or after `due` (the policy's deadline): at
    /// recovery's own deadline, the wait of the first gap held. `None`:
    /// recovery holds nothing of it, the policy's deadline stands. Without
    /// this the policy's deadline stayed in the past until the answer or
    /// the wait's end, and the event loop ran its timers without pause
    /// (up to `max_delay` of a core per gap: found in the simulation).
    pub(in crate::tunnel) fn recovery_defers(&self, due: Nanos) -> Option<Nanos> {
        let r = self.recovery.as_ref()?;
        r.held_at.filter(|&at| due <= at)?;
        r.deadline()
    }

    /// Was data packet `seq` asked for again (recently)?
    pub(in crate::tunnel) fn recovery_asked(&self, seq: u64) -> bool {
        self.recovery
            .as_ref()
            .is_some_and(|r| r.asked.binary_search_by_key(&seq, |a| a.0).is_ok())
    }

    /// The peer restarted its sequence numbers: forget the gaps.
    pub(in crate::tunnel) fn recovery_reset(&mut self) {
        if let Some(r) = self.recovery.as_mut() {
            r.pending.clear();
            r.asked.clear();
            r.nack_out.clear();
            r.considered_upto = 0;
            r.held_at = None;
        }
    }

    /// A data packet `seq` arrived: was it a gap we asked for? Its first
    /// arrival after the request, within the wait or after it, times the
    /// answer (`Recovery::resend_delay`).
    pub(in crate::tunnel) fn recovery_on_data(&mut self, now: Nanos, seq: u64, len: usize) {
        let mut backed_off = false;
        if let Some(r) = self.recovery.as_mut() {
            r.on_packet_len(len);
            // `pending` and `asked` are ascending by sequence number.
            let was_pending = match r.pending.binary_search_by_key(&seq, |p| p.0) {
                Ok(i) => {
                    r.pending.remove(i);
                    r.stats.recovered += 1;
                    true
                }
                Err(_) => false,
            };
            if let Ok(i) = r.asked.binary_search_by_key(&seq, |a| a.0) {
                let at = std::mem::take(&mut r.asked[i].1);
                if at > 0 && !was_pending {
                    // Its gap was given up before it came.
                    r.stats.late_answers += 1;
                    backed_off = r.on_late_answer(now);
                }
                if at > 0 {
                    r.resend_delay.on_sample(now.saturating_sub(at));
                    let ms = |ns: Option<Nanos>| ns.unwrap_or(0) / crate::NANOS_PER_MS;
                    r.stats.answer_ms = ms(r.resend_delay.smoothed());
                    r.stats.answer_wait_ms = ms(r.resend_delay.timeout());
                }
            }
        }
        if backed_off {
            // The reorder buffer's hold follows the longer waits at once.
            self.size_recovery_ring(now);
        }
    }

    /// The paths for NACKs: the fastest usable one, and the one answers
    /// come back on ([`Tunnel::recovery_path`]), which gets a copy when it
    /// differs (the fastest loses more): a NACK is small, and a lost one
    /// costs what it asked for.
    fn nack_paths(&self) -> Option<(PathId, PathId)> {
        let safe = self.recovery_path()?;
        let fast = (0..self.paths.len())
            .filter(|&i| self.can_carry(i))
            .min_by_key(|i| self.paths[*i].srtt().unwrap_or(Nanos::MAX))
            .map_or(safe, |i| i as PathId);
        Some((fast, safe))
    }

    /// NACKs to send (and their copies), then packets to send again;
    /// `None` when idle.
    pub(in crate::tunnel) fn poll_recovery(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let r = self.recovery.as_ref()?;
        if r.nack_out.is_empty()
            && r.path_nack_out.is_empty()
            && r.retransmit.is_empty()
            && r.nack_copy.is_none()
            && r.resend_copy.is_none()
        {
            return None;
        }
        if let Some(t) = self.poll_resend_copy(now, buf) {
            return Some(t);
        }
        let seq_now = self.next_tunnel_seq;
        if let Some((path, body)) = self.recovery.as_mut()?.nack_copy.take() {
            let len = body.len();
            let usable = self.paths.get(usize::from(path)).is_some_and(|p| p.usable);
            if usable && buf.len() >= HEADER_LEN + len + TAG_LEN {
                buf[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&body);
                return self.control_transmit(now, path, PacketType::Nack, 0, seq_now, buf, len);
            }
        }
        let (fast, path) = self.nack_paths()?;
        let r = self.recovery.as_mut()?;
        let mut seqs = [0u64; NACK_MAX_SEQS];
        let mut n = 0;
        let mut kind = NackKind::Tunnel;
        if !r.nack_out.is_empty() {
            while n < NACK_MAX_SEQS {
                let Some(s) = r.nack_out.pop_front() else {
                    break;
                };
                seqs[n] = s;
                n += 1;
            }
        } else if let Some(&(p, _)) = r.path_nack_out.front() {
            kind = NackKind::Path(p);
            while n < NACK_MAX_SEQS && r.path_nack_out.front().is_some_and(|e| e.0 == p) {
                let Some((_, s)) = r.path_nack_out.pop_front() else {
                    break;
                };
                seqs[n] = u64::from(s);
                n += 1;
            }
        }
        if n > 0 {
            let body_len = NackBody::write(kind, &seqs[..n], &mut buf[HEADER_LEN..])?;
            r.stats.nacks_sent += 1;
            if path != fast {
                r.nack_copy = Some((path, buf[HEADER_LEN..HEADER_LEN + body_len].to_vec()));
            }
            return self.control_transmit(now, fast, PacketType::Nack, 0, seq_now, buf, body_len);
        }
        let body_max = self.frag.body_max;
        let waiting = !r.retransmit.is_empty();
        let copy_to = if waiting { self.copy_path(path) } else { None };
        // Resends are paced with the path's data: a burst of them at once
        // overflowed a slow path's bottleneck, and what it lost was asked
        // for again (see `resend_deadline`).
        if waiting && !self.pacing_allows(path, now) {
            return None;
        }
        let r = self.recovery.as_mut()?;
        while let Some((seq, asked_at)) = r.retransmit.pop_front() {
            if now.saturating_sub(asked_at) > RECOVERY_WAIT_MAX_NS {
                // The receiver has given it up: sent now it would only
                // take budget from data (and from younger resends).
                r.stats.resends_expired += 1;
                continue;
            }
            let Some((i, piece)) = r.find(seq, body_max) else {
                r.stats.not_available += 1;
                continue;
            };
            let slot = &r.ring[i];
            let len = slot.bytes.len();
            let class = slot.class;
            let sent = if len > body_max {
                let body = buf
                    .get_mut(..buf.len().saturating_sub(TAG_LEN))
                    .and_then(|b| {
                        crate::tunnel::fragment::write_piece(body_max, &slot.bytes, piece, b)
                    });
                body.map(|b| (PacketType::Fragment, b))
            } else if buf.len() >= HEADER_LEN + len + TAG_LEN {
                buf[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&slot.bytes);
                Some((PacketType::Data, len))
            } else {
                None
            };
            let Some((ty, body)) = sent else {
                r.stats.not_available += 1;
                continue;
            };
            r.stats.retransmitted += 1;
            if r.recent_resends.len() == RECENT_RESENDS {
                r.recent_resends.pop_front();
            }
            r.recent_resends.push_back((seq, now));
            if let Some(safe) = copy_to {
                r.resend_copy_body.clear();
                r.resend_copy_body
                    .extend_from_slice(&buf[HEADER_LEN..HEADER_LEN + body]);
                r.resend_copy = Some(ResendCopy {
                    path: safe,
                    ty,
                    class,
                    seq,
                });
            }
            let t = self.control_transmit(now, path, ty, class, seq, buf, body)?;
            self.pacing_charge(path, t.len);
            return Some(t);
        }
        None
    }

    /// When waiting resends may leave: when the recovery path next has
    /// pacing budget (`None`: none wait, or sending is not paced).
    pub(in crate::tunnel) fn resend_deadline(&self, now: Nanos) -> Option<Nanos> {
        let r = self.recovery.as_ref()?;
        if !self.paced || r.retransmit.is_empty() {
            return None;
        }
        let path = self.recovery_path()?;
        Some(self.paths[usize::from(path)].sender.budget_at(now))
    }
}
