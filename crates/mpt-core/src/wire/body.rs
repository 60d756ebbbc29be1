//! Bodies of control packets: the receiver report that every probe, echo
//! and report packet carries, the probe/echo timestamps, and NACK lists.
//!
//! The receiver report is the feedback of path-aware sending: what the
//! receiver of one direction of a path measured there (bytes and packets
//! received, the highest per-path sequence, the queueing delay, loss by
//! cause). The sender turns consecutive reports into delivery-rate samples
//! (bytes over the reporter's own clock) and congestion signals
//! (`pace.rs`).
//!
//! Invariants: parsing checks the length once and never allocates; every
//! field has a fixed offset; counters are cumulative and wrap, so a lost
//! report loses no information.

use super::{be_u32, be_u64, WireError};

/// Length of a receiver report in bytes (spec constant).
pub const REPORT_BODY_LEN: usize = 40;
/// Shortest probe/echo body in bytes: echo timestamp, hold time, a report
/// and the name's length byte, with an empty name (spec constant).
pub const PROBE_BODY_LEN: usize = 8 + REPORT_BODY_LEN + 1;
/// Longest path name on the wire, in bytes (spec constant; the
/// configuration enforces it).
pub const PATH_NAME_MAX: usize = 32;
/// `queueing_us` value meaning "not measured yet" (spec constant).
pub const QUEUEING_UNKNOWN: u32 = u32::MAX;

/// What the receiver of one direction of a path measured there.
///
/// ```text
///  0  rx bytes         u64  bytes received on this path (datagram lengths)
///  8  rx packets       u64  packets received on this path
/// 16  rx path seq      u32  highest path sequence received here
/// 20  hearing mask     u32  bit i: the reporter hears path i
/// 24  queueing us      u32  smoothed one-way delay above its floor, µs
///                           (u32::MAX: not measured yet)
/// 28  lost link        u32  packets lost with no queue standing
/// 32  lost congestion  u32  packets lost while a queue stood
/// 36  jitter us        u32  RFC 3550 interarrival jitter of this path, µs
///                           (u32::MAX: not measured yet)
/// ```
///
/// The hearing mask tells a peer, on any path, which of its send
/// directions work: a path that fails in one direction only is found from
/// the reports on the other paths, and its working direction stays in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportBody {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_path_seq: u32,
    pub hearing_mask: u32,
    pub queueing_us: u32,
    pub lost_link: u32,
    pub lost_congestion: u32,
    /// RFC 3550 §6.4.1 interarrival jitter, µs; [`QUEUEING_UNKNOWN`] when
    /// not measured yet.
    pub jitter_us: u32,
}

impl ReportBody {
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        let b = body.get(..REPORT_BODY_LEN).ok_or(WireError::Truncated)?;
        Ok(Self {
            rx_bytes: be_u64(b, 0),
            rx_packets: be_u64(b, 8),
            rx_path_seq: be_u32(b, 16),
            hearing_mask: be_u32(b, 20),
            queueing_us: be_u32(b, 24),
            lost_link: be_u32(b, 28),
            lost_congestion: be_u32(b, 32),
            jitter_us: be_u32(b, 36),
        })
    }

    /// Write into `out[..REPORT_BODY_LEN]`.
    pub fn write(&self, out: &mut [u8]) {
        let b = &mut out[..REPORT_BODY_LEN];
        b[0..8].copy_from_slice(&self.rx_bytes.to_be_bytes());
        b[8..16].copy_from_slice(&self.rx_packets.to_be_bytes());
        b[16..20].copy_from_slice(&self.rx_path_seq.to_be_bytes());
        b[20..24].copy_from_slice(&self.hearing_mask.to_be_bytes());
        b[24..28].copy_from_slice(&self.queueing_us.to_be_bytes());
        b[28..32].copy_from_slice(&self.lost_link.to_be_bytes());
        b[32..36].copy_from_slice(&self.lost_congestion.to_be_bytes());
        b[36..40].copy_from_slice(&self.jitter_us.to_be_bytes());
    }
}

/// Body of a [`super::PacketType::ReportFor`]: a receiver report about
/// another of the sender's paths than the one it travels on (version 9).
///
/// ```text
///  0  about: the sender's own id of the path reported on (u8)
///  1  receiver report (40 bytes, [`ReportBody`])
/// ```
///
/// A receiver whose reports on a path no longer arrive (the peer's hearing
/// mask says it does not hear us there: that path's reverse direction is
/// out) sends them on another path, so that the path's forward direction
/// keeps its rate control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportForBody {
    pub about: u8,
    pub report: ReportBody,
}

