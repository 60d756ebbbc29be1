//! Wire format of mpt packets (see `docs/protocol.md` for the byte diagram).
//!
//! Every mpt packet is one UDP datagram that starts with a fixed 24-byte
//! header, followed by a type-specific body:
//!
//! ```text
//!  0       1       2       3
//! +-------+-------+-------+-------+
//! |version| type  | path  | class |   0   class: QoS class index (low 7
//! |       |       |       |       |       bits); bit 7 set: real-time,
//! |       |       |       |       |       delivered on arrival
//! +-------+-------+-------+-------+
//! |          session id           |   4   (0 = plaintext or handshake)
//! +-------+-------+-------+-------+
//! |   packet counter (nonce), u48 |   8   unique per sender and session
//! +       +-------+-------+-------+
//! |       | path seq, u16 |          14  per path, every packet type
//! +-------+-------+-------+-------+
//! |  send timestamp, u32 µs       |  16   sender's UTC clock mod 2^32 µs
//! +-------+-------+-------+-------+
//! |  tunnel sequence, u32         |  20   data: its sequence number mod 2^32
//! +-------+-------+-------+-------+       (real-time: in their own space);
//!                                         probe/echo/report/NACK: next to send
//! |  body ...                     |  24
//! ```
//!
//! All integers are big-endian (network order). The authenticated-encryption
//! layer treats bytes 0..24 as associated data, encrypts the body in place
//! and appends a 16-byte tag; [`TAG_RESERVE_LEN`] is reserved in the default
//! tunnel MTU.
//!
//! The three narrow fields are truncations of wider values that only the
//! sender knows in full; the receiver widens each to the full value nearest
//! a reference it holds ([`widen_u16`], [`widen_u32`], [`widen_timestamp_ns`]),
//! as RTP extends its 16-bit sequence (RFC 3550 §A.1). This holds while the
//! reference stays within half the field's range of the truth: 32 768
//! packets on one path, 2^31 tunnel packets, 35 minutes of clock.
//!
//! Invariants: a [`Header`] view is only constructed through
//! [`Header::new_checked`], which verifies the length once; afterwards every
//! accessor indexes within the checked bounds and cannot panic. Parsing never
//! allocates. [`HeaderFields`] holds exactly what is on the wire, so a parsed
//! header re-encodes to the same bytes.

mod body;
mod fragment;
mod hint;
mod repair;

pub use body::{
    NackBody, NackKind, PathName, ProbeBody, ReportBody, ReportForBody, NACK_MAX_SEQS,
    PATH_NAME_MAX, PROBE_BODY_LEN, QUEUEING_UNKNOWN, REPORT_BODY_LEN, REPORT_FOR_BODY_LEN,
};
pub use fragment::{
    piece_range, pieces, write_fragment_header, Fragment, FRAGMENT_HEADER_LEN, MAX_FRAGMENTS,
};
pub use hint::{SessionUnknownBody, SESSION_UNKNOWN_BODY_LEN};
pub use repair::{
    RepairBody, REPAIR_HEADER_LEN, REPAIR_ORIGINALS_MAX, REPAIR_SHARDS_MAX, REPAIR_SHARD_MAX,
};

use crate::PathId;

