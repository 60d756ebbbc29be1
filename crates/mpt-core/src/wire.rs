//! Wire format of mpt packets (see `docs/protocol.md` for the byte diagram).
//!
//! Every mpt packet is one UDP datagram that starts with a fixed 36-byte
//! header, followed by a type-specific body:
//!
//! ```text
//!  0       1       2       3
//! +-------+-------+-------+-------+
//! |version| type  | path  | class |   0
//! +-------+-------+-------+-------+
//! |          session id           |   4   (0 = plaintext; security issue)
//! +-------+-------+-------+-------+
//! |      packet counter (nonce)   |   8   u64, unique per sender and session
//! |                               |
//! +-------+-------+-------+-------+
//! |        path sequence          |  16   u32, per path, every packet type
//! +-------+-------+-------+-------+
//! |    send timestamp (ns, UTC)   |  20   u64
//! |                               |
//! +-------+-------+-------+-------+
//! |        tunnel sequence        |  28   u64: data = its sequence number;
//! |                               |       probe/echo = next data seq to send
//! +-------+-------+-------+-------+
//! |  body ...                     |  36
//! ```
//!
//! All integers are big-endian (network order). The authenticated-encryption
//! layer (security issue) will treat bytes 0..36 as associated data, encrypt
//! the body in place and append a 16-byte tag; [`TAG_RESERVE_LEN`] is already
//! reserved in the default tunnel MTU so that enabling it changes no MTU.
//!
//! Invariants: a [`Header`] view is only constructed through
//! [`Header::new_checked`], which verifies the length once; afterwards every
//! accessor indexes within the checked bounds and cannot panic. Parsing never
//! allocates.

use crate::PathId;

/// Protocol version carried in byte 0 (spec constant). Version 2: handshake
/// announcements and MACs, cookie replies, path validation, per-path
/// hearing masks in probes.
pub const VERSION: u8 = 2;
/// Length of the fixed header in bytes (spec constant).
pub const HEADER_LEN: usize = 36;
/// Length of a probe/echo body in bytes (spec constant).
pub const PROBE_BODY_LEN: usize = 32;
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

mod off {
    pub const VERSION: usize = 0;
    pub const TYPE: usize = 1;
    pub const PATH: usize = 2;
    pub const CLASS: usize = 3;
    pub const SESSION: usize = 4;
    pub const COUNTER: usize = 8;
    pub const PATH_SEQ: usize = 16;
    pub const TIMESTAMP: usize = 20;
    pub const TUNNEL_SEQ: usize = 28;
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
}

/// Header fields as plain values, used to build packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderFields {
    pub path: PathId,
    pub class: u8,
    pub session: u32,
    pub counter: u64,
    pub path_seq: u32,
    pub timestamp_ns: u64,
    pub tunnel_seq: u64,
}

/// Read-only view of a datagram whose header has been bounds-checked.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    buf: &'a [u8],
    ty: PacketType,
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

fn be_u64(b: &[u8], at: usize) -> u64 {
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
            PacketType::PathChallenge | PacketType::PathResponse => PATH_TOKEN_LEN,
            PacketType::CookieReply => crate::crypto::cookie::COOKIE_REPLY_BODY_LEN,
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
        be_u64(self.buf, off::COUNTER)
    }
    pub fn path_seq(&self) -> u32 {
        be_u32(self.buf, off::PATH_SEQ)
    }
    pub fn timestamp_ns(&self) -> u64 {
        be_u64(self.buf, off::TIMESTAMP)
    }
    pub fn tunnel_seq(&self) -> u64 {
        be_u64(self.buf, off::TUNNEL_SEQ)
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
            timestamp_ns: self.timestamp_ns(),
            tunnel_seq: self.tunnel_seq(),
        }
    }
}

