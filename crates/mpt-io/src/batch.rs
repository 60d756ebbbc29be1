//! Batches of datagrams for the event loop, as plain memory: what was
//! received in one `recvmmsg`, and what goes out in the next `sendmmsg`s.
//! The system calls themselves are behind [`crate::seam::PathIo`].
//!
//! Transmit side: one arena of slots for all sockets ([`TxBatch`]). A TUN
//! packet is read straight into the next slot (at `HEADER_LEN`), the core
//! writes the header in front of it and picks the path, and the slot is
//! committed with its socket, destination and seal ticket: no copy,
//! whichever path the packet takes. Each slot offers room for the largest
//! datagram, but a committed datagram takes only its length: the next
//! slot starts right behind it, so that the datagrams of a GSO message
//! lie back to back and the kernel copies them as one run (one iovec;
//! with a slot per stride, the pieces of a tunnel MTU several datagrams
//! long cost the kernel's copy from user space 40 % more per byte). A
//! batch read takes equal slots (the TUN's packets land at a stride)
//! until it ends. At flush, the committed slots are sealed together (on
//! the workers), then each socket's slots become messages, consecutive
//! datagrams to one destination merged into UDP GSO super-datagrams (one
//! message, several chunks).
//!
//! Invariants:
//! * buffers are allocated once, at construction; a warm batch allocates
//!   nothing per packet;
//! * a GSO message only ever holds datagrams to one destination, all of
//!   one size except possibly a shorter last one (the kernel's rule), at
//!   most [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`];
//! * datagrams of one socket leave in the order they were committed;
//! * a slot is sent only if it was committed and, when it carries a seal
//!   ticket, sealed;
//! * slots never overlap, and every slot handed out has `slot_bytes` of
//!   room within the arena: committed datagrams take at most `slot_bytes`
//!   each, so after `k` slots at most `k * slot_bytes` bytes are taken.

use std::net::SocketAddr;

use mpt_core::concentrator::PeerId;
use mpt_core::tunnel::SealTicket;
use mpt_core::PathId;
pub use mpt_sys::mmsg::{Chunk, RecvMeta, SendMsg};

/// Largest UDP payload of one GSO super-datagram (kernel limit, with room
/// for headers).
pub const GSO_MAX_BYTES: usize = 65_000;
/// Most segments per super-datagram (`UDP_MAX_SEGMENTS` of older kernels).
pub const GSO_MAX_SEGMENTS: usize = 64;

/// A datagram inside a set of buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Index of the buffer.
    pub buf: usize,
    /// Byte offset in it.
    pub offset: usize,
    pub len: usize,
}

/// Receive buffers for one `recvmmsg`, each large enough for a GRO buffer.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
}

impl RecvBatch {
    pub fn new(capacity: usize, buf_bytes: usize) -> Self {
        Self {
            bufs: vec![vec![0u8; buf_bytes]; capacity],
            meta: vec![RecvMeta::default(); capacity],
        }
    }

    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// The buffers and their metadata, for [`crate::seam::PathIo::recv`].
    pub fn parts_mut(&mut self) -> (&mut [Vec<u8>], &mut [RecvMeta]) {
        (&mut self.bufs, &mut self.meta)
    }

    /// Buffer `i` of the last receive.
    pub fn meta(&self, i: usize) -> RecvMeta {
        self.meta[i]
    }

    /// The datagrams of buffer `i` (several when the kernel coalesced
    /// them).
    pub fn datagrams(&self, i: usize) -> impl Iterator<Item = Span> {
        let RecvMeta { len, segment, .. } = self.meta[i];
        let seg = segment.max(1);
        (0..len).step_by(seg).map(move |off| Span {
            buf: i,
            offset: off,
            len: seg.min(len - off),
        })
    }

    /// All receive buffers, for work on many datagrams at once (opening
    /// them in parallel); index them with [`Span`]s.
    pub fn bufs_mut(&mut self) -> &mut [Vec<u8>] {
        &mut self.bufs
    }

    /// Bytes of one datagram, for in-place processing.
    pub fn slice_mut(&mut self, s: Span) -> &mut [u8] {
        &mut self.bufs[s.buf][s.offset..s.offset + s.len]
    }
}

/// Where a committed slot goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxMeta {
    /// Local socket index.
    pub socket: usize,
    pub dst: SocketAddr,
    /// Path id, reported back with send errors.
    pub path: PathId,
    /// Datagram length from the start of the slot.
    pub len: usize,
    /// Seal before sending (`None`: the datagram is complete).
    pub seal: Option<SealTicket>,
    /// Outer TOS / traffic-class byte (0: none set).
    pub tos: u8,
    /// The peer whose tunnel made it (0 for a single tunnel): it seals
    /// the slot and hears of its send errors.
    pub peer: PeerId,
}