/// Protocol version carried in byte 0 (spec constant). Version 2: handshake
/// announcements and MACs, cookie replies, path validation, per-path
/// hearing masks in probes. Version 3: receiver reports (type 10, and in
/// every probe and echo) with bytes received, queueing delay and loss by
/// cause, the feedback of path-aware sending. Version 4: the 24-byte
/// header (narrow counter, path sequence, timestamp and tunnel sequence),
/// the receiver's jitter in reports, 32-bit echo timestamps. Version 5:
/// the class byte is the sender's QoS class, with [`CLASS_UNORDERED`] for
/// real-time packets and their own sequence numbers. Version 6: the path
/// id is the sender's own, and probes and echoes name their path, so peers
/// pair paths by name (`tunnel/pairing.rs`). Version 7: fragments (type
/// 11), so that the tunnel's MTU may exceed what one datagram carries.
/// Version 8: path NACKs ([`NackKind::Path`]), which name packets lost on
/// one path by their path sequence numbers. Version 9: reports about one
/// path carried on another ([`PacketType::ReportFor`]), for a path whose
/// reverse direction is out. Version 10: repair packets (type 13,
/// [`RepairBody`]), forward error correction over a path's data. Version
/// 11: session-unknown hints (type 14, [`SessionUnknownBody`]), so that a
/// client finds a restarted server within a round trip.
pub const VERSION: u8 = 11;
/// Class-byte flag of a real-time data packet: its tunnel sequence counts
/// real-time packets only, and the receiver delivers it on arrival
/// without reordering, dropping duplicates (spec constant).
pub const CLASS_UNORDERED: u8 = 0x80;
/// Length of the fixed header in bytes (spec constant).
pub const HEADER_LEN: usize = 24;
/// The packet counter's width: 48 bits (spec constant). A session never
/// sends a counter at or above this (`crypto::knobs::REJECT_AFTER_PACKETS`).
pub const COUNTER_LIMIT: u64 = 1 << 48;
/// Length of the token of a path challenge or response (spec constant).
pub const PATH_TOKEN_LEN: usize = 8;
/// Bytes reserved after the body for an AEAD tag (spec constant, RFC 8439).
pub const TAG_RESERVE_LEN: usize = 16;
/// UDP header length (RFC 768).
pub const UDP_HEADER_LEN: usize = 8;
/// IPv4 header length without options (RFC 791).
pub const IPV4_HEADER_LEN: usize = crate::ip::IPV4_HEADER_LEN;
/// IPv6 fixed header length (RFC 8200).
pub const IPV6_HEADER_LEN: usize = crate::ip::IPV6_HEADER_LEN;
/// Smallest MTU that IPv6 allows on a link (RFC 8200 §5); the tunnel MTU is
/// never configured below the IPv4 minimum of 576 nor above 65535.
pub const IPV6_MIN_MTU: usize = 1280;

/// Offset of the type byte (spec constant; for steering outside the core).
pub const TYPE_OFFSET: usize = off::TYPE;
/// Offset of the session id (spec constant; for steering outside the core).
pub const SESSION_OFFSET: usize = off::SESSION;

mod off {
    pub const VERSION: usize = 0;
    pub const TYPE: usize = 1;
    pub const PATH: usize = 2;
    pub const CLASS: usize = 3;
    pub const SESSION: usize = 4;
    pub const COUNTER: usize = 8;
    pub const PATH_SEQ: usize = 14;
    pub const TIMESTAMP: usize = 16;
    pub const TUNNEL_SEQ: usize = 20;
}

/// Packet types (byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PacketType {
    /// Carries one inner IP packet as its body.
    Data = 1,
    /// Keepalive and RTT probe; the peer answers with an [`PacketType::Echo`].
    Probe = 2,
    /// Answer to a probe, echoing its timestamp.
    Echo = 3,
    /// Handshake initiation (client to server), see `crypto::handshake`.
    HandshakeInit = 4,
    /// Handshake response (server to client).
    HandshakeResponse = 5,
    /// Negative acknowledgement: data sequence numbers the receiver is
    /// missing and asks to be sent again ([`NackBody`]; loss recovery).
    Nack = 6,
    /// Answer to an initiation under load: a cookie for the initiator's
    /// address (`crypto::cookie`), sent in the clear.
    CookieReply = 7,
    /// Validation of a peer's new address: an encrypted random token that
    /// only the real peer can read and return (RFC 9000 §8.2).
    PathChallenge = 8,
    /// The token of a [`PacketType::PathChallenge`], returned.
    PathResponse = 9,
    /// A receiver report alone ([`ReportBody`]): sent on a path every few
    /// milliseconds while data arrives on it, not answered.
    Report = 10,
    /// One piece of an inner packet too large for one datagram
    /// ([`Fragment`]); the pieces carry consecutive tunnel sequence numbers.
    Fragment = 11,
    /// A receiver report about another of the sender's paths
    /// ([`ReportForBody`]): sent while that path's own reports do not
    /// arrive (its reverse direction is out), not answered.
    ReportFor = 12,
    /// A recovery shard of a block of data packets a path carried
    /// ([`RepairBody`], forward error correction).
    Repair = 13,
    /// A responder's answer, in the clear, to a sealed datagram naming a
    /// session it does not hold ([`SessionUnknownBody`]): the initiator
    /// handshakes at once instead of after its paths' silence.
    SessionUnknown = 14,
}

