//! The seam between the event loop and the operating system: batch-first
//! traits for the TUN device and the path sockets, and the clock.
//!
//! The event loop ([`crate::engine::Engine`]) is generic over these, so it
//! runs unchanged on the real devices ([`crate::linux`]) and on in-memory
//! ones in virtual time ([`crate::mem`]), the way wireguard-go's device
//! runs over `tun.Device`/`conn.Bind` and their test doubles.
//!
//! Invariants every implementation keeps:
//! * nothing blocks: an empty source answers `WouldBlock`;
//! * a batch call moves as many items as it can and says how many; a
//!   failure is reported per message, the others still go;
//! * datagrams from one socket are returned in the order they arrived.

use std::io;
use std::net::SocketAddr;

use mpt_core::Nanos;

use crate::batch::{Chunk, RecvMeta, SendMsg};

/// Packets for a batch read: packet `k` goes into
/// `buf[k * stride + head .. (k + 1) * stride - tail]`.
pub struct Slots<'a> {
    pub buf: &'a mut [u8],
    pub stride: usize,
    /// Room kept in front of each packet (for the tunnel header).
    pub head: usize,
    /// Room kept after each packet (for the AEAD tag).
    pub tail: usize,
}

impl Slots<'_> {
    /// How many packets fit.
    pub fn count(&self) -> usize {
        self.buf.len().checked_div(self.stride).unwrap_or(0)
    }

    /// Where packet `k` goes.
    pub fn packet_mut(&mut self, k: usize) -> &mut [u8] {
        let start = k * self.stride;
        &mut self.buf[start + self.head..start + self.stride - self.tail]
    }
}

/// The TUN device.
pub trait TunDevice {
    /// Reads and writes carry a virtio-net header (TSO/GRO offloads).
    fn offload(&self) -> bool;
    /// The device also hands out and takes UDP super-packets (USO).
    fn uso(&self) -> bool;
    /// Read up to `lens.len()` packets into `slots`, packet `k`'s length
    /// into `lens[k]`; returns how many (at least one) or `WouldBlock`.
    fn read_batch(&mut self, slots: Slots<'_>, lens: &mut [usize]) -> io::Result<usize>;
    /// Write one packet made of `head` (a virtio-net header, or empty)
    /// followed by `pkt`.
    fn write(&mut self, head: &[u8], pkt: &[u8]) -> io::Result<()>;
}

/// The local UDP sockets of the paths, by index (a path's `local_key`).
pub trait PathIo {
    /// How many sockets.
    fn sockets(&self) -> usize;
    /// Whether `socket` takes UDP GSO messages now.
    fn gso(&self, socket: usize) -> bool;
    /// Whether every socket hands over UDP GRO super-datagrams
    /// (`io.udp_gro` in the status; default: no).
    fn gro(&self) -> bool {
        false
    }
    /// The largest UDP GSO message for `socket` now, bytes (0: none).
    fn gso_max_bytes(&self, socket: usize) -> usize {
        if self.gso(socket) {
            crate::batch::GSO_MAX_BYTES
        } else {
            0
        }
    }
    /// Receive up to `bufs.len()` buffers; returns how many, their
    /// metadata in `meta`, or `WouldBlock`.
    fn recv(
        &mut self,
        socket: usize,
        bufs: &mut [Vec<u8>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize>;
    /// Send `msgs` (chunks of `buf`); each refused message is reported to
    /// `failed` with its index.
    fn send(
        &mut self,
        socket: usize,
        buf: &[u8],
        msgs: &[SendMsg],
        chunks: &[Chunk],
        failed: &mut dyn FnMut(usize, io::Error),
    );
    /// Send one datagram (control traffic).
    fn send_to(&mut self, socket: usize, datagram: &[u8], dst: SocketAddr) -> io::Result<()>;
}

/// Monotonic time, and the offset of real time from it.
pub trait Clock {
    /// Nanoseconds on a monotonic clock.
    fn now(&self) -> Nanos;
    /// Real time minus [`Clock::now`], in nanoseconds (for wire
    /// timestamps).
    fn wall_offset(&self) -> i64;
}
