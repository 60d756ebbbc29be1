//! Control traffic of the tunnel: what [`Tunnel::poll_transmit`] sends
//! (handshake messages, NACKs, path validation, probes, echoes and
//! receiver reports), and the
//! liveness of each path and direction that probes maintain.
//!
//! Invariants:
//! * probes and echoes carry the sender's hearing mask (bit i: it hears
//!   path i), so a peer learns on every path which of its send directions
//!   work; a change of our receive state is announced on every path at
//!   once;
//! * the tunnel sequence a control packet carries on a path (its
//!   frontier) is below every data packet sent on that path later: the
//!   oldest packet waiting in the path's queue, or the next sequence;
//! * a path whose data stops (nothing more waits for it) sends one report
//!   [`TAIL_PROBE_NS`] after its last data packet, so a loss at the end of
//!   a burst is proven by the frontier, not by the reorder timeout;
//! * a path's `up` (usable for sending) follows the peer's reports only,
//!   its `rx_up` (we hear the peer) follows what arrives only
//!   (`path/liveness.rs`);
//! * a receiver report due on a path the peer does not hear us on goes on
//!   our usable path of the lowest round trip instead, as a
//!   [`PacketType::ReportFor`] naming it, so the direction that works
//!   keeps its rate control; with no such path it goes on its own path.

use std::net::SocketAddr;

use super::slot;
use super::{Event, Transmit, Tunnel};
use crate::wire::{
    PacketType, ProbeBody, ReportForBody, HEADER_LEN, REPORT_BODY_LEN, REPORT_FOR_BODY_LEN,
};
use crate::{Nanos, PathId, NANOS_PER_MS};

/// Silence after a path's last data packet (with nothing more waiting for
/// it) after which a receiver report announces the path's frontier
/// (tuning knob). A report, not a probe: a probe's echo would sample the
/// path's round trip right behind a burst, and the scheduler would take
/// the burst's queue for the path's delay.
/// Without it a data packet lost at the end of a burst is found only when
/// the path next carries something: a cwnd-limited inner TCP waits for
/// the packets held behind the gap, sends nothing, and the gap waits for
/// the reorder buffer's `max_delay` (cf. RFC 8985's tail loss probe).
pub const TAIL_PROBE_NS: Nanos = 2 * NANOS_PER_MS;