impl PacketType {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Data),
            2 => Some(Self::Probe),
            3 => Some(Self::Echo),
            4 => Some(Self::HandshakeInit),
            5 => Some(Self::HandshakeResponse),
            6 => Some(Self::Nack),
            7 => Some(Self::CookieReply),
            8 => Some(Self::PathChallenge),
            9 => Some(Self::PathResponse),
            10 => Some(Self::Report),
            11 => Some(Self::Fragment),
            12 => Some(Self::ReportFor),
            13 => Some(Self::Repair),
            14 => Some(Self::SessionUnknown),
            _ => None,
        }
    }
}

/// Why a datagram could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the fixed header or the body its type requires.
    Truncated,
    /// Version byte is not [`VERSION`].
    BadVersion,
    /// Type byte is unknown.
    BadType,
    /// A probe or echo names its path with more than
    /// [`PATH_NAME_MAX`] bytes.
    BadName,
    /// A fragment's index or count is out of range ([`Fragment::parse`]).
    BadFragment,
    /// A repair body's fields are out of range ([`RepairBody::parse`]).
    BadRepair,
}

/// Header fields as plain values, exactly as wide as on the wire; used to
/// build packets. Senders truncate with [`timestamp_us`] and `as` casts;
/// receivers widen with [`widen_u16`], [`widen_u32`], [`widen_timestamp_ns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderFields {
    pub path: PathId,
    pub class: u8,
    pub session: u32,
    /// Below [`COUNTER_LIMIT`]; higher bits are not sent.
    pub counter: u64,
    pub path_seq: u16,
    pub timestamp_us: u32,
    pub tunnel_seq: u32,
}

/// The header's timestamp for a wall-clock time in ns since the UNIX epoch:
/// microseconds, modulo 2^32 (wraps every 71.6 minutes).
pub fn timestamp_us(wall_ns: u64) -> u32 {
    (wall_ns / 1000) as u32
}

/// The time in ns whose [`timestamp_us`] is `ts_us` and which lies nearest
/// `near_ns` (within ±35.8 minutes); microsecond precision.
pub fn widen_timestamp_ns(ts_us: u32, near_ns: u64) -> u64 {
    widen_u32(ts_us, near_ns / 1000).saturating_mul(1000)
}

/// The value whose low 32 bits are `v` and which lies nearest `near`
/// (within ±2^31); never below 0.
pub fn widen_u32(v: u32, near: u64) -> u64 {
    let delta = v.wrapping_sub(near as u32) as i32;
    near.saturating_add_signed(i64::from(delta))
}

/// The value whose low 16 bits are `v` and which lies nearest `near`
/// (within ±2^15); never below 0.
pub fn widen_u16(v: u16, near: u64) -> u64 {
    let delta = v.wrapping_sub(near as u16) as i16;
    near.saturating_add_signed(i64::from(delta))
}

/// Read-only view of a datagram whose header has been bounds-checked.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    buf: &'a [u8],
    ty: PacketType,
}

pub(crate) fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

pub(crate) fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A 48-bit big-endian integer.
pub(crate) fn be_u48(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a[2..].copy_from_slice(&b[at..at + 6]);
    u64::from_be_bytes(a)
}