/// Length of a [`ReportForBody`] (spec constant).
pub const REPORT_FOR_BODY_LEN: usize = 1 + REPORT_BODY_LEN;

impl ReportForBody {
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        let b = body
            .get(..REPORT_FOR_BODY_LEN)
            .ok_or(WireError::Truncated)?;
        Ok(Self {
            about: b[0],
            report: ReportBody::parse(&b[1..])?,
        })
    }

    /// Write into `out[..REPORT_FOR_BODY_LEN]`.
    pub fn write(&self, out: &mut [u8]) {
        out[0] = self.about;
        self.report.write(&mut out[1..REPORT_FOR_BODY_LEN]);
    }
}

/// The sender's name of the path a probe or echo travels on: how two
/// peers pair their paths (by name, not by their order in the files).
/// At most [`PATH_NAME_MAX`] bytes, kept inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct PathName {
    len: u8,
    bytes: [u8; PATH_NAME_MAX],
}

impl PathName {
    /// `None` when `name` is longer than [`PATH_NAME_MAX`] bytes.
    pub fn new(name: &str) -> Option<Self> {
        let b = name.as_bytes();
        if b.len() > PATH_NAME_MAX {
            return None;
        }
        let mut bytes = [0u8; PATH_NAME_MAX];
        bytes[..b.len()].copy_from_slice(b);
        Some(Self {
            len: b.len() as u8,
            bytes,
        })
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
    /// For logs: the name, with anything that is not UTF-8 replaced.
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl std::fmt::Debug for PathName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.lossy())
    }
}

/// Body of probe and echo packets ([`PROBE_BODY_LEN`] bytes plus the
/// name).
///
/// ```text
///  0  echo timestamp  u32  probe: 0; echo: the probe's header timestamp
///                          (µs mod 2^32, as sent; the prober widens it
///                          against its own clock)
///  4  hold time ns    u32  probe: 0; echo: time between probe arrival and
///                          echo (saturates at 4.29 s)
///  8  receiver report (40 bytes, [`ReportBody`])
/// 48  name length     u8   0 to 32
/// 49  name            the sender's name of this path (UTF-8, as configured)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeBody {
    pub echo_timestamp_us: u32,
    pub hold_ns: u32,
    pub report: ReportBody,
    pub name: PathName,
}

impl ProbeBody {
    /// Parse from a body slice; the caller obtained it from a checked
    /// header of a probe or echo, so the length is already known good,
    /// but this re-checks to stay total.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() < PROBE_BODY_LEN {
            return Err(WireError::Truncated);
        }
        let n = body[PROBE_BODY_LEN - 1] as usize;
        if n > PATH_NAME_MAX {
            return Err(WireError::BadName);
        }
        let name = body
            .get(PROBE_BODY_LEN..PROBE_BODY_LEN + n)
            .ok_or(WireError::Truncated)?;
        let mut bytes = [0u8; PATH_NAME_MAX];
        bytes[..n].copy_from_slice(name);
        Ok(Self {
            echo_timestamp_us: be_u32(body, 0),
            hold_ns: be_u32(body, 4),
            report: ReportBody::parse(&body[8..])?,
            name: PathName {
                len: n as u8,
                bytes,
            },
        })
    }

    /// Length of this body on the wire.
    pub fn len(&self) -> usize {
        PROBE_BODY_LEN + self.name.len as usize
    }

    /// Never empty (the fixed part is always there); for clippy's pairing
    /// with [`ProbeBody::len`].
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Write into `out[..self.len()]`; returns that length.
    pub fn write(&self, out: &mut [u8]) -> usize {
        let n = self.len();
        let b = &mut out[..n];
        b[0..4].copy_from_slice(&self.echo_timestamp_us.to_be_bytes());
        b[4..8].copy_from_slice(&self.hold_ns.to_be_bytes());
        self.report.write(&mut b[8..]);
        b[PROBE_BODY_LEN - 1] = self.name.len;
        b[PROBE_BODY_LEN..].copy_from_slice(self.name.as_bytes());
        n
    }
}

/// Most sequence numbers in one NACK (spec constant).
pub const NACK_MAX_SEQS: usize = 16;

