//! The transmit side shared by the single tunnel's engine and the
//! concentrator's hub: committed transmit slots sealed together (on the
//! workers), then each socket's slots sent with one batch send, merged
//! into UDP GSO super-datagrams where the socket can.
//!
//! What it needs from the core is behind [`Peers`]: a slot carries its
//! peer ([`TxMeta::peer`]), and sealing, drops and send errors go to that
//! peer's tunnel. A single [`Tunnel`] is one peer (its id is ignored); a
//! [`Concentrator`] has many.
//!
//! Invariants:
//! * nothing leaves unsealed when its transmit asked for a seal: a slot
//!   whose seal fails is dropped and counted (`no_session`) at its peer;
//! * datagrams leave each socket in the order they were committed;
//! * every failed send is reported to the peer and path that made it; a
//!   datagram a socket refused for now (a full send buffer) is held and
//!   leaves before anything later on its socket ([`crate::hold`]);
//! * the core's output is taken in the core's order ([`drain_output`]),
//!   flushing when the slots run out.

pub use mpt_control::status::IoStats;
use std::io;

use mpt_core::concentrator::{Concentrator, PeerId};
use mpt_core::crypto::TAG_LEN;
use mpt_core::stats::DropReason;
use mpt_core::tunnel::{Sealer, Transmit, Tunnel};

use crate::by_peer::ByPeer;
use mpt_core::wire::HEADER_LEN;
use mpt_core::{Nanos, PathId};

use crate::batch::{ToSeal, TxBatch, TxMeta};
use crate::capture::{Dir, Tap};
use crate::hold::Hold;
use crate::seam::PathIo;
use crate::workers::Workers;

/// What the transmit side needs of the core, per peer.
pub trait Peers {
    /// The peer's sealer (`Sync`: the workers share it); `None`: no such
    /// peer any more, its datagrams are dropped.
    fn sealer(&self, peer: PeerId) -> Option<Sealer<'_>>;
    fn count_drop(&mut self, peer: PeerId, why: DropReason);
    fn on_send_error(&mut self, peer: PeerId, path: PathId, hard: bool, now: Nanos);
    /// A datagram the path's socket refused for now is held
    /// ([`Tunnel::on_send_held`]: counted).
    fn on_send_held(&mut self, peer: PeerId, path: PathId);
    /// The peer's next output ([`Tunnel::poll_transmit`]).
    fn poll_transmit(&mut self, peer: PeerId, now: Nanos, slot: &mut [u8]) -> Option<Transmit>;
}

impl Peers for Tunnel {
    fn sealer(&self, _: PeerId) -> Option<Sealer<'_>> {
        Some(Tunnel::sealer(self))
    }
    fn count_drop(&mut self, _: PeerId, why: DropReason) {
        Tunnel::count_drop(self, why);
    }
    fn on_send_error(&mut self, _: PeerId, path: PathId, hard: bool, now: Nanos) {
        Tunnel::on_send_error(self, path, hard, now);
    }
    fn on_send_held(&mut self, _: PeerId, path: PathId) {
        Tunnel::on_send_held(self, path);
    }
    fn poll_transmit(&mut self, _: PeerId, now: Nanos, slot: &mut [u8]) -> Option<Transmit> {
        Tunnel::poll_transmit(self, now, slot)
    }
}

impl Peers for Concentrator {
    fn sealer(&self, peer: PeerId) -> Option<Sealer<'_>> {
        Concentrator::sealer(self, peer)
    }
    fn count_drop(&mut self, peer: PeerId, why: DropReason) {
        if let Some(t) = self.tunnel_mut(peer) {
            t.count_drop(why);
        }
    }
    fn on_send_error(&mut self, peer: PeerId, path: PathId, hard: bool, now: Nanos) {
        if let Some(t) = self.tunnel_mut(peer) {
            t.on_send_error(path, hard, now);
        }
    }
    fn on_send_held(&mut self, peer: PeerId, path: PathId) {
        if let Some(t) = self.tunnel_mut(peer) {
            t.on_send_held(path);
        }
    }
    fn poll_transmit(&mut self, peer: PeerId, now: Nanos, slot: &mut [u8]) -> Option<Transmit> {
        self.tunnel_mut(peer)?.poll_transmit(now, slot)
    }
}

/// The slot metadata of a transmit of `peer`.
pub fn meta(peer: PeerId, tx: &Transmit) -> TxMeta {
    TxMeta {
        socket: tx.local_key,
        dst: tx.dst,
        path: tx.path,
        len: tx.len,
        seal: tx.seal.ticket(),
        tos: tx.tos,
        peer,
    }
}

/// Scratch of the sealing step, reused flush after flush.
#[derive(Default)]
pub struct SealScratch {
    /// Per span of the flush: sealed.
    ok: Vec<bool>,
    by_peer: ByPeer<bool>,
}

/// What flushing the transmit slots needs, borrowed apart from the core
/// (a burst may hold the tunnel meanwhile).
pub struct Flush<'a, P> {
    pub tx: &'a mut TxBatch,
    pub paths: &'a mut P,
    pub workers: &'a Workers,
    pub seal: &'a mut SealScratch,
    pub failures: &'a mut Vec<(usize, io::Error)>,
    /// What the sockets refused for now ([`crate::hold`]).
    pub hold: &'a mut Hold,
    pub io: &'a mut IoStats,
    pub capture: &'a mut Option<Tap>,
    pub wall_offset: i64,
    /// Show the inner packets to a capture before sealing (the hub shows
    /// them as it reads them from the TUN, with their peer).
    pub capture_inner: bool,
}