pub(crate) fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl<'a> Header<'a> {
    /// Check length, version and type once; afterwards accessors cannot fail.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if buf[off::VERSION] != VERSION {
            return Err(WireError::BadVersion);
        }
        let ty = PacketType::from_u8(buf[off::TYPE]).ok_or(WireError::BadType)?;
        let min_body = match ty {
            PacketType::Probe | PacketType::Echo => PROBE_BODY_LEN,
            PacketType::Report => REPORT_BODY_LEN,
            PacketType::ReportFor => REPORT_FOR_BODY_LEN,
            PacketType::PathChallenge | PacketType::PathResponse => PATH_TOKEN_LEN,
            PacketType::CookieReply => crate::crypto::cookie::COOKIE_REPLY_BODY_LEN,
            PacketType::Fragment => FRAGMENT_HEADER_LEN + 1,
            PacketType::SessionUnknown => SESSION_UNKNOWN_BODY_LEN,
            _ => 0,
        };
        if buf.len() < HEADER_LEN + min_body {
            return Err(WireError::Truncated);
        }
        Ok(Self { buf, ty })
    }

    pub fn packet_type(&self) -> PacketType {
        self.ty
    }
    pub fn path(&self) -> PathId {
        self.buf[off::PATH]
    }
    pub fn class(&self) -> u8 {
        self.buf[off::CLASS]
    }
    pub fn session(&self) -> u32 {
        be_u32(self.buf, off::SESSION)
    }
    pub fn counter(&self) -> u64 {
        be_u48(self.buf, off::COUNTER)
    }
    pub fn path_seq(&self) -> u16 {
        be_u16(self.buf, off::PATH_SEQ)
    }
    pub fn timestamp_us(&self) -> u32 {
        be_u32(self.buf, off::TIMESTAMP)
    }
    pub fn tunnel_seq(&self) -> u32 {
        be_u32(self.buf, off::TUNNEL_SEQ)
    }
    /// Everything after the fixed header.
    pub fn body(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }
    /// All header fields as values.
    pub fn fields(&self) -> HeaderFields {
        HeaderFields {
            path: self.path(),
            class: self.class(),
            session: self.session(),
            counter: self.counter(),
            path_seq: self.path_seq(),
            timestamp_us: self.timestamp_us(),
            tunnel_seq: self.tunnel_seq(),
        }
    }
}

/// Write a header for `ty` into `out[..HEADER_LEN]`.
///
/// # Panics
/// If `out` is shorter than [`HEADER_LEN`]; callers size buffers statically.
/// A counter at or above [`COUNTER_LIMIT`] loses its high bits (sessions
/// stop before; debug builds assert).
pub fn write_header(out: &mut [u8], ty: PacketType, f: &HeaderFields) {
    debug_assert!(f.counter < COUNTER_LIMIT, "counter beyond 48 bits");
    let h = &mut out[..HEADER_LEN];
    h[off::VERSION] = VERSION;
    h[off::TYPE] = ty as u8;
    h[off::PATH] = f.path;
    h[off::CLASS] = f.class;
    h[off::SESSION..off::SESSION + 4].copy_from_slice(&f.session.to_be_bytes());
    h[off::COUNTER..off::COUNTER + 6].copy_from_slice(&f.counter.to_be_bytes()[2..]);
    h[off::PATH_SEQ..off::PATH_SEQ + 2].copy_from_slice(&f.path_seq.to_be_bytes());
    h[off::TIMESTAMP..off::TIMESTAMP + 4].copy_from_slice(&f.timestamp_us.to_be_bytes());
    h[off::TUNNEL_SEQ..off::TUNNEL_SEQ + 4].copy_from_slice(&f.tunnel_seq.to_be_bytes());
}

/// IP version of an inner packet, from its first nibble, or `None` if the
/// bytes cannot be an IPv4 or IPv6 packet of plausible length.
pub fn inner_ip_version(pkt: &[u8]) -> Option<u8> {
    crate::ip::Ip::parse(pkt).map(|ip| ip.version)
}

