//! The body of a fragment (type 11): one piece of an inner packet that is
//! larger than one datagram carries on the tunnel's paths.
//!
//! ```text
//!  0       1       2
//! +-------+-------+-------- ...
//! |0000idx| count | piece of the inner packet
//! +-------+-------+-------- ...
//! ```
//!
//! `idx` (low nibble of byte 0) is the piece's place, 0-based; `count` is
//! how many pieces the packet has (2 to [`MAX_FRAGMENTS`]). The pieces of
//! one packet carry consecutive tunnel sequence numbers, the first piece's
//! minus its index naming the packet, so the receiver reassembles them as
//! its reorder buffer releases them in order: multilink PPP's scheme
//! (RFC 1990 §3, fragments that share the link bundle's sequence space),
//! with the index and count made explicit so that a lost piece never glues
//! two packets together. The high nibble of byte 0 is zero, so a piece
//! held in the reorder buffer is never taken for an inner IPv4 or IPv6
//! packet (first nibble 4 or 6).
//!
//! Invariants: [`Fragment::parse`] checks the whole body once (length,
//! reserved bits, index below count, count within 2..=16, a non-empty
//! piece); afterwards the view's accessors cannot fail.

use super::WireError;

/// Bytes of the fragment header in front of each piece (spec constant).
pub const FRAGMENT_HEADER_LEN: usize = 2;
/// Most pieces an inner packet is cut into (spec constant: the index is a
/// nibble).
pub const MAX_FRAGMENTS: usize = 16;

/// A checked view of a fragment body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    pub index: u8,
    pub count: u8,
    pub piece: &'a [u8],
}

impl<'a> Fragment<'a> {
    /// Parse a fragment body, or say why it is not one.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        if body.len() <= FRAGMENT_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let (index, count) = (body[0], body[1]);
        if index >> 4 != 0 || usize::from(count) > MAX_FRAGMENTS || count < 2 || index >= count {
            return Err(WireError::BadFragment);
        }
        Ok(Self {
            index,
            count,
            piece: &body[FRAGMENT_HEADER_LEN..],
        })
    }

    /// Whether a body the reorder buffer holds is a fragment's (its first
    /// nibble is 0) rather than a whole inner packet's.
    pub fn is_fragment(body: &[u8]) -> bool {
        body.first().is_some_and(|b| b >> 4 == 0)
    }
}

/// Write the fragment header for piece `index` of `count` into
/// `out[..FRAGMENT_HEADER_LEN]`.
///
/// # Panics
/// If `out` is shorter than [`FRAGMENT_HEADER_LEN`], or (debug builds)
/// `index`/`count` are out of range; callers derive them from
/// [`pieces`].
pub fn write_fragment_header(out: &mut [u8], index: usize, count: usize) {
    debug_assert!(index < count && (2..=MAX_FRAGMENTS).contains(&count));
    out[0] = (index & 0x0f) as u8;
    out[1] = count as u8;
}

/// How many pieces an inner packet of `len` bytes needs when one datagram
/// carries at most `body_max` body bytes: 1 if it fits whole, else enough
/// pieces of at most `body_max - FRAGMENT_HEADER_LEN` bytes each. `None`
/// if it would take more than [`MAX_FRAGMENTS`].
pub fn pieces(len: usize, body_max: usize) -> Option<usize> {
    if len <= body_max {
        return Some(1);
    }
    let per = body_max
        .checked_sub(FRAGMENT_HEADER_LEN)
        .filter(|p| *p > 0)?;
    Some(len.div_ceil(per)).filter(|n| *n <= MAX_FRAGMENTS)
}

/// Byte range of piece `index` of a `len`-byte packet cut for datagrams
/// of at most `body_max` body bytes: full pieces first, the rest in the
/// last, so that every datagram of a packet but its last has one size
/// (UDP GSO sends such a run in one call).
pub fn piece_range(len: usize, body_max: usize, index: usize) -> std::ops::Range<usize> {
    let per = body_max.saturating_sub(FRAGMENT_HEADER_LEN).max(1);
    let start = (index * per).min(len);
    start..(start + per).min(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vector: piece 2 of 4, three bytes of the inner packet.
    const VECTOR: [u8; 5] = [0x02, 0x04, 0xaa, 0xbb, 0xcc];

    #[test]
    fn vector_parses_and_encodes() {
        let f = Fragment::parse(&VECTOR).unwrap();
        assert_eq!((f.index, f.count, f.piece), (2, 4, &[0xaa, 0xbb, 0xcc][..]));
        let mut out = [0u8; 5];
        write_fragment_header(&mut out, 2, 4);
        out[2..].copy_from_slice(f.piece);
        assert_eq!(out, VECTOR);
        assert!(Fragment::is_fragment(&VECTOR));
        assert!(!Fragment::is_fragment(&[0x45, 0]));
        assert!(!Fragment::is_fragment(&[0x60, 0]));
    }

    #[test]
    fn rejects_malformed_bodies() {
        assert_eq!(Fragment::parse(&[]), Err(WireError::Truncated));
        assert_eq!(
            Fragment::parse(&[0, 2]),
            Err(WireError::Truncated),
            "no piece"
        );
        for bad in [[0x12, 4, 0], [4, 4, 0], [0, 1, 0], [0, 17, 0], [0x45, 4, 0]] {
            assert_eq!(
                Fragment::parse(&bad),
                Err(WireError::BadFragment),
                "{bad:?}"
            );
        }
        assert!(Fragment::parse(&[15, 16, 0]).is_ok());
    }

    #[test]
    fn pieces_cover_the_packet_full_ones_first() {
        assert_eq!(pieces(1400, 1400), Some(1));
        assert_eq!(pieces(1401, 1400), Some(2));
        assert_eq!(pieces(2 * 1398, 1400), Some(2));
        assert_eq!(pieces(2 * 1398 + 1, 1400), Some(3));
        assert_eq!(pieces(16 * 1398, 1400), Some(16));
        assert_eq!(pieces(16 * 1398 + 1, 1400), None);
        assert_eq!(pieces(10, 2), None, "no room for a piece");
        for (len, body_max) in [(5728, 1432), (1401, 1400), (65_535, 4200), (32, 4)] {
            let count = pieces(len, body_max).unwrap();
            let mut next = 0;
            for i in 0..count {
                let r = piece_range(len, body_max, i);
                assert_eq!(r.start, next);
                assert!(!r.is_empty() && r.len() <= body_max - FRAGMENT_HEADER_LEN);
                if i + 1 < count {
                    assert_eq!(r.len(), body_max - FRAGMENT_HEADER_LEN, "full pieces first");
                }
                next = r.end;
            }
            assert_eq!(next, len);
        }
    }
}
