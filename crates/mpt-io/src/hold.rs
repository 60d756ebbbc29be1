//! Datagrams a path socket refused for now, kept in order and sent when
//! the socket takes them again: the host's own queue pushing back.
//!
//! With local push-back on (`[scheduler] local_queue_ms`, off by
//! default), a single tunnel's path socket has a send buffer of a few
//! milliseconds at its paths' rate ([`crate::udp::send_limit_bytes`]);
//! else a large one, which refuses only in a burst. What the local
//! stack still holds for the socket (the interface's qdisc, its driver)
//! counts against it, so when the interface is the bottleneck the socket
//! refuses (`EAGAIN`) before the interface's queue overflows. That is the
//! push-back a kernel TCP sender gets from TCP Small Queues (Linux 3.6,
//! `tcp_small_queue_check`): without it a tunnel's paced datagrams
//! overflowed a shaper on the host itself (a slow uplink, a router's
//! shaped WAN port) where TCP through the same interface never lost one.
//!
//! A refused datagram is already sealed, numbered and stamped: it is
//! copied here and sent before anything later on its socket; the time it
//! waits shows in its path's one-way delay, which the core's rate control
//! reads as a queue. The loop asks to hear when the socket is writable
//! again, and does not try it before.
//!
//! Invariants:
//! * datagrams leave each socket in the order they were committed: while
//!   a socket holds some, everything new for it joins the back;
//! * at most [`HOLD_MAX_BYTES`] per socket; a datagram that does not fit
//!   is dropped and counted (`send_failed` at its peer, `udp_hold_drops`);
//! * a send error other than a full buffer drops the datagram (counted at
//!   its peer), as for a datagram sent at once.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;

use mpt_core::concentrator::PeerId;
use mpt_core::PathId;

use crate::batch::{Chunk, SendMsg};
use crate::seam::PathIo;

/// Most bytes held per socket (tuning knob: 256 KiB is 0.5 s of a 4
/// Mbit/s path, and 2 ms of 1 Gbit/s; the charge to the budget keeps the
/// hold far below it once the core has heard of the refusals).
pub const HOLD_MAX_BYTES: usize = 256 << 10;
/// Datagrams per retry call (the batch send's capacity is larger).
const RETRY_BATCH: usize = 64;

/// One refused datagram.
struct Held {
    peer: PeerId,
    path: PathId,
    dst: SocketAddr,
    tos: u8,
    data: Vec<u8>,
}

#[derive(Default)]
struct SocketHold {
    q: VecDeque<Held>,
    bytes: usize,
    /// The socket refused, and no writability was reported since (with
    /// [`Hold::reports_writable`] on): a retry would only be refused
    /// again, at the cost of a system call.
    refused: bool,
}

/// What a retry did, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retried {
    /// Datagrams sent, and send calls made.
    pub sent: usize,
    pub calls: usize,
}

/// The held datagrams of every socket. See the module documentation.
#[derive(Default)]
pub struct Hold {
    sockets: Vec<SocketHold>,
    /// Buffers of datagrams sent, for the next ones held.
    free: Vec<Vec<u8>>,
    buf: Vec<u8>,
    chunks: Vec<Chunk>,
    msgs: Vec<SendMsg>,
    failures: Vec<(usize, io::Error)>,
    /// The loop reports when a socket that held datagrams is writable
    /// ([`Hold::writable`]); without it every turn retries.
    reports_writable: bool,
}

impl Hold {
    /// The loop will report writability ([`Hold::writable`]): a socket
    /// that refused is tried again only after it.
    pub fn set_reports_writable(&mut self, on: bool) {
        self.reports_writable = on;
    }

    /// `socket` was reported writable.
    pub fn writable(&mut self, socket: usize) {
        if let Some(s) = self.sockets.get_mut(socket) {
            s.refused = false;
        }
    }

