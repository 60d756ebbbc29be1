//! Packet capture of a running tunnel (`mpt capture`): pcapng with
//! nanosecond timestamps (`if_tsresol` = 9), written by a thread of its
//! own.
//!
//! Capture points, each an interface of the file:
//! * the TUN (linktype RAW: inner IPv4/IPv6 packets in clear): every
//!   packet mpt sends into the tunnel, and every packet it delivers to the
//!   TUN, each with a comment naming its direction, path, tunnel sequence,
//!   the sender's timestamp and, inbound, the one-way delay (arrival minus
//!   the peer's timestamp: exact between hosts with one clock, as in the
//!   lab; otherwise it includes their clock offset). Inbound packets are
//!   recorded when their datagram arrives; one that the reorder buffer
//!   holds (and delivers later) says `held_for_reordering`;
//! * each requested path's socket (linktype USER0: the UDP payload, i.e.
//!   mpt's datagram as on the wire: its 24-byte header in clear, the body
//!   encrypted), both directions, with the header's fields as a comment.
//!
//! Invariants: the file is created and written on the writer thread only,
//! never the event loop's (a file that blocks, on a slow or hung file
//! system, cannot stall forwarding); off, it costs one branch per batch
//! and per packet; on, the data path only copies a packet into a bounded
//! channel and never waits:
//! when the writer lags, packets are dropped and counted
//! ([`CaptureStats::dropped`]); the capture ends by itself after its count
//! or duration, and the file is complete when the writer thread ends.

use std::borrow::Cow;
use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use mpt_core::wire::{Header, PacketType, HEADER_LEN};
use mpt_core::Nanos;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use serde::Serialize;

/// Records waiting for the writer at most (tuning knob: a few batches of
/// full-size packets, about 6 MiB).
pub const CAPTURE_QUEUE_RECORDS: usize = 4096;

/// Longest capture by time, seconds (tuning knob: a day).
pub const MAX_CAPTURE_S: f64 = 86_400.0;

/// What to capture, as the control request carries it.
#[derive(Debug, Clone)]
pub struct CaptureSpec {
    pub file: PathBuf,
    pub tun: bool,
    /// (socket key, description) of each path asked for.
    pub sockets: Vec<(usize, String)>,
    /// Stop after this many packets written (all interfaces).
    pub count: Option<u64>,
    /// Stop after this long.
    pub seconds: Option<f64>,
}

/// Counters of a capture, shared with the writer thread.
#[derive(Debug, Default, Serialize)]
pub struct CaptureStats {
    /// Packets handed to the writer.
    pub captured: AtomicU64,
    /// Packets not captured because the writer lagged.
    pub dropped: AtomicU64,
    /// Packets written to the file.
    pub written: AtomicU64,
    /// The capture ended (count, time, stop, or a write error).
    pub done: AtomicBool,
    /// The writer finished and closed the file.
    pub closed: AtomicBool,
    /// The writer created the file (on its own thread).
    pub opened: AtomicBool,
    /// Why the file could not be created or written, if so.
    #[serde(skip)]
    pub error: std::sync::Mutex<Option<String>>,
}

struct Record {
    iface: u32,
    wall_ns: u64,
    data: Vec<u8>,
    comment: String,
}

/// The data path's end of a capture. See the module documentation. A
/// clone is another end of the same capture (a concentrator's shards each
/// hold one): same file, counters and packet limit.
#[derive(Debug, Clone)]
pub struct Tap {
    tx: Option<SyncSender<Record>>,
    tun_iface: Option<u32>,
    /// Interface of each socket key captured.
    socket_iface: Vec<Option<u32>>,
    /// Packets still to take (shared by the clones).
    left: Option<Arc<AtomicU64>>,
    until: Option<Nanos>,
    pub stats: Arc<CaptureStats>,
    pub file: PathBuf,
    /// Names of this side's paths by id (comments).
    names: Vec<String>,
}

/// Which way a packet goes.
#[derive(Debug, Clone, Copy)]
pub enum Dir {
    Out,
    In,
}

