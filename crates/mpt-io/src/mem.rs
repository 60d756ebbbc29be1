//! The seam's in-memory side: a TUN device, path sockets joined by a
//! network with delays, and a clock that only moves when told, so that the
//! event loop runs without root and in virtual time (like wireguard-go's
//! `tuntest` and `bindtest`).
//!
//! Invariants:
//! * a datagram is received no earlier than its send time plus its link's
//!   delay, and datagrams between two sockets arrive in the order sent;
//! * a GSO message is cut into datagrams exactly as the kernel does;
//! * nothing is lost unless a link is down or a failure was injected; every
//!   datagram sent is recorded for the test to look at.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use mpt_core::Nanos;

use crate::batch::{Chunk, RecvMeta, SendMsg};
use crate::seam::{Clock, PathIo, Slots, TunDevice};

/// A clock that only moves when told. Clones share the time.
#[derive(Clone, Default)]
pub struct VirtualClock(Rc<Cell<Nanos>>);

impl VirtualClock {
    pub fn set(&self, t: Nanos) {
        self.0.set(t);
    }
    pub fn advance(&self, d: Nanos) {
        self.0.set(self.0.get() + d);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Nanos {
        self.0.get()
    }
    fn wall_offset(&self) -> i64 {
        0
    }
}

/// What a test can see and change of a [`MemTun`].
#[derive(Default)]
pub struct TunState {
    /// Packets the applications send, read by the loop (with the virtio
    /// header first when offloads are on).
    pub inbound: VecDeque<Vec<u8>>,
    /// Packets the loop wrote (header and packet joined).
    pub written: Vec<Vec<u8>>,
    /// Fail every write from now on.
    pub fail_writes: bool,
    /// Read calls made.
    pub reads: u64,
}

/// An in-memory TUN device; clone the [`MemTun::state`] handle first.
pub struct MemTun {
    pub state: Rc<RefCell<TunState>>,
    offload: bool,
    uso: bool,
}

impl MemTun {
    pub fn new(offload: bool, uso: bool) -> Self {
        Self {
            state: Rc::default(),
            offload,
            uso,
        }
    }
}

impl TunDevice for MemTun {
    fn offload(&self) -> bool {
        self.offload
    }
    fn uso(&self) -> bool {
        self.uso
    }
    fn read_batch(&mut self, mut slots: Slots<'_>, lens: &mut [usize]) -> io::Result<usize> {
        let mut st = self.state.borrow_mut();
        st.reads += 1;
        let want = lens.len().min(slots.count());
        let mut n = 0;
        while n < want {
            let Some(p) = st.inbound.pop_front() else {
                break;
            };
            let dst = slots.packet_mut(n);
            let len = p.len().min(dst.len());
            dst[..len].copy_from_slice(&p[..len]);
            lens[n] = len;
            n += 1;
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
    fn write(&mut self, head: &[u8], pkt: &[u8]) -> io::Result<()> {
        let mut st = self.state.borrow_mut();
        if st.fail_writes {
            return Err(io::Error::other("injected write failure"));
        }
        st.written.push([head, pkt].concat());
        Ok(())
    }
}

/// A datagram on the in-memory network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wire {
    pub sent_at: Nanos,
    pub arrives: Nanos,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
}

/// The network between [`MemPaths`]: per-source links with a delay.
#[derive(Default)]
pub struct NetState {
    /// In flight, in send order.
    pub in_flight: Vec<Wire>,
    /// Every datagram ever sent.
    pub log: Vec<Wire>,
    /// One-way delay by sending socket address (default 1 ms).
    pub delay: HashMap<SocketAddr, Nanos>,
    /// Sending socket addresses whose link is down (datagrams vanish).
    pub down: Vec<SocketAddr>,
}

/// A handle on the in-memory network; clones share it.
#[derive(Clone, Default)]
pub struct MemNet(pub Rc<RefCell<NetState>>);

/// One step of a virtual-time run: move `clock` to the next datagram's
/// arrival on `net` or the next of `timers`, whichever is first (and at
/// least a nanosecond on), and say `true`; if that is after `until` (or
/// there is none), move it to `until` and say `false` (the run ends after
/// one more turn).
pub fn advance(
    net: &MemNet,
    clock: &VirtualClock,
    timers: impl Iterator<Item = Nanos>,
    until: Nanos,
) -> bool {
    let arrival = net.0.borrow().in_flight.iter().map(|w| w.arrives).min();
    let now = clock.now();
    let next = arrival
        .into_iter()
        .chain(timers)
        .map(|t| t.max(now + 1))
        .min();
    match next {
        Some(t) if t <= until => {
            clock.set(t);
            true
        }
        _ => {
            clock.set(until);
            false
        }
    }
}

/// One message passed to [`PathIo::send`], as the fake saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendCall {
    pub socket: usize,
    pub messages: usize,
    pub datagrams: usize,
}

/// In-memory path sockets bound to `locals` on a [`MemNet`].
pub struct MemPaths {
    net: MemNet,
    clock: VirtualClock,
    locals: Vec<SocketAddr>,
    gso: bool,
    /// Every `send` call (batching effectiveness).
    pub calls: Rc<RefCell<Vec<SendCall>>>,
    /// Fail the next sends with this OS error, per message.
    pub fail_with: Rc<Cell<Option<i32>>>,
}

/// Default one-way delay of a link.
pub const DEFAULT_DELAY_NS: Nanos = 1_000_000;

impl MemPaths {
    pub fn new(net: &MemNet, clock: &VirtualClock, locals: Vec<SocketAddr>, gso: bool) -> Self {
        Self {
            net: net.clone(),
            clock: clock.clone(),
            locals,
            gso,
            calls: Rc::default(),
            fail_with: Rc::default(),
        }
    }