/// A message of the last [`TxBatch::messages`]: its path and how many
/// datagrams it holds (for error accounting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgInfo {
    pub peer: PeerId,
    pub path: PathId,
    pub datagrams: usize,
}

/// The committed slots that still need sealing ([`TxBatch::to_seal`]):
/// spans of one buffer, with their tickets and peers (same index).
pub struct ToSeal<'a> {
    pub bufs: &'a mut [Vec<u8>],
    pub spans: &'a [Span],
    pub tickets: &'a [Option<SealTicket>],
    pub peers: &'a [PeerId],
}

/// Transmit slots for all sockets. See the module documentation.
pub struct TxBatch {
    arena: Vec<u8>,
    slot_bytes: usize,
    capacity: usize,
    /// One entry per slot handed out: `None` if skipped or dropped.
    slots: Vec<Option<TxMeta>>,
    /// Where each slot handed out starts in the arena (same index).
    starts: Vec<usize>,
    /// Where the next slot starts, outside a batch read: right behind
    /// the last datagram committed.
    next: usize,
    /// During a batch read ([`TxBatch::free_slots_mut`]): where it
    /// started and how many slots were handed out before it.
    read_base: Option<(usize, usize)>,
    /// Scratch for sealing and for building messages, reused.
    spans: Vec<Span>,
    tickets: Vec<Option<SealTicket>>,
    peers: Vec<PeerId>,
    span_slot: Vec<usize>,
    msgs: Vec<SendMsg>,
    infos: Vec<MsgInfo>,
    chunks: Vec<Chunk>,
}