/// Write a header for `ty` into `out[..HEADER_LEN]`.
///
/// # Panics
/// If `out` is shorter than [`HEADER_LEN`]; callers size buffers statically.
pub fn write_header(out: &mut [u8], ty: PacketType, f: &HeaderFields) {
    let h = &mut out[..HEADER_LEN];
    h[off::VERSION] = VERSION;
    h[off::TYPE] = ty as u8;
    h[off::PATH] = f.path;
    h[off::CLASS] = f.class;
    h[off::SESSION..off::SESSION + 4].copy_from_slice(&f.session.to_be_bytes());
    h[off::COUNTER..off::COUNTER + 8].copy_from_slice(&f.counter.to_be_bytes());
    h[off::PATH_SEQ..off::PATH_SEQ + 4].copy_from_slice(&f.path_seq.to_be_bytes());
    h[off::TIMESTAMP..off::TIMESTAMP + 8].copy_from_slice(&f.timestamp_ns.to_be_bytes());
    h[off::TUNNEL_SEQ..off::TUNNEL_SEQ + 8].copy_from_slice(&f.tunnel_seq.to_be_bytes());
}

/// Body of probe and echo packets (32 bytes).
///
/// ```text
///  0  echo timestamp  u64  probe: 0; echo: the probe's send timestamp
///  8  hold time ns    u64  probe: 0; echo: time between probe arrival and echo
/// 16  rx packets      u64  packets the sender has received on this path
/// 24  rx path seq     u32  highest path sequence the sender received here
/// 28  hearing mask    u32  bit i: the sender hears path i (its receive
///                          direction of path i is up)
/// ```
///
/// The hearing mask tells a peer, on any path, which of its send
/// directions work: a path that fails in one direction only is found from
/// the reports on the other paths, and its working direction stays in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeBody {
    pub echo_timestamp_ns: u64,
    pub hold_ns: u64,
    pub rx_packets: u64,
    pub rx_path_seq: u32,
    pub hearing_mask: u32,
}

impl ProbeBody {
    /// Parse from a body slice; the caller obtained it from a checked
    /// [`Header`] of a probe or echo, so the length is already known good,
    /// but this re-checks to stay total.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() < PROBE_BODY_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Self {
            echo_timestamp_ns: be_u64(body, 0),
            hold_ns: be_u64(body, 8),
            rx_packets: be_u64(body, 16),
            rx_path_seq: be_u32(body, 24),
            hearing_mask: be_u32(body, 28),
        })
    }

    /// Write into `out[..PROBE_BODY_LEN]`.
    pub fn write(&self, out: &mut [u8]) {
        let b = &mut out[..PROBE_BODY_LEN];
        b[0..8].copy_from_slice(&self.echo_timestamp_ns.to_be_bytes());
        b[8..16].copy_from_slice(&self.hold_ns.to_be_bytes());
        b[16..24].copy_from_slice(&self.rx_packets.to_be_bytes());
        b[24..28].copy_from_slice(&self.rx_path_seq.to_be_bytes());
        b[28..32].copy_from_slice(&self.hearing_mask.to_be_bytes());
    }
}

/// Most sequence numbers in one NACK (spec constant).
pub const NACK_MAX_SEQS: usize = 16;