impl Tap {
    /// Start the writer, which creates `spec.file` on its own thread
    /// (`capture_file.rs`: mode 0600, a fresh file renamed over any
    /// regular file there, links and special files refused; it holds the
    /// inner traffic in clear). What is at the path is checked here first,
    /// without opening it, for an immediate error. `now` is the loop's clock, `names` the paths' names by id.
    pub fn start(
        spec: &CaptureSpec,
        tunnel: &str,
        now: Nanos,
        names: Vec<String>,
    ) -> io::Result<Tap> {
        // What can be told without touching the file is told at once; the
        // file itself is made on the writer thread.
        if let Some(why) = crate::capture_file::check(&spec.file) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        }
        let mut idbs = vec![];
        let mut iface = 0u32;
        let tun_iface = spec.tun.then(|| {
            idbs.push(idb(
                DataLink::RAW,
                format!("{tunnel} (TUN)"),
                "inner packets, in clear".into(),
            ));
            iface += 1;
            iface - 1
        });
        let mut socket_iface = vec![];
        for (key, desc) in &spec.sockets {
            if socket_iface.len() <= *key {
                socket_iface.resize(key + 1, None);
            }
            if socket_iface[*key].is_none() {
                idbs.push(idb(
                    DataLink::USER0,
                    format!("{tunnel} path socket {key}"),
                    format!("mpt datagrams (UDP payload: 24-byte header in clear, body encrypted) of {desc}"),
                ));
                socket_iface[*key] = Some(iface);
                iface += 1;
            }
        }
        let (tx, rx) = mpsc::sync_channel(CAPTURE_QUEUE_RECORDS);
        let stats = Arc::new(CaptureStats::default());
        let st = Arc::clone(&stats);
        let path = spec.file.clone();
        std::thread::Builder::new()
            .name("mpt-capture".into())
            .spawn(move || match crate::capture_file::create(&path) {
                Ok(file) => {
                    st.opened.store(true, Ordering::Release);
                    write_all(file, idbs, &rx, &st);
                }
                Err(e) => {
                    tracing::warn!("capture: {e}");
                    if let Ok(mut slot) = st.error.lock() {
                        *slot = Some(e.to_string());
                    }
                    drop(rx);
                    st.done.store(true, Ordering::Release);
                    st.closed.store(true, Ordering::Release);
                }
            })?;
        Ok(Tap {
            tx: Some(tx),
            tun_iface,
            socket_iface,
            left: spec.count.map(|c| Arc::new(AtomicU64::new(c))),
            // Any number a control client sends is a duration: negative or
            // not a number is none, too large is a day.
            until: spec.seconds.map(|s| {
                let d = Duration::try_from_secs_f64(s.clamp(0.0, MAX_CAPTURE_S))
                    .unwrap_or(Duration::ZERO);
                now.saturating_add(d.as_nanos() as Nanos)
            }),
            stats,
            file: spec.file.clone(),
            names,
        })
    }

    /// Whether the capture takes packets (not stopped); the time limit is
    /// checked by [`Tap::active`], once per turn.
    pub fn active_now(&self) -> bool {
        // A writer that failed (its file could not be made) ended it too.
        self.tx.is_some() && !self.stats.done.load(Ordering::Acquire)
    }

    /// Whether the capture still takes packets at `now` (stops it when its
    /// time is up).
    pub fn active(&mut self, now: Nanos) -> bool {
        if self.tx.is_none() {
            return false;
        }
        let none_left = self
            .left
            .as_ref()
            .is_some_and(|l| l.load(Ordering::Relaxed) == 0);
        if self.until.is_some_and(|u| now >= u) || none_left {
            self.stop();
            return false;
        }
        true
    }

    /// End the capture: the writer finishes what it has and closes the
    /// file.
    pub fn stop(&mut self) {
        self.tx = None;
        self.stats.done.store(true, Ordering::Release);
    }

    fn push(&mut self, iface: u32, wall_ns: u64, data: &[u8], comment: String) {
        if self
            .left
            .as_ref()
            .is_some_and(|l| l.load(Ordering::Relaxed) == 0)
        {
            // Another end of the capture took the last packet.
            self.stop();
            return;
        }
        let Some(tx) = self.tx.as_ref() else {
            return;
        };
        let r = Record {
            iface,
            wall_ns,
            data: data.to_vec(),
            comment,
        };
        match tx.try_send(r) {
            Ok(()) => {
                self.stats.captured.fetch_add(1, Ordering::Relaxed);
                if let Some(l) = self.left.as_ref() {
                    let before = l
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                            Some(v.saturating_sub(1))
                        })
                        .unwrap_or(0);
                    if before <= 1 {
                        self.stop();
                    }
                }
            }
            Err(TrySendError::Full(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => self.stop(),
        }
    }

    fn path_name(&self, id: u8) -> &str {
        self.names.get(id as usize).map_or("?", String::as_str)
    }

    /// A datagram as it leaves or arrives on socket `socket` (wire bytes).
    pub fn datagram(&mut self, dir: Dir, socket: usize, wall_ns: u64, d: &[u8]) {
        let Some(iface) = self.socket_iface.get(socket).copied().flatten() else {
            return;
        };
        let comment = match Header::new_checked(d) {
            Ok(h) => {
                let f = h.fields();
                format!(
                    "{} type={} path_id={} path_seq={} tunnel_seq={} class={} ts_us={}",
                    dir_word(dir),
                    type_name(h.packet_type()),
                    f.path,
                    f.path_seq,
                    f.tunnel_seq,
                    f.class,
                    f.timestamp_us
                )
            }
            Err(_) => format!("{} not an mpt datagram", dir_word(dir)),
        };
        self.push(iface, wall_ns, d, comment);
    }

    /// An inner packet in `dgram[HEADER_LEN..HEADER_LEN + len]`, sent on
    /// or arrived on our path `path` with the datagram's header in
    /// `dgram[..HEADER_LEN]`.
    pub fn inner(
        &mut self,
        dir: Dir,
        path: u8,
        wall_ns: u64,
        dgram: &[u8],
        len: usize,
        held: bool,
    ) {
        let Some(iface) = self.tun_iface else {
            return;
        };
        let Some(pkt) = dgram.get(HEADER_LEN..HEADER_LEN + len) else {
            return;
        };
        let f = match Header::new_checked(dgram) {
            // A fragment's piece is not a packet, nor is a control
            // packet: the datagram capture shows them, the inner one shows
            // packets that travelled whole.
            Ok(h) if h.packet_type() != PacketType::Data => return,
            Ok(h) => h.fields(),
            Err(_) => return,
        };
        let mut comment = format!(
            "{} path={} tunnel_seq={} class={} ts_us={}",
            dir_word(dir),
            self.path_name(path),
            f.tunnel_seq,
            f.class,
            f.timestamp_us
        );
        if matches!(dir, Dir::In) {
            // Arrival minus the peer's stamp, both µs mod 2^32.
            let now_us = (wall_ns / 1000) as u32;
            let owd_us = now_us.wrapping_sub(f.timestamp_us) as i32;
            comment.push_str(&format!(" owd_ms={:.3}", f64::from(owd_us) / 1000.0));
        }
        if held {
            comment.push_str(" held_for_reordering");
        }
        self.push(iface, wall_ns, pkt, comment);
    }

    /// An inner packet at the TUN of a concentrator (`pkt` alone, no
    /// datagram header: read before its peer's tunnel took it, or as it is
    /// written), with `comment` (its peer).
    pub fn packet(&mut self, dir: Dir, wall_ns: u64, pkt: &[u8], comment: &str) {
        let Some(iface) = self.tun_iface else {
            return;
        };
        let comment = format!("{} {comment}", dir_word(dir));
        self.push(iface, wall_ns, pkt, comment);
    }

    /// The capture's state for `capture status`.
    pub fn status(&self) -> serde_json::Value {
        status_of(&self.stats, &self.file)
    }
}