/// DSCP/ECN byte of an inner packet (IPv4 TOS or IPv6 traffic class), used as
/// the default traffic class on the wire. Returns 0 for non-IP bytes.
pub fn inner_traffic_class(pkt: &[u8]) -> u8 {
    crate::ip::Ip::parse(pkt).map_or(0, |ip| ip.traffic_class(pkt))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vector: a data header with every field distinct.
    const DATA_VECTOR: [u8; HEADER_LEN] = [
        0x0b, 0x01, 0x05, 0x83, // version 11, data, path 5, class 3, real-time
        0x00, 0x00, 0x00, 0x00, // session 0
        0x01, 0x00, 0x00, 0x00, 0x01, 0x02, // counter 2^40 + 258
        0x00, 0x2a, // path seq 42
        0x4d, 0x5e, 0x6f, 0x70, // timestamp (µs mod 2^32)
        0x80, 0x00, 0x00, 0x07, // tunnel seq 2^31 + 7
    ];

    fn data_fields() -> HeaderFields {
        HeaderFields {
            path: 5,
            class: 0x83,
            session: 0,
            counter: (1 << 40) + 258,
            path_seq: 42,
            timestamp_us: 0x4d5e_6f70,
            tunnel_seq: (1 << 31) + 7,
        }
    }

    #[test]
    fn data_header_encodes_to_vector() {
        let mut out = [0u8; HEADER_LEN];
        write_header(&mut out, PacketType::Data, &data_fields());
        assert_eq!(out, DATA_VECTOR);
    }

    #[test]
    fn data_header_decodes_from_vector() {
        let h = Header::new_checked(&DATA_VECTOR).unwrap();
        assert_eq!(h.packet_type(), PacketType::Data);
        assert_eq!(h.fields(), data_fields());
        assert!(h.body().is_empty());
    }

    /// Test vector: an echo header (its body's vector is in `body.rs`).
    const ECHO_HEADER_VECTOR: [u8; HEADER_LEN] = [
        0x0b, 0x03, 0x00, 0x00, // version 11, echo, path 0, class 0
        0xde, 0xad, 0xbe, 0xef, // session
        0, 0, 0, 0, 0, 9, // counter 9
        0, 3, // path seq 3
        0, 0, 0x10, 0x00, // timestamp 4096 µs
        0, 0, 0, 100, // next tunnel seq 100
    ];

    #[test]
    fn echo_header_vector_and_body_length() {
        let f = HeaderFields {
            path: 0,
            class: 0,
            session: 0xdead_beef,
            counter: 9,
            path_seq: 3,
            timestamp_us: 4096,
            tunnel_seq: 100,
        };
        let mut out = [0u8; HEADER_LEN + PROBE_BODY_LEN];
        write_header(&mut out, PacketType::Echo, &f);
        assert_eq!(out[..HEADER_LEN], ECHO_HEADER_VECTOR);
        let h = Header::new_checked(&out).unwrap();
        assert_eq!(h.packet_type(), PacketType::Echo);
        assert_eq!(h.fields(), f);
        assert_eq!(h.body().len(), PROBE_BODY_LEN);
        // The echo needs its whole body, a report its report.
        assert_eq!(
            Header::new_checked(&out[..out.len() - 1]).unwrap_err(),
            WireError::Truncated
        );
        out[1] = PacketType::ReportFor as u8;
        assert!(Header::new_checked(&out[..HEADER_LEN + REPORT_FOR_BODY_LEN]).is_ok());
        assert_eq!(
            Header::new_checked(&out[..HEADER_LEN + REPORT_FOR_BODY_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
        out[1] = PacketType::Report as u8;
        assert!(Header::new_checked(&out[..HEADER_LEN + REPORT_BODY_LEN]).is_ok());
        assert_eq!(
            Header::new_checked(&out[..HEADER_LEN + REPORT_BODY_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn rejects_bad_inputs() {
        assert_eq!(Header::new_checked(&[]).unwrap_err(), WireError::Truncated);
        assert_eq!(
            Header::new_checked(&DATA_VECTOR[..HEADER_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
        let mut v = DATA_VECTOR;
        v[0] = 1;
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        v[0] = 3; // the 36-byte header of version 3
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        v[0] = 5; // version 5: paths paired by order, unnamed probes
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        v[0] = 6; // version 6: no fragments
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        v[0] = 8; // version 8: no reports carried for another path
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        v[0] = 9; // version 9: no repair packets
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        v[0] = 10; // version 10: no session-unknown hints
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadVersion);
        let mut v = DATA_VECTOR;
        v[1] = 0;
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadType);
        v[1] = 15;
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadType);
        // A session-unknown hint needs its 8-byte body.
        let mut d = [0u8; HEADER_LEN + SESSION_UNKNOWN_BODY_LEN];
        d[..HEADER_LEN].copy_from_slice(&DATA_VECTOR);
        d[1] = PacketType::SessionUnknown as u8;
        assert!(Header::new_checked(&d).is_ok());
        assert_eq!(
            Header::new_checked(&d[..d.len() - 1]).unwrap_err(),
            WireError::Truncated
        );
        // A fragment needs its two-byte header and a piece.
        let mut d = [0u8; HEADER_LEN + FRAGMENT_HEADER_LEN + 1];
        d[..HEADER_LEN].copy_from_slice(&DATA_VECTOR);
        d[1] = PacketType::Fragment as u8;
        assert!(Header::new_checked(&d).is_ok());
        assert_eq!(
            Header::new_checked(&d[..d.len() - 1]).unwrap_err(),
            WireError::Truncated
        );
        // Types with a body need it: cookie reply, path challenge/response.
        for (ty, need) in [(7u8, 60usize), (8, PATH_TOKEN_LEN), (9, PATH_TOKEN_LEN)] {
            let mut d = vec![0u8; HEADER_LEN + need];
            d[..HEADER_LEN].copy_from_slice(&DATA_VECTOR);
            d[1] = ty;
            assert!(Header::new_checked(&d).is_ok(), "{ty}");
            assert_eq!(
                Header::new_checked(&d[..d.len() - 1]).unwrap_err(),
                WireError::Truncated,
                "{ty}"
            );
        }
        // A probe type with no body is truncated.
        let mut v = DATA_VECTOR;
        v[1] = PacketType::Probe as u8;
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::Truncated);
        assert_eq!(
            ProbeBody::parse(&[0; PROBE_BODY_LEN - 1]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn narrow_fields_widen_to_the_nearest_value() {
        // Sequences: forwards, backwards and across the wrap.
        assert_eq!(widen_u32(7, 5), 7);
        assert_eq!(widen_u32(3, 5), 3);
        assert_eq!(widen_u32(2, u64::from(u32::MAX) - 1), (1 << 32) + 2);
        assert_eq!(widen_u32(u32::MAX, 1 << 32), u64::from(u32::MAX));
        assert_eq!(widen_u32(u32::MAX, 0), 0, "never below 0");
        assert_eq!(widen_u16(1, 65_535), 65_537);
        assert_eq!(widen_u16(65_535, 65_537), 65_535);
        assert_eq!(widen_u16(100, 3 << 16), (3 << 16) + 100);
        // Timestamps: exact to the microsecond within ±35 minutes.
        let t = 1_790_000_000_123_456_789u64;
        let ts = timestamp_us(t);
        for near in [t, t - 30 * 60 * 1_000_000_000, t + 30 * 60 * 1_000_000_000] {
            assert_eq!(widen_timestamp_ns(ts, near), t / 1000 * 1000);
        }
    }

    #[test]
    fn inner_packet_classification() {
        let mut v4 = [0u8; 20];
        v4[0] = 0x45;
        v4[1] = 0xb8;
        assert_eq!(inner_ip_version(&v4), Some(4));
        assert_eq!(inner_traffic_class(&v4), 0xb8);
        let mut v6 = [0u8; 40];
        v6[0] = 0x6b;
        v6[1] = 0x80;
        assert_eq!(inner_ip_version(&v6), Some(6));
        assert_eq!(inner_traffic_class(&v6), 0xb8);
        assert_eq!(inner_ip_version(&v6[..39]), None);
        assert_eq!(inner_ip_version(&[0x55; 64]), None);
        assert_eq!(inner_ip_version(&[]), None);
    }
}