/// Body of a [`PacketType::Nack`]: `count` (u16, 1 to [`NACK_MAX_SEQS`]),
/// two reserved zero bytes, then `count` big-endian u64 tunnel sequence
/// numbers. A view: the length is checked once in [`NackBody::parse`].
#[derive(Debug, Clone, Copy)]
pub struct NackBody<'a> {
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
        let seqs = body.get(4..4 + 8 * count).ok_or(WireError::Truncated)?;
        Ok(Self { seqs })
    }

    pub fn len(&self) -> usize {
        self.seqs.len() / 8
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The requested sequence numbers, in the order sent.
    pub fn seqs(&self) -> impl Iterator<Item = u64> + 'a {
        self.seqs.chunks_exact(8).map(|c| be_u64(c, 0))
    }

    /// Write a body for `seqs` (1 to [`NACK_MAX_SEQS`] of them) into `out`;
    /// returns its length, or `None` if `out` is too short or `seqs` empty.
    pub fn write(seqs: &[u64], out: &mut [u8]) -> Option<usize> {
        let n = seqs.len();
        let len = 4 + 8 * n;
        if n == 0 || n > NACK_MAX_SEQS || out.len() < len {
            return None;
        }
        out[0..2].copy_from_slice(&(n as u16).to_be_bytes());
        out[2..4].fill(0);
        for (i, s) in seqs.iter().enumerate() {
            out[4 + 8 * i..12 + 8 * i].copy_from_slice(&s.to_be_bytes());
        }
        Some(len)
    }
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
        0x02, 0x01, 0x05, 0xb8, // version 2, data, path 5, class 0xb8 (EF)
        0x00, 0x00, 0x00, 0x00, // session 0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, // counter 258
        0x00, 0x00, 0x00, 0x2a, // path seq 42
        0x17, 0x9c, 0x3a, 0x2b, 0x4d, 0x5e, 0x6f, 0x70, // timestamp
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, // tunnel seq 2^32 + 7
    ];

    fn data_fields() -> HeaderFields {
        HeaderFields {
            path: 5,
            class: 0xb8,
            session: 0,
            counter: 258,
            path_seq: 42,
            timestamp_ns: 0x179c_3a2b_4d5e_6f70,
            tunnel_seq: (1 << 32) + 7,
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

    /// Test vector: an echo with body.
    const ECHO_VECTOR: [u8; HEADER_LEN + PROBE_BODY_LEN] = [
        0x02, 0x03, 0x00, 0x00, // version 2, echo, path 0, class 0
        0xde, 0xad, 0xbe, 0xef, // session
        0, 0, 0, 0, 0, 0, 0, 9, // counter 9
        0, 0, 0, 3, // path seq 3
        0, 0, 0, 0, 0, 0, 0x10, 0x00, // timestamp 4096
        0, 0, 0, 0, 0, 0, 0, 100, // next tunnel seq 100
        0, 0, 0, 0, 0, 0, 0x0f, 0xa0, // echo ts 4000
        0, 0, 0, 0, 0, 0, 0, 50, // hold 50 ns
        0, 0, 0, 0, 0, 0, 0x01, 0x00, // rx packets 256
        0, 0, 0, 0xff, // rx path seq 255
        0, 0, 0, 5, // hearing mask: paths 0 and 2
    ];

    #[test]
    fn echo_roundtrip_vector() {
        let f = HeaderFields {
            path: 0,
            class: 0,
            session: 0xdead_beef,
            counter: 9,
            path_seq: 3,
            timestamp_ns: 4096,
            tunnel_seq: 100,
        };
        let body = ProbeBody {
            echo_timestamp_ns: 4000,
            hold_ns: 50,
            rx_packets: 256,
            rx_path_seq: 255,
            hearing_mask: 0b101,
        };
        let mut out = [0u8; HEADER_LEN + PROBE_BODY_LEN];
        write_header(&mut out, PacketType::Echo, &f);
        body.write(&mut out[HEADER_LEN..]);
        assert_eq!(out, ECHO_VECTOR);
        let h = Header::new_checked(&ECHO_VECTOR).unwrap();
        assert_eq!(h.packet_type(), PacketType::Echo);
        assert_eq!(h.fields(), f);
        assert_eq!(ProbeBody::parse(h.body()).unwrap(), body);
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
        let mut v = DATA_VECTOR;
        v[1] = 0;
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadType);
        v[1] = 10;
        assert_eq!(Header::new_checked(&v).unwrap_err(), WireError::BadType);
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
            ProbeBody::parse(&[0; 31]).unwrap_err(),
            WireError::Truncated
        );
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
        assert_eq!(NackBody::write(&[256, (1 << 32) + 7], &mut out), Some(20));
        assert_eq!(out[..20], NACK_VECTOR);
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
        assert_eq!(NackBody::write(&[], &mut out), None);
        assert_eq!(
            NackBody::write(&[1; NACK_MAX_SEQS + 1], &mut [0u8; 512]),
            None
        );
        assert_eq!(NackBody::write(&[1, 2], &mut out[..19]), None);
    }
}
