//! The seam's Linux side: the TUN device, the path sockets with
//! `recvmmsg`/`sendmmsg` (GSO/GRO where the kernel has them), and the
//! system clocks.
//!
//! Invariants:
//! * a socket whose device refuses GSO (`EIO`/`EINVAL` on a segmented
//!   message) stops using GSO for the rest of the run;
//! * TUN reads are one system call per packet (the kernel has no batch
//!   read for TUN); a batch ends at the first `WouldBlock`.

use std::io;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mpt_core::Nanos;
use mpt_sys::mmsg::{self, MmsgRecv, MmsgSend};
use mpt_sys::tun::Tun;

use crate::batch::{Chunk, RecvMeta, SendMsg};
use crate::seam::{Clock, PathIo, Slots, TunDevice};
use crate::udp::PathSocket;

impl TunDevice for Tun {
    fn offload(&self) -> bool {
        Tun::offload(self)
    }
    fn uso(&self) -> bool {
        Tun::uso(self)
    }
    fn read_batch(&mut self, mut slots: Slots<'_>, lens: &mut [usize]) -> io::Result<usize> {
        let want = lens.len().min(slots.count());
        let mut n = 0;
        while n < want {
            match self.read(slots.packet_mut(n)) {
                Ok(len) => {
                    lens[n] = len;
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(n)
    }
    fn write(&mut self, head: &[u8], pkt: &[u8]) -> io::Result<()> {
        if head.is_empty() {
            Tun::write(self, pkt).map(drop)
        } else {
            self.write_vectored(head, pkt).map(drop)
        }
    }
}

/// The bound path sockets with their batch scratch.
pub struct UdpPaths {
    pub sockets: Vec<PathSocket>,
    gso: Vec<bool>,
    /// Each socket's send buffer as set ([`UdpPaths::set_send_limit`];
    /// 0: the default, large one).
    send_limit: Vec<usize>,
    gro: bool,
    recv: MmsgRecv,
    send: MmsgSend,
}

impl UdpPaths {
    /// Take over `sockets`, probing GSO and asking for GRO on each;
    /// batches of up to `batch` messages.
    pub fn new(sockets: Vec<PathSocket>, batch: usize) -> Self {
        let gso = sockets
            .iter()
            .map(|s| mmsg::gso_supported(&s.socket))
            .collect();
        let gro = sockets
            .iter()
            .filter(|s| mmsg::enable_gro(&s.socket))
            .count()
            == sockets.len();
        // Each datagram's outer ECN bits (RFC 6040); without them the
        // outer field reads as Not-ECT, as before.
        for s in &sockets {
            mmsg::enable_recv_tos(&s.socket);
        }
        Self {
            send_limit: vec![0; sockets.len()],
            sockets,
            gso,
            gro,
            recv: MmsgRecv::new(batch),
            send: MmsgSend::new(batch),
        }
    }

    /// One more socket (a path added at runtime), with its offloads probed
    /// as at the start. GRO, all or nothing, is kept only if it has it.
    pub fn add_socket(&mut self, s: PathSocket) {
        self.gso.push(mmsg::gso_supported(&s.socket));
        self.send_limit.push(0);
        self.gro &= mmsg::enable_gro(&s.socket);
        mmsg::enable_recv_tos(&s.socket);
        self.sockets.push(s);
    }

    /// Size `socket`'s send buffer ([`crate::udp::send_limit_bytes`]);
    /// its GSO messages then stay within the size asked (the kernel
    /// allows twice that, counting buffers).
    pub fn set_send_limit(&mut self, socket: usize, bytes: usize) -> io::Result<()> {
        let s = self.sockets.get(socket).ok_or(io::ErrorKind::NotFound)?;
        crate::udp::set_send_limit(&s.socket, bytes)?;
        self.send_limit[socket] = bytes;
        Ok(())
    }

    /// Give `socket` the large default buffer back (local push-back off).
    pub fn reset_send_limit(&mut self, socket: usize) -> io::Result<()> {
        self.set_send_limit(socket, crate::udp::SOCKET_BUFFER_BYTES)?;
        self.send_limit[socket] = 0;
        Ok(())
    }

    /// `socket`'s send buffer as last set (0: the default).
    pub fn send_limit(&self, socket: usize) -> usize {
        self.send_limit.get(socket).copied().unwrap_or(0)
    }

    /// Whether every socket has GSO / GRO.
    pub fn all_gso(&self) -> bool {
        self.gso.iter().all(|g| *g)
    }
}

impl PathIo for UdpPaths {
    fn sockets(&self) -> usize {
        self.sockets.len()
    }
    fn gso(&self, socket: usize) -> bool {
        self.gso.get(socket).copied().unwrap_or(false)
    }
    fn gro(&self) -> bool {
        self.gro
    }
    fn gso_max_bytes(&self, socket: usize) -> usize {
        if !self.gso(socket) {
            return 0;
        }
        match self.send_limit(socket) {
            0 => crate::batch::GSO_MAX_BYTES,
            limit => limit,
        }
    }
    fn recv(
        &mut self,
        socket: usize,
        bufs: &mut [Vec<u8>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let s = self.sockets.get(socket).ok_or(io::ErrorKind::NotFound)?;
        self.recv.recv(&s.socket, bufs, meta)
    }
    fn send(
        &mut self,
        socket: usize,
        buf: &[u8],
        msgs: &[SendMsg],
        chunks: &[Chunk],
        failed: &mut dyn FnMut(usize, io::Error),
    ) {
        let Some(s) = self.sockets.get(socket) else {
            (0..msgs.len()).for_each(|i| failed(i, io::ErrorKind::NotFound.into()));
            return;
        };
        let gso = &mut self.gso[socket];
        self.send.send(&s.socket, buf, msgs, chunks, |i, e| {
            let device_refuses = matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL));
            if msgs[i].segment > 0 && device_refuses {
                *gso = false;
            }
            failed(i, e);
        });
    }
    fn send_to(&mut self, socket: usize, datagram: &[u8], dst: SocketAddr) -> io::Result<()> {
        let s = self.sockets.get(socket).ok_or(io::ErrorKind::NotFound)?;
        s.socket.send_to(datagram, dst).map(drop)
    }
}

/// The system's monotonic clock, counted from construction (a clone
/// counts from the same instant).
#[derive(Clone, Copy)]
pub struct SystemClock {
    start: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }
    fn wall_offset(&self) -> i64 {
        let mono = self.now() as i64;
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        wall - mono
    }
}