    /// Whether a retry of `socket` may get somewhere: it holds datagrams
    /// and, if the loop reports writability, was writable since it last
    /// refused.
    pub fn worth_retrying(&self, socket: usize) -> bool {
        self.sockets
            .get(socket)
            .is_some_and(|s| !s.q.is_empty() && (!self.reports_writable || !s.refused))
    }

    /// Whether `socket` holds datagrams (new ones for it must join them).
    pub fn holds(&self, socket: usize) -> bool {
        self.sockets.get(socket).is_some_and(|s| !s.q.is_empty())
    }

    /// Whether any socket holds datagrams.
    pub fn any(&self) -> bool {
        self.sockets.iter().any(|s| !s.q.is_empty())
    }

    /// Bytes held over all sockets.
    pub fn bytes(&self) -> usize {
        self.sockets.iter().map(|s| s.bytes).sum()
    }

    /// Keep `data` (a sealed datagram of `peer`'s `path`) at the back of
    /// `socket`'s hold. `false`: no room (the caller drops and counts it).
    pub fn push(
        &mut self,
        socket: usize,
        peer: PeerId,
        path: PathId,
        dst: SocketAddr,
        tos: u8,
        data: &[u8],
    ) -> bool {
        if self.sockets.len() <= socket {
            self.sockets.resize_with(socket + 1, SocketHold::default);
        }
        let s = &mut self.sockets[socket];
        s.refused = true;
        if s.bytes + data.len() > HOLD_MAX_BYTES {
            return false;
        }
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        s.bytes += data.len();
        s.q.push_back(Held {
            peer,
            path,
            dst,
            tos,
            data: buf,
        });
        true
    }

    /// Send what `socket` holds, oldest first, until it refuses again or
    /// none is left. A datagram refused for another reason than a full
    /// buffer is dropped and reported to `failed` with its peer and path.
    /// Returns what was sent; the socket still holds the rest.
    pub fn retry<P: PathIo + ?Sized>(
        &mut self,
        paths: &mut P,
        socket: usize,
        mut failed: impl FnMut(PeerId, PathId, &io::Error),
    ) -> Retried {
        let mut done = Retried::default();
        let Some(s) = self.sockets.get_mut(socket) else {
            return done;
        };
        while !s.q.is_empty() {
            self.buf.clear();
            self.chunks.clear();
            self.msgs.clear();
            for (i, h) in s.q.iter().take(RETRY_BATCH).enumerate() {
                self.chunks.push(Chunk {
                    start: self.buf.len(),
                    len: h.data.len(),
                });
                self.buf.extend_from_slice(&h.data);
                self.msgs.push(SendMsg {
                    dst: h.dst,
                    first: i,
                    count: 1,
                    segment: 0,
                    tos: h.tos,
                });
            }
            let failures = &mut self.failures;
            failures.clear();
            paths.send(socket, &self.buf, &self.msgs, &self.chunks, &mut |i, e| {
                failures.push((i, e))
            });
            done.calls += 1;
            // Everything before the first refusal left, or failed for good.
            let tried = self.msgs.len();
            let refused = failures
                .iter()
                .find(|(_, e)| e.kind() == io::ErrorKind::WouldBlock)
                .map_or(tried, |(i, _)| *i);
            for (i, e) in failures.iter().filter(|(i, _)| *i < refused) {
                let h = &s.q[*i];
                failed(h.peer, h.path, e);
            }
            let lost = failures.iter().filter(|(i, _)| *i < refused).count();
            done.sent += refused - lost;
            for _ in 0..refused {
                if let Some(h) = s.q.pop_front() {
                    s.bytes -= h.data.len();
                    self.free.push(h.data);
                }
            }
            if refused < tried {
                s.refused = true;
                break;
            }
        }
        self.free.truncate(RETRY_BATCH);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    /// Sockets that take `room` datagrams, then refuse until given more.
    struct Tight {
        room: usize,
        sent: Vec<Vec<u8>>,
        broken: Option<u8>,
    }

    impl PathIo for Tight {
        fn sockets(&self) -> usize {
            1
        }
        fn gso(&self, _: usize) -> bool {
            false
        }
        fn recv(
            &mut self,
            _: usize,
            _: &mut [Vec<u8>],
            _: &mut [crate::batch::RecvMeta],
        ) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
        fn send(
            &mut self,
            _: usize,
            buf: &[u8],
            msgs: &[SendMsg],
            chunks: &[Chunk],
            failed: &mut dyn FnMut(usize, io::Error),
        ) {
            for (i, m) in msgs.iter().enumerate() {
                let c = chunks[m.first];
                let d = &buf[c.start..c.start + c.len];
                if self.broken == Some(d[0]) {
                    failed(i, io::Error::from_raw_os_error(libc::EMSGSIZE));
                } else if self.room == 0 {
                    failed(i, io::ErrorKind::WouldBlock.into());
                } else {
                    self.room -= 1;
                    self.sent.push(d.to_vec());
                }
            }
        }
        fn send_to(&mut self, _: usize, _: &[u8], _: SocketAddr) -> io::Result<()> {
            Ok(())
        }
    }

    fn dst() -> SocketAddr {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9).into()
    }