    fn put(&self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let now = self.clock.now();
        let mut net = self.net.0.borrow_mut();
        let delay = net.delay.get(&from).copied().unwrap_or(DEFAULT_DELAY_NS);
        let w = Wire {
            sent_at: now,
            arrives: now + delay,
            from,
            to,
            bytes: bytes.to_vec(),
        };
        net.log.push(w.clone());
        if !net.down.contains(&from) {
            net.in_flight.push(w);
        }
    }
}

impl PathIo for MemPaths {
    fn sockets(&self) -> usize {
        self.locals.len()
    }
    fn gso(&self, _socket: usize) -> bool {
        self.gso
    }
    fn recv(
        &mut self,
        socket: usize,
        bufs: &mut [Vec<u8>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let me = *self.locals.get(socket).ok_or(io::ErrorKind::NotFound)?;
        let now = self.clock.now();
        let mut net = self.net.0.borrow_mut();
        let mut n = 0;
        let want = bufs.len().min(meta.len());
        let mut i = 0;
        while i < net.in_flight.len() && n < want {
            let w = &net.in_flight[i];
            if w.to != me || w.arrives > now {
                i += 1;
                continue;
            }
            let w = net.in_flight.remove(i);
            let len = w.bytes.len().min(bufs[n].len());
            bufs[n][..len].copy_from_slice(&w.bytes[..len]);
            meta[n] = RecvMeta {
                from: Some(w.from),
                len,
                segment: len.max(1),
                tos: 0,
            };
            n += 1;
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
    fn send(
        &mut self,
        socket: usize,
        buf: &[u8],
        msgs: &[SendMsg],
        chunks: &[Chunk],
        failed: &mut dyn FnMut(usize, io::Error),
    ) {
        let from = self.locals[socket];
        let mut datagrams = 0;
        for (i, m) in msgs.iter().enumerate() {
            if let Some(errno) = self.fail_with.get() {
                failed(i, io::Error::from_raw_os_error(errno));
                continue;
            }
            let payload: Vec<u8> = chunks[m.first..m.first + m.count]
                .iter()
                .flat_map(|c| &buf[c.start..c.start + c.len])
                .copied()
                .collect();
            let seg = if m.segment > 0 {
                m.segment
            } else {
                payload.len().max(1)
            };
            for d in payload.chunks(seg) {
                self.put(from, m.dst, d);
                datagrams += 1;
            }
        }
        self.calls.borrow_mut().push(SendCall {
            socket,
            messages: msgs.len(),
            datagrams,
        });
    }
    fn send_to(&mut self, socket: usize, datagram: &[u8], dst: SocketAddr) -> io::Result<()> {
        if let Some(errno) = self.fail_with.get() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let from = *self.locals.get(socket).ok_or(io::ErrorKind::NotFound)?;
        self.put(from, dst, datagram);
        Ok(())
    }
}