impl<P: PathIo> Flush<'_, P> {
    /// Seal every committed slot with its ticket (on the workers), then
    /// send each socket's slots with one batch send.
    pub fn run<Q: Peers + ?Sized>(&mut self, core: &mut Q, now: Nanos) {
        if self.tx.is_empty() {
            self.tx.clear();
            return;
        }
        let wall = (now as i64).wrapping_add(self.wall_offset) as u64;
        if let Some(tap) = self
            .capture
            .as_mut()
            .filter(|t| self.capture_inner && t.active_now())
        {
            // The inner packets in clear, before sealing.
            for (m, d) in self.tx.committed() {
                let tag = if m.seal.is_some() { TAG_LEN } else { 0 };
                let len = m.len.saturating_sub(HEADER_LEN + tag);
                tap.inner(Dir::Out, m.path, wall, d, len, false);
            }
        }
        let ToSeal {
            bufs,
            spans,
            tickets,
            peers,
        } = self.tx.to_seal();
        if !spans.is_empty() {
            let sc = &mut *self.seal;
            sc.ok.clear();
            sc.ok.resize(spans.len(), false);
            let sealing: &Q = core;
            sc.by_peer.run(
                self.workers,
                bufs,
                spans,
                peers,
                &mut sc.ok,
                false,
                |p| sealing.sealer(p),
                |sealer, j, d| sealer.seal(tickets[j].into(), d),
            );
            self.tx.sealed(&self.seal.ok, |peer| {
                core.count_drop(peer, DropReason::NoSession)
            });
        }
        if let Some(tap) = self.capture.as_mut().filter(|t| t.active_now()) {
            // The datagrams as they leave.
            for (m, d) in self.tx.committed() {
                tap.datagram(Dir::Out, m.socket, wall, d);
            }
        }
        for socket in 0..self.paths.sockets() {
            let gso = self.paths.gso_max_bytes(socket);
            let (buf, msgs, chunks, infos) = self.tx.messages_within(socket, gso);
            if msgs.is_empty() {
                continue;
            }
            if self.hold.worth_retrying(socket) {
                // What the socket refused before goes first.
                retry_held(self.hold, self.paths, self.io, socket, core, now);
            }
            let failures = &mut *self.failures;
            failures.clear();
            if self.hold.holds(socket) {
                // Still refusing: all of it joins the back, in order.
                failures.extend((0..msgs.len()).map(|i| (i, io::ErrorKind::WouldBlock.into())));
            } else {
                self.paths
                    .send(socket, buf, msgs, chunks, &mut |i, e| failures.push((i, e)));
                self.io.udp_send_calls += 1;
            }
            let datagrams: usize = infos.iter().map(|m| m.datagrams).sum();
            let failed: usize = failures.iter().map(|(i, _)| infos[*i].datagrams).sum();
            let io = &mut *self.io;
            io.udp_datagrams_sent += (datagrams - failed) as u64;
            io.max_send_batch = io.max_send_batch.max(datagrams as u64);
            for (i, e) in failures.drain(..) {
                let (m, info) = (&msgs[i], &infos[i]);
                if e.kind() != io::ErrorKind::WouldBlock {
                    for _ in 0..info.datagrams {
                        core.on_send_error(info.peer, info.path, is_hard(&e), now);
                    }
                    continue;
                }
                for c in &chunks[m.first..m.first + m.count] {
                    let d = &buf[c.start..c.start + c.len];
                    if self
                        .hold
                        .push(socket, info.peer, info.path, m.dst, m.tos, d)
                    {
                        io.udp_held += 1;
                        core.on_send_held(info.peer, info.path);
                    } else {
                        io.udp_hold_drops += 1;
                        core.on_send_error(info.peer, info.path, false, now);
                    }
                }
            }
        }
        self.io.udp_hold_bytes = self.hold.bytes() as u64;
        self.tx.clear();
    }

    /// Send what the sockets hold (one of them became writable, or a turn
    /// found some held): see [`crate::hold`].
    pub fn retry_held<Q: Peers + ?Sized>(&mut self, core: &mut Q, now: Nanos) {
        for socket in 0..self.paths.sockets() {
            if self.hold.worth_retrying(socket) {
                retry_held(self.hold, self.paths, self.io, socket, core, now);
            }
        }
        self.io.udp_hold_bytes = self.hold.bytes() as u64;
    }
}

fn retry_held<P: PathIo, Q: Peers + ?Sized>(
    hold: &mut Hold,
    paths: &mut P,
    io: &mut IoStats,
    socket: usize,
    core: &mut Q,
    now: Nanos,
) {
    let r = hold.retry(paths, socket, |peer, path, e| {
        core.on_send_error(peer, path, is_hard(e), now)
    });
    io.udp_send_calls += r.calls as u64;
    io.udp_datagrams_sent += r.sent as u64;
}

/// Put `peer`'s output ([`Tunnel::poll_transmit`], in its order) into the
/// free transmit slots, flushing when they run out.
pub fn drain_output<P: PathIo, Q: Peers + ?Sized>(
    flush: &mut Flush<'_, P>,
    core: &mut Q,
    peer: PeerId,
    now: Nanos,
) {
    loop {
        if flush.tx.is_full() {
            flush.run(core, now);
        }
        let Some(slot) = flush.tx.slot() else {
            return;
        };
        match core.poll_transmit(peer, now, slot) {
            Some(t) => flush.tx.commit(meta(peer, &t)),
            None => return,
        }
    }
}

/// Errors that mean the path cannot deliver at all right now (as opposed to
/// a full buffer).
pub fn is_hard(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::EHOSTUNREACH
                | libc::EADDRNOTAVAIL
                | libc::ENODEV
        )
    )
}