    #[test]
    fn held_datagrams_leave_in_order_as_the_socket_takes_them() {
        let mut h = Hold::default();
        for k in 0..5u8 {
            assert!(h.push(0, 0, k, dst(), 0, &[k; 100]));
        }
        assert!(h.holds(0) && !h.holds(1) && h.bytes() == 500);
        let mut io = Tight {
            room: 2,
            sent: Vec::new(),
            broken: None,
        };
        let r = h.retry(&mut io, 0, |_, _, _| panic!("no error"));
        assert_eq!(r.sent, 2);
        assert_eq!(h.bytes(), 300);
        io.room = 10;
        let r = h.retry(&mut io, 0, |_, _, _| panic!("no error"));
        assert_eq!(r.sent, 3);
        assert!(!h.any());
        let firsts: Vec<u8> = io.sent.iter().map(|d| d[0]).collect();
        assert_eq!(firsts, vec![0, 1, 2, 3, 4], "in the order they were held");
    }

    #[test]
    fn with_writability_reported_a_socket_that_refused_waits_for_it() {
        let mut h = Hold::default();
        assert!(h.push(0, 0, 0, dst(), 0, &[1; 10]));
        assert!(h.worth_retrying(0), "no reports: every turn tries");
        h.set_reports_writable(true);
        assert!(!h.worth_retrying(0), "refused, not yet writable");
        h.writable(0);
        assert!(h.worth_retrying(0));
        let mut io = Tight {
            room: 0,
            sent: Vec::new(),
            broken: None,
        };
        assert_eq!(h.retry(&mut io, 0, |_, _, _| ()).sent, 0);
        assert!(!h.worth_retrying(0), "refused again");
    }

    #[test]
    fn a_full_hold_refuses_and_a_hard_error_drops_only_its_datagram() {
        let mut h = Hold::default();
        let big = vec![7u8; HOLD_MAX_BYTES / 2];
        assert!(h.push(0, 3, 1, dst(), 0, &big));
        assert!(h.push(0, 3, 1, dst(), 0, &big));
        assert!(!h.push(0, 3, 1, dst(), 0, &[1]), "beyond the bound");
        let mut h = Hold::default();
        for k in 0..3u8 {
            assert!(h.push(0, 4, k, dst(), 0, &[k; 10]));
        }
        let mut io = Tight {
            room: 10,
            sent: Vec::new(),
            broken: Some(1),
        };
        let mut lost = Vec::new();
        let r = h.retry(&mut io, 0, |peer, path, _| lost.push((peer, path)));
        assert_eq!(lost, vec![(4, 1)]);
        assert_eq!(r.sent, 2);
        assert!(!h.any());
    }
}