/// A capture request checked against the paths there are (`paths`: name,
/// socket key, local address of each path that may be named): the spec
/// to start, or why not.
pub fn spec_for(
    req: &mpt_control::CaptureSpec,
    paths: &[(&str, usize, std::net::SocketAddr)],
) -> Result<CaptureSpec, String> {
    if req.file.is_empty() {
        return Err("capture needs a file".into());
    }
    let mut sockets = vec![];
    for n in &req.paths {
        match paths.iter().find(|(name, _, _)| name == n) {
            Some((_, key, local)) => sockets.push((*key, format!("path {n} ({local})"))),
            None => {
                let all: Vec<&str> = paths.iter().map(|(name, _, _)| *name).collect();
                return Err(format!(
                    "no path named '{n}'; the paths are: {}",
                    all.join(", ")
                ));
            }
        }
    }
    if !req.tun && sockets.is_empty() {
        return Err("nothing to capture: give the TUN, a path, or both".into());
    }
    Ok(CaptureSpec {
        file: req.file.clone().into(),
        tun: req.tun,
        sockets,
        count: req.count,
        seconds: req.seconds,
    })
}

/// `capture status`: the capture under way or the last one, or that there
/// was none.
pub fn status_answer(tap: Option<&Tap>) -> serde_json::Value {
    match tap {
        Some(t) => t.status(),
        None => serde_json::json!({ "error": "no capture was started" }),
    }
}

/// The JSON of a capture's counters.
pub fn status_of(s: &CaptureStats, file: &std::path::Path) -> serde_json::Value {
    let state = mpt_control::CaptureState {
        file: file.display().to_string(),
        captured: s.captured.load(Ordering::Relaxed),
        dropped: s.dropped.load(Ordering::Relaxed),
        written: s.written.load(Ordering::Relaxed),
        opened: s.opened.load(Ordering::Acquire),
        done: s.done.load(Ordering::Acquire),
        closed: s.closed.load(Ordering::Acquire),
        failed: s.error.lock().ok().and_then(|e| e.clone()),
    };
    serde_json::to_value(state).unwrap_or_default()
}