impl TxBatch {
    /// `capacity` slots of `slot_bytes` each.
    pub fn new(capacity: usize, slot_bytes: usize) -> Self {
        Self {
            arena: vec![0u8; capacity * slot_bytes],
            slot_bytes,
            capacity,
            slots: Vec::with_capacity(capacity),
            starts: Vec::with_capacity(capacity),
            next: 0,
            read_base: None,
            spans: Vec::with_capacity(capacity),
            tickets: Vec::with_capacity(capacity),
            peers: Vec::with_capacity(capacity),
            span_slot: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
            infos: Vec::with_capacity(capacity),
            chunks: Vec::with_capacity(capacity),
        }
    }

    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }
    /// Whether no slot is left: flush first.
    pub fn is_full(&self) -> bool {
        self.slots.len() >= self.capacity
    }
    /// Slots handed out since the last clear.
    pub fn used(&self) -> usize {
        self.slots.len()
    }
    /// Datagrams committed.
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Free slots left.
    pub fn free(&self) -> usize {
        self.capacity - self.slots.len()
    }

    /// The free slots as one buffer of `free()` consecutive slots of
    /// `slot_bytes()` each, for a batch read straight into them: the next
    /// slots handed out are these, in order, until [`TxBatch::end_read`].
    pub fn free_slots_mut(&mut self) -> &mut [u8] {
        self.read_base = Some((self.next, self.slots.len()));
        &mut self.arena[self.next..]
    }

    /// The batch read is over: the next slot starts behind the last
    /// datagram committed.
    pub fn end_read(&mut self) {
        self.read_base = None;
    }

    /// Where the next slot starts.
    fn next_start(&self) -> usize {
        match self.read_base {
            Some((base, before)) => base + (self.slots.len() - before) * self.slot_bytes,
            None => self.next,
        }
    }

    /// The next free slot, to fill and then [`commit`](Self::commit) or
    /// [`skip`](Self::skip).
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.next_start();
        self.arena.get_mut(start..start + self.slot_bytes)
    }

    /// Queue the next slot as `meta` says.
    pub fn commit(&mut self, meta: TxMeta) {
        if !self.is_full() {
            let ok = meta.len <= self.slot_bytes;
            let start = self.next_start();
            self.starts.push(start);
            self.slots.push(ok.then_some(meta));
            if ok {
                self.next = self.next.max(start + meta.len);
            }
        }
    }

    /// Pass over the next slot (its packet was dropped).
    pub fn skip(&mut self) {
        if !self.is_full() {
            let start = self.next_start();
            self.starts.push(start);
            self.slots.push(None);
        }
    }

    /// The committed datagrams, with what they were committed with (for a
    /// capture): before sealing, in clear; after, as they will leave.
    pub fn committed(&self) -> impl Iterator<Item = (&TxMeta, &[u8])> {
        self.slots
            .iter()
            .zip(&self.starts)
            .filter_map(|(m, &start)| {
                let m = m.as_ref()?;
                Some((m, &self.arena[start..start + m.len]))
            })
    }

    /// The committed datagrams that still need sealing, as spans of one
    /// buffer, with their tickets and peers (same index).
    pub fn to_seal(&mut self) -> ToSeal<'_> {
        self.spans.clear();
        self.tickets.clear();
        self.peers.clear();
        self.span_slot.clear();
        for (i, m) in self.slots.iter().enumerate() {
            if let Some(m) = m.filter(|m| m.seal.is_some()) {
                self.spans.push(Span {
                    buf: 0,
                    offset: self.starts[i],
                    len: m.len,
                });
                self.tickets.push(m.seal);
                self.peers.push(m.peer);
                self.span_slot.push(i);
            }
        }
        ToSeal {
            bufs: std::slice::from_mut(&mut self.arena),
            spans: &self.spans,
            tickets: &self.tickets,
            peers: &self.peers,
        }
    }

    /// After sealing the spans of [`to_seal`](Self::to_seal): `ok[j]` says
    /// whether span `j` was sealed. Sealed slots are marked complete;
    /// failed ones are dropped (never sent), each told to `failed` with
    /// its peer.
    pub fn sealed(&mut self, ok: &[bool], mut failed: impl FnMut(PeerId)) {
        for (j, &slot) in self.span_slot.iter().enumerate() {
            let Some(m) = self.slots[slot].as_mut() else {
                continue;
            };
            if ok.get(j).copied().unwrap_or(false) {
                m.seal = None;
            } else {
                failed(m.peer);
                self.slots[slot] = None;
            }
        }
    }

    /// The messages for `socket`: its complete slots in order, merged into
    /// GSO super-datagrams when `gso`. Returns the send buffer, messages,
    /// chunks and per-message info (same index as the messages).
    pub fn messages(
        &mut self,
        socket: usize,
        gso: bool,
    ) -> (&[u8], &[SendMsg], &[Chunk], &[MsgInfo]) {
        self.messages_within(socket, if gso { GSO_MAX_BYTES } else { 0 })
    }

    /// As [`TxBatch::messages`], with super-datagrams of at most
    /// `gso_bytes` (0: none; a socket with a small send buffer takes
    /// smaller ones, so that one message never overflows the interface's
    /// queue at once).
    pub fn messages_within(
        &mut self,
        socket: usize,
        gso_bytes: usize,
    ) -> (&[u8], &[SendMsg], &[Chunk], &[MsgInfo]) {
        let gso = gso_bytes > 0;
        let gso_bytes = gso_bytes.min(GSO_MAX_BYTES);
        self.msgs.clear();
        self.infos.clear();
        self.chunks.clear();
        let mut closed = true;
        for (i, m) in self.slots.iter().enumerate() {
            let Some(m) = m.filter(|m| m.socket == socket && m.seal.is_none()) else {
                continue;
            };
            let chunk = Chunk {
                start: self.starts[i],
                len: m.len,
            };
            if gso && !closed {
                if let (Some(msg), Some(info)) = (self.msgs.last_mut(), self.infos.last_mut()) {
                    let seg = self.chunks[msg.first].len;
                    let joins = msg.dst == m.dst
                        && msg.tos == m.tos
                        && m.len <= seg
                        && info.datagrams < GSO_MAX_SEGMENTS
                        && seg * info.datagrams + m.len <= gso_bytes;
                    if joins {
                        msg.count += 1;
                        info.datagrams += 1;
                        self.chunks.push(chunk);
                        closed = m.len < seg;
                        continue;
                    }
                }
            }
            self.msgs.push(SendMsg {
                dst: m.dst,
                first: self.chunks.len(),
                count: 1,
                segment: 0,
                tos: m.tos,
            });
            self.infos.push(MsgInfo {
                peer: m.peer,
                path: m.path,
                datagrams: 1,
            });
            self.chunks.push(chunk);
            closed = false;
        }
        for (msg, info) in self.msgs.iter_mut().zip(&self.infos) {
            if info.datagrams > 1 {
                msg.segment = self.chunks[msg.first].len;
            }
        }
        (&self.arena, &self.msgs, &self.chunks, &self.infos)
    }

    /// Forget everything queued.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.starts.clear();
        self.next = 0;
        self.read_base = None;
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