/// What the entries of a NACK name (body byte 2; spec constant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackKind {
    /// Byte 2 = 0: tunnel sequence numbers, each a u64.
    Tunnel,
    /// Byte 2 = 1: packets lost on the recipient's own path with this id
    /// (byte 3), each entry the low 16 bits of a path sequence number (in
    /// a u64, the rest zero), which the recipient widens around what it
    /// sent last on that path. Version 8.
    Path(u8),
}

/// Body of a NACK: `count` (u16, 1 to [`NACK_MAX_SEQS`]), the kind
/// ([`NackKind`]: byte 2, and byte 3 the path of a path NACK, else 0),
/// then `count` big-endian u64 entries. A view: the length is checked
/// once in [`NackBody::parse`].
#[derive(Debug, Clone, Copy)]
pub struct NackBody<'a> {
    kind: NackKind,
    seqs: &'a [u8],
}

impl<'a> NackBody<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        if body.len() < 4 {
            return Err(WireError::Truncated);
        }
        let count = usize::from(u16::from_be_bytes([body[0], body[1]]));
        if count == 0 || count > NACK_MAX_SEQS {
            return Err(WireError::BadType);
        }
        let kind = match body[2] {
            0 => NackKind::Tunnel,
            1 => NackKind::Path(body[3]),
            _ => return Err(WireError::BadType),
        };
        let seqs = body.get(4..4 + 8 * count).ok_or(WireError::Truncated)?;
        Ok(Self { kind, seqs })
    }

    pub fn kind(&self) -> NackKind {
        self.kind
    }

    pub fn len(&self) -> usize {
        self.seqs.len() / 8
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The entries, in the order sent.
    pub fn seqs(&self) -> impl Iterator<Item = u64> + 'a {
        self.seqs.chunks_exact(8).map(|c| be_u64(c, 0))
    }

    /// Write a body of `kind` for `seqs` (1 to [`NACK_MAX_SEQS`] of them)
    /// into `out`; returns its length, or `None` if `out` is too short or
    /// `seqs` empty.
    pub fn write(kind: NackKind, seqs: &[u64], out: &mut [u8]) -> Option<usize> {
        let n = seqs.len();
        let len = 4 + 8 * n;
        if n == 0 || n > NACK_MAX_SEQS || out.len() < len {
            return None;
        }
        out[0..2].copy_from_slice(&(n as u16).to_be_bytes());
        (out[2], out[3]) = match kind {
            NackKind::Tunnel => (0, 0),
            NackKind::Path(p) => (1, p),
        };
        for (i, s) in seqs.iter().enumerate() {
            out[4 + 8 * i..12 + 8 * i].copy_from_slice(&s.to_be_bytes());
        }
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vector: a receiver report with every field distinct.
    const REPORT_VECTOR: [u8; REPORT_BODY_LEN] = [
        0, 0, 0, 0, 0, 0x01, 0x86, 0xa0, // rx bytes 100000
        0, 0, 0, 0, 0, 0, 0x01, 0x00, // rx packets 256
        0, 0, 0, 0xff, // rx path seq 255
        0, 0, 0, 5, // hearing mask: paths 0 and 2
        0, 0, 0x0b, 0xb8, // queueing 3000 us
        0, 0, 0, 7, // lost link 7
        0, 0, 0, 2, // lost congestion 2
        0, 0, 0x04, 0xb0, // jitter 1200 us
    ];

    fn report() -> ReportBody {
        ReportBody {
            rx_bytes: 100_000,
            rx_packets: 256,
            rx_path_seq: 255,
            hearing_mask: 0b101,
            queueing_us: 3000,
            lost_link: 7,
            lost_congestion: 2,
            jitter_us: 1200,
        }
    }

    #[test]
    fn report_vector_roundtrip() {
        let mut out = [0u8; REPORT_BODY_LEN];
        report().write(&mut out);
        assert_eq!(out, REPORT_VECTOR);
        assert_eq!(ReportBody::parse(&REPORT_VECTOR).unwrap(), report());
        assert_eq!(
            ReportBody::parse(&REPORT_VECTOR[..REPORT_BODY_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn report_for_vector_roundtrip() {
        // About the sender's path 3: its id, then the report's vector.
        let mut v = [0u8; REPORT_FOR_BODY_LEN];
        v[0] = 0x03;
        v[1..].copy_from_slice(&REPORT_VECTOR);
        let body = ReportForBody {
            about: 3,
            report: report(),
        };
        let mut out = [0u8; REPORT_FOR_BODY_LEN];
        body.write(&mut out);
        assert_eq!(out, v);
        assert_eq!(ReportForBody::parse(&v).unwrap(), body);
        assert_eq!(
            ReportForBody::parse(&v[..REPORT_FOR_BODY_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn probe_body_vector_roundtrip() {
        let mut v = [0u8; PROBE_BODY_LEN + 4];
        v[..8].copy_from_slice(&[
            0, 0, 0x0f, 0xa0, // echo ts 4000 us
            0, 0, 0, 50, // hold 50 ns
        ]);
        v[8..48].copy_from_slice(&REPORT_VECTOR);
        v[48..].copy_from_slice(&[4, b'w', b'i', b'f', b'i']); // name "wifi"
        let b = ProbeBody {
            echo_timestamp_us: 4000,
            hold_ns: 50,
            report: report(),
            name: PathName::new("wifi").unwrap(),
        };
        let mut out = [0u8; PROBE_BODY_LEN + 4];
        assert_eq!(b.write(&mut out), PROBE_BODY_LEN + 4);
        assert_eq!(out, v);
        assert_eq!(ProbeBody::parse(&v).unwrap(), b);
        // The name cut short, the fixed part cut short.
        assert_eq!(
            ProbeBody::parse(&v[..PROBE_BODY_LEN + 3]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            ProbeBody::parse(&v[..PROBE_BODY_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
        // A name longer than the limit, whatever follows.
        let mut long = [0u8; PROBE_BODY_LEN + 40];
        long[PROBE_BODY_LEN - 1] = 33;
        assert_eq!(ProbeBody::parse(&long).unwrap_err(), WireError::BadName);
        // An empty name is allowed (a peer with unnamed paths).
        let mut empty = v;
        empty[48] = 0;
        assert_eq!(
            ProbeBody::parse(&empty[..PROBE_BODY_LEN]).unwrap().name,
            PathName::default()
        );
        assert!(PathName::new(&"x".repeat(PATH_NAME_MAX + 1)).is_none());
    }

    #[test]
    fn nack_body_vector_and_limits() {
        const NACK_VECTOR: [u8; 20] = [
            0x00, 0x02, 0x00, 0x00, // two sequence numbers, reserved
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, // 256
            0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, // 2^32 + 7
        ];
        let b = NackBody::parse(&NACK_VECTOR).unwrap();
        assert_eq!(b.seqs().collect::<Vec<_>>(), vec![256, (1 << 32) + 7]);
        let mut out = [0xffu8; 32];
        assert_eq!(b.kind(), NackKind::Tunnel);
        assert_eq!(
            NackBody::write(NackKind::Tunnel, &[256, (1 << 32) + 7], &mut out),
            Some(20)
        );
        assert_eq!(out[..20], NACK_VECTOR);
        // A path NACK: path 3, path sequence numbers 65535 and 1.
        const PATH_VECTOR: [u8; 20] = [
            0x00, 0x02, 0x01, 0x03, // two entries, kind 1 (path), path 3
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, // 65535
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // 1
        ];
        let b = NackBody::parse(&PATH_VECTOR).unwrap();
        assert_eq!(b.kind(), NackKind::Path(3));
        assert_eq!(b.seqs().collect::<Vec<_>>(), vec![65535, 1]);
        assert_eq!(
            NackBody::write(NackKind::Path(3), &[65535, 1], &mut out),
            Some(20)
        );
        assert_eq!(out[..20], PATH_VECTOR);
        let mut unknown = PATH_VECTOR;
        unknown[2] = 2;
        assert_eq!(NackBody::parse(&unknown).err(), Some(WireError::BadType));
        // Truncated list, zero and too many entries, no room.
        assert_eq!(
            NackBody::parse(&NACK_VECTOR[..19]).err(),
            Some(WireError::Truncated)
        );
        assert_eq!(
            NackBody::parse(&[0, 0, 0, 0]).err(),
            Some(WireError::BadType)
        );
        let mut many = vec![0u8; 4 + 8 * (NACK_MAX_SEQS + 1)];
        many[1] = (NACK_MAX_SEQS + 1) as u8;
        assert_eq!(NackBody::parse(&many).err(), Some(WireError::BadType));
        assert_eq!(NackBody::write(NackKind::Tunnel, &[], &mut out), None);
        assert_eq!(
            NackBody::write(NackKind::Tunnel, &[1; NACK_MAX_SEQS + 1], &mut [0u8; 512]),
            None
        );
        assert_eq!(
            NackBody::write(NackKind::Tunnel, &[1, 2], &mut out[..19]),
            None
        );
    }
}