fn dir_word(d: Dir) -> &'static str {
    match d {
        Dir::Out => "out",
        Dir::In => "in",
    }
}

fn type_name(t: PacketType) -> &'static str {
    match t {
        PacketType::Data => "data",
        PacketType::Probe => "probe",
        PacketType::Echo => "echo",
        PacketType::HandshakeInit => "handshake_init",
        PacketType::HandshakeResponse => "handshake_response",
        PacketType::Nack => "nack",
        PacketType::CookieReply => "cookie_reply",
        PacketType::PathChallenge => "path_challenge",
        PacketType::PathResponse => "path_response",
        PacketType::Report => "report",
        PacketType::ReportFor => "report_for",
        PacketType::Fragment => "fragment",
        PacketType::Repair => "repair",
        PacketType::SessionUnknown => "session_unknown",
    }
}

fn idb(link: DataLink, name: String, desc: String) -> InterfaceDescriptionBlock<'static> {
    InterfaceDescriptionBlock {
        linktype: link,
        snaplen: 0,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Owned(name)),
            InterfaceDescriptionOption::IfDescription(Cow::Owned(desc)),
            // Timestamps in nanoseconds (10^-9 s).
            InterfaceDescriptionOption::IfTsResol(9),
        ],
    }
}

/// The writer thread: interfaces first, then every record until the tap
/// is gone; a write error ends the capture (the tap sees it disconnected).
fn write_all(
    file: std::fs::File,
    idbs: Vec<InterfaceDescriptionBlock<'static>>,
    rx: &Receiver<Record>,
    stats: &CaptureStats,
) {
    let run = || -> Result<(), pcap_file::PcapError> {
        let mut w = PcapNgWriter::new(BufWriter::new(file))?;
        for b in idbs {
            w.write_pcapng_block(b)?;
        }
        while let Ok(r) = rx.recv() {
            let block = EnhancedPacketBlock {
                interface_id: r.iface,
                timestamp: Duration::from_nanos(r.wall_ns),
                original_len: r.data.len() as u32,
                data: Cow::Borrowed(&r.data),
                options: vec![EnhancedPacketOption::Comment(Cow::Borrowed(&r.comment))],
            };
            w.write_pcapng_block(block)?;
            stats.written.fetch_add(1, Ordering::Relaxed);
        }
        io::Write::flush(w.get_mut()).map_err(pcap_file::PcapError::IoError)
    };
    if let Err(e) = run() {
        tracing::warn!("capture: writing the file failed: {e}");
        if let Ok(mut slot) = stats.error.lock() {
            *slot = Some(format!("writing the file failed: {e}"));
        }
    }
    stats.done.store(true, Ordering::Release);
    stats.closed.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A capture of `seconds` and `count` in a scratch file, with the
    /// guard of its directory (removed when the guard drops).
    fn tap(name: &str, seconds: Option<f64>, count: Option<u64>) -> (tempfile::TempDir, Tap) {
        let dir = tempfile::Builder::new()
            .prefix("mpt-cap-")
            .tempdir()
            .unwrap();
        let spec = CaptureSpec {
            file: dir.path().join(name),
            tun: true,
            sockets: vec![(0, "path p".into())],
            count,
            seconds,
        };
        (
            dir,
            Tap::start(&spec, "t", 1_000, vec!["p".into()]).unwrap(),
        )
    }

    #[test]
    fn hostile_durations_neither_panic_nor_run_forever() {
        // Not a number and negative: no time at all; huge: a day.
        assert!(!tap("nan.pcapng", Some(f64::NAN), None).1.active(1_000));
        assert!(!tap("neg.pcapng", Some(-5.0), None).1.active(1_000));
        let (_dir, mut t) = tap("huge.pcapng", Some(1e300), None);
        assert!(t.active(1_000 + 86_000 * 1_000_000_000));
        assert!(!t.active(1_000 + 86_401 * 1_000_000_000));
    }

    #[test]
    fn a_count_ends_the_capture_and_the_file_is_closed() {
        let (_dir, mut t) = tap("count.pcapng", None, Some(2));
        let mut d = vec![0u8; HEADER_LEN + 20];
        let f = mpt_core::wire::HeaderFields::default();
        mpt_core::wire::write_header(&mut d, PacketType::Data, &f);
        d[HEADER_LEN] = 0x45;
        t.inner(Dir::In, 0, 5, &d, 20, false);
        assert!(t.active(2_000));
        t.datagram(Dir::Out, 0, 6, &d);
        assert!(!t.active_now());
        let st = Arc::clone(&t.stats);
        drop(t);
        for _ in 0..200 {
            if st.closed.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(st.written.load(Ordering::Relaxed), 2);
        assert_eq!(st.dropped.load(Ordering::Relaxed), 0);
    }
}