impl Tunnel {
    /// Bit i set: we hear the peer on path i.
    pub(super) fn hearing_mask(&self) -> u32 {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.rx_up && p.leaving.is_none())
            .fold(0, |m, (i, _)| m | (1 << i))
    }

    /// Re-evaluate both directions of path `pid`, emitting events on change.
    /// Which paths may carry data: every path that is up, except that a
    /// backup path (`backup = true`) carries data only while no other path
    /// is up. Backup paths are probed all the time, so their liveness and
    /// delay stay known and failover to them is immediate.
    pub(super) fn refresh_usable(&mut self) {
        let live = |p: &slot::PathSlot| p.up && !p.admin_down;
        let primary_up = self.paths.iter().any(|p| live(p) && !p.cfg.backup);
        for p in &mut self.paths {
            p.usable = live(p) && (!p.cfg.backup || !primary_up);
        }
        self.first_path_up |= self.paths.iter().any(|p| p.usable);
    }

    /// Take the path named `name` out of use, or back (an operator's
    /// `mpt path NAME down|up`). An administratively down path carries no
    /// data (what waits for it moves to another path) but keeps its probes,
    /// so its state stays known. Returns the path's id, or an error naming
    /// the paths there are.
    pub fn set_admin_down(&mut self, name: &str, down: bool) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        self.paths[i].admin_down = down;
        self.refresh_usable();
        Ok(i as PathId)
    }

    /// The index of the path named `name`, or an error naming the paths.
    pub(super) fn path_named(&self, name: &str) -> Result<usize, String> {
        self.active_paths()
            .map(|i| i as usize)
            .find(|i| self.paths[*i].cfg.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .active_paths()
                    .map(|i| self.paths[i as usize].cfg.name.as_str())
                    .collect();
                format!(
                    "no path named '{name}'; the paths are: {}",
                    names.join(", ")
                )
            })
    }

    /// Change the cap on what the path named `name` carries (`rate_mbit`
    /// at runtime; `None` removes it). Path-aware sending only: static
    /// weights do not pace.
    pub fn set_rate_cap(&mut self, name: &str, cap_bps: Option<u64>) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        if !self.paced {
            return Err("rate_mbit caps path-aware sending; this tunnel sends by static weights, which do not pace".into());
        }
        self.paths[i].sender.set_cap(cap_bps);
        self.paths[i].cfg.rate_cap_bps = cap_bps;
        Ok(i as PathId)
    }

    /// Send the path named `name` to `remote` from now on (its hostname
    /// resolved again, or an operator's `set remote`): of the path's IP
    /// version, not unspecified, not port 0. Liveness goes on as it is:
    /// the path comes up when the new remote answers.
    pub fn set_remote(&mut self, name: &str, remote: SocketAddr) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        let local = self.paths[i].cfg.local;
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(format!(
                "{remote} is not of the IP version of local {local}"
            ));
        }
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(format!("{remote} cannot be a destination"));
        }
        self.paths[i].remote = Some(remote);
        self.paths[i].probe_due = true;
        Ok(i as PathId)
    }

    /// Change the probe interval and the dead interval of the path named
    /// `name` (`keepalive_ms`, `dead_ms` at runtime); `dead` must exceed
    /// `keepalive`.
    pub fn set_path_timers(
        &mut self,
        name: &str,
        keepalive: Nanos,
        dead: Nanos,
    ) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        if keepalive == 0 || dead <= keepalive {
            return Err("dead_ms must exceed keepalive_ms, and keepalive_ms be above 0".into());
        }
        let cfg = &mut self.paths[i].cfg;
        (cfg.keepalive, cfg.dead) = (keepalive, dead);
        Ok(i as PathId)
    }

    /// Make the path named `name` a backup path (carries data only while
    /// no other path is up) or a primary one. At least one path stays
    /// primary.
    pub fn set_backup(&mut self, name: &str, backup: bool) -> Result<PathId, String> {
        let i = self.path_named(name)?;
        if backup && !self.another_primary(i) {
            return Err(format!(
                "'{name}' is the only primary path; make another path primary first"
            ));
        }
        self.paths[i].cfg.backup = backup;
        self.refresh_usable();
        Ok(i as PathId)
    }

    pub(super) fn refresh_up(&mut self, pid: PathId, now: Nanos) {
        if self.paths[pid as usize].removed {
            return;
        }
        let p = &mut self.paths[pid as usize];
        let rx = p.hearing(now);
        if rx != p.rx_up {
            p.rx_up = rx;
            self.events
                .push_back(Event::Receiving { path: pid, up: rx });
            // Tell the peer on every path which of its directions work.
            self.paths.iter_mut().for_each(|q| q.probe_due = true);
        }
        let p = &mut self.paths[pid as usize];
        let up = p.sendable(now);
        if up == p.up {
            return;
        }
        p.up = up;
        self.live[pid as usize] = up;
        if up {
            p.ups += 1;
            p.reset_loss();
            self.events.push_back(Event::PathUp { path: pid });
            self.adapt_weights();
        } else {
            p.downs += 1;
            let reason = if p.send_blocked {
                "send failed: network unreachable"
            } else if !p.peer_hears_us {
                "the peer stopped hearing us on it"
            } else {
                "no report from the peer within the dead interval"
            };
            self.events.push_back(Event::PathDown { path: pid, reason });
            if !self.paths.iter().any(|p| p.up) {
                self.events.push_back(Event::AllPathsDown);
            }
        }
        self.refresh_usable();
        if !up {
            // What it carried last may wait in a dead link's queue, as
            // when it stalls (`path/stall.rs`).
            self.resend_stalled(now, pid);
        }
    }

    /// Re-evaluate every path (after a report that concerns them all).
    pub(super) fn refresh_all(&mut self, now: Nanos) {
        for i in 0..self.paths.len() {
            self.refresh_up(i as PathId, now);
        }
    }

    /// A probe or echo from the peer on `pid`: its hearing mask tells which
    /// of our send directions work; an echo also proves that it hears us on
    /// `pid` (it answers our probe there).
    pub(super) fn on_hearing_mask(
        &mut self,
        now: Nanos,
        pid: PathId,
        sent: u64,
        mask: u32,
        echo: bool,
    ) {
        for (i, p) in self.paths.iter_mut().enumerate() {
            let bit = self.pairing.heard(mask, i as PathId);
            p.on_hearing_report(now, sent, bit || (echo && i == pid as usize));
        }
        self.refresh_all(now);
    }

    /// Write the next due control packet into `buf` (at least 256 bytes):
    /// handshake responses and cookie replies, then initiations, then NACKs,
    /// path validation, echoes, probes and receiver reports (each echo and
    /// probe carries a report too); complete (sealed). Part of
    /// [`Tunnel::poll_transmit`].
    pub(super) fn poll_control(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if buf.len() < 256 {
            return None;
        }
        if let Some((path, dst, bytes)) = self.handshake_out.pop_front() {
            buf[..bytes.len()].copy_from_slice(&bytes);
            let local_key = self.paths[path as usize].cfg.local_key;
            return Some(Transmit {
                path,
                local_key,
                dst,
                len: bytes.len(),
                seal: super::Seal::Done,
                carries: super::Carries::Control,
                tos: 0,
            });
        }
        if let Some(t) = self.poll_initiation(now, buf) {
            return Some(t);
        }
        if !self.has_session() {
            return None;
        }
        if let Some(t) = self.poll_recovery(now, buf) {
            return Some(t);
        }
        if let Some(t) = self.poll_repair(now, buf) {
            return Some(t);
        }
        if let Some(t) = self.poll_validation(now, buf) {
            return Some(t);
        }
        let mask = self.hearing_mask();
        for i in 0..self.paths.len() {
            let pid = i as PathId;
            let p = &mut self.paths[i];
            if p.remote.is_none() {
                continue;
            }
            let (ty, echo_ts, hold) = if let Some((ts, arrived)) = p.echo_due.take() {
                (PacketType::Echo, ts, now.saturating_sub(arrived))
            } else if p.probe_due {
                p.probe_due = false;
                (PacketType::Probe, 0, 0)
            } else if p.report_due {
                (PacketType::Report, 0, 0)
            } else {
                continue;
            };
            // An echo carries a report too, but on a path the peer may not
            // hear us on: a report owed there goes on another path next.
            let carry_next = ty == PacketType::Echo && p.report_due && (!p.up || p.stall.stalled);
            let report = p.report_body(now, mask);
            p.report_due |= carry_next;
            if ty == PacketType::Report && (!p.up || p.stall.stalled) {
                // The peer does not hear us on this path, or nothing we
                // sent on it was reported for a while (it stalled, as a
                // radio uplink does for seconds): its reports would be
                // lost or late. Another path carries them, so that the
                // direction that works keeps its rate control.
                if let Some(carrier) = self.report_carrier(pid) {
                    let body = ReportForBody { about: pid, report };
                    body.write(&mut buf[HEADER_LEN..]);
                    self.paths[i].reports_carried_out += 1;
                    let (ty, len) = (PacketType::ReportFor, REPORT_FOR_BODY_LEN);
                    let seq = self.next_tunnel_seq;
                    if let Some(t) = self.control_transmit(now, carrier, ty, 0, seq, buf, len) {
                        return Some(t);
                    }
                    continue;
                }
            }
            let body_len = if ty == PacketType::Report {
                report.write(&mut buf[HEADER_LEN..]);
                REPORT_BODY_LEN
            } else {
                ProbeBody {
                    echo_timestamp_us: echo_ts,
                    hold_ns: hold.min(u64::from(u32::MAX)) as u32,
                    report,
                    name: self.wire_name(pid),
                }
                .write(&mut buf[HEADER_LEN..])
            };
            let seq = self.next_tunnel_seq;
            if let Some(t) = self.control_transmit(now, pid, ty, 0, seq, buf, body_len) {
                return Some(t);
            }
        }
        None
    }

    /// The path that carries `pid`'s reports while the peer does not hear
    /// us on `pid`: the usable path of the lowest round trip.
    fn report_carrier(&self, pid: PathId) -> Option<PathId> {
        (0..self.paths.len())
            .filter(|&j| j != pid as usize && self.can_carry(j))
            .min_by_key(|&j| {
                let stalled = self.paths[j].stall.stalled;
                (stalled, self.paths[j].srtt().unwrap_or(Nanos::MAX), j)
            })
            .map(|j| j as PathId)
    }

    /// Write header (and seal) a packet whose body is at `buf[HEADER_LEN..]`
    /// for `path`, outside the data path's accounting.
    #[allow(clippy::too_many_arguments)] // the header's fields, as they are
    pub(super) fn control_transmit(
        &mut self,
        now: Nanos,
        path: PathId,
        ty: PacketType,
        class: u8,
        seq: u64,
        buf: &mut [u8],
        body_len: usize,
    ) -> Option<Transmit> {
        let dst = self.paths[path as usize].remote?;
        self.control_transmit_to(now, path, ty, class, seq, dst, buf, body_len)
    }

    /// Like [`Tunnel::control_transmit`], to an explicit destination (a
    /// path challenge goes to the address being validated).
    #[allow(clippy::too_many_arguments)] // the header's fields, as they are
    pub(super) fn control_transmit_to(
        &mut self,
        now: Nanos,
        path: PathId,
        ty: PacketType,
        class: u8,
        seq: u64,
        dst: SocketAddr,
        buf: &mut [u8],
        body_len: usize,
    ) -> Option<Transmit> {
        // The frontier a control packet announces must hold for its path:
        // packets still waiting in the path's queue come after it.
        let seq = seq.min(self.frontier(path));
        let (len, seal) = self.emit(now, path, ty, class, seq, buf, body_len)?;
        let tx = Transmit {
            path,
            local_key: self.paths[path as usize].cfg.local_key,
            dst,
            len,
            seal: seal.into(),
            carries: super::Carries::Control,
            tos: 0,
        };
        self.seal_or_count(tx, buf)
    }

    /// Probe timers and liveness: a suspect path is probed fast; a client
    /// whose paths have all been silent for their dead interval handshakes
    /// again at once (the server may have restarted).
    pub(super) fn liveness_timers(&mut self, now: Nanos) {
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            let fast_due = p.suspect(now) && p.next_probe_at > now + p.fast_probe_interval();
            if p.next_probe_at <= now || fast_due {
                p.probe_due = true;
                p.next_probe_at = now + p.probe_interval(now);
            }
            if p.tail_since.is_some_and(|t| now >= t + TAIL_PROBE_NS) {
                p.tail_since = None;
                if self.queue.len(i as PathId) == 0 {
                    p.report_due = true;
                }
            }
            p.owe_report(now);
            let queue_ns = p.sender.standing_queue_ns();
            if p.check_stall(now, queue_ns) {
                p.probe_due = true;
                self.events.push_back(Event::Stalled {
                    path: i as PathId,
                    stalled: true,
                });
                self.resend_stalled(now, i as PathId);
            }
            self.refresh_up(i as PathId, now);
        }
        let heard = self.paths.iter().any(|p| p.last_rx.is_some());
        let all_silent = self
            .paths
            .iter()
            .all(|p| p.silent_for(now).is_none_or(|s| s >= p.cfg.dead));
        if heard && all_silent && self.has_session() {
            if let Some(c) = self.crypto.as_mut() {
                c.handshake_on_silence();
            }
        }
    }

    /// The earliest instant at which path liveness changes by itself.
    pub(super) fn liveness_deadline(&self) -> Option<Nanos> {
        let after = self.timers_ran_at;
        self.paths
            .iter()
            .flat_map(|p| {
                let rx = p.next_liveness_deadline(after.unwrap_or(0));
                let silence = p.last_rx.map(|t| t.saturating_add(p.cfg.dead));
                let stale = p
                    .report_at
                    .filter(|_| p.up)
                    .map(|t| t.saturating_add(p.cfg.dead));
                let tail = p.tail_since.map(|t| t + TAIL_PROBE_NS);
                let stall = p.stall_deadline(p.sender.standing_queue_ns());
                let owed = p.report_owed_at();
                [Some(p.next_probe_at), rx, silence, stale, tail, stall, owed]
            })
            .flatten()
            .filter(|t| after.is_none_or(|a| *t > a))
            .min()
    }
}
