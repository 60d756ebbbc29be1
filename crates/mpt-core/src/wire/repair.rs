//! Body of a repair packet (forward error correction, `fec/`): one
//! recovery shard of a Reed-Solomon block over the data packets a path
//! carried.
//!
//! ```text
//!  0  first path seq  u16  path sequence of the block's first packet
//!  2  covered mask    u64  bit i: path seq first + i is one of the
//!                          block's packets (in order); others on the
//!                          path in that span (probes, reports) are not
//!  10 originals       u8   the block's packets: the mask's population
//!  11 repairs         u8   recovery shards of the block
//!  12 index           u8   this shard's index, below `repairs`
//!  13 halves          u8   1: each packet entered the code as two
//!                          originals (its record's halves), so a
//!                          shard is half a record; 0: whole records
//!  14 shard length    u16  bytes of shard that follow; even
//!  16 shard ...
//! ```
//!
//! Invariants: [`RepairBody::parse`] checks the length once and every
//! field's range (`halves` 0 or 1; the mask's population is `originals`, at most
//! [`REPAIR_ORIGINALS_MAX`]; `repairs` within 1..=[`REPAIR_SHARDS_MAX`],
//! `index` below it; the shard even, non-empty, exactly the rest of the
//! body, at most [`REPAIR_SHARD_MAX`]); it never allocates, and the view
//! borrows the shard.

use super::{be_u16, be_u64, WireError};

/// Bytes before the shard (spec constant).
pub const REPAIR_HEADER_LEN: usize = 16;
/// Most packets one block covers: the mask's width (spec constant).
pub const REPAIR_ORIGINALS_MAX: usize = 64;
/// Most recovery shards of one block (spec constant).
pub const REPAIR_SHARDS_MAX: usize = 16;
/// Longest shard: a record (2 length bytes and a datagram's plaintext)
/// of the largest datagram, padded to even (spec constant).
pub const REPAIR_SHARD_MAX: usize = 65_536;

/// A parsed repair body (borrows the shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairBody<'a> {
    pub first_path_seq: u16,
    pub covered: u64,
    pub originals: u8,
    pub repairs: u8,
    pub index: u8,
    /// Each covered packet is two originals of the code, its record's
    /// first and second half (so that a repair of full datagrams fits
    /// one datagram).
    pub halves: bool,
    pub shard: &'a [u8],
}

impl<'a> RepairBody<'a> {
    /// Parse and check a repair body (see the module documentation).
    pub fn parse(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < REPAIR_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let covered = be_u64(b, 2);
        let (originals, repairs, index) = (b[10], b[11], b[12]);
        let shard_len = usize::from(be_u16(b, 14));
        let shard = &b[REPAIR_HEADER_LEN..];
        let ok = originals > 0
            && covered.count_ones() == u32::from(originals)
            && (1..=REPAIR_SHARDS_MAX).contains(&usize::from(repairs))
            && index < repairs
            && b[13] <= 1
            && shard_len > 0
            && shard_len.is_multiple_of(2)
            && shard_len <= REPAIR_SHARD_MAX
            && shard.len() == shard_len;
        if !ok {
            return Err(if shard.len() < shard_len {
                WireError::Truncated
            } else {
                WireError::BadRepair
            });
        }
        Ok(Self {
            first_path_seq: be_u16(b, 0),
            covered,
            originals,
            repairs,
            index,
            halves: b[13] == 1,
            shard,
        })
    }

    /// Write the body into `out`; its length, or `None` if `out` is too
    /// short or a field is out of range.
    pub fn write(&self, out: &mut [u8]) -> Option<usize> {
        let len = REPAIR_HEADER_LEN + self.shard.len();
        let shard_len = u16::try_from(self.shard.len()).ok()?;
        let valid = self.originals > 0
            && self.covered.count_ones() == u32::from(self.originals)
            && (1..=REPAIR_SHARDS_MAX).contains(&usize::from(self.repairs))
            && self.index < self.repairs
            && !self.shard.is_empty()
            && self.shard.len().is_multiple_of(2);
        if !valid {
            return None;
        }
        let out = out.get_mut(..len)?;
        out[0..2].copy_from_slice(&self.first_path_seq.to_be_bytes());
        out[2..10].copy_from_slice(&self.covered.to_be_bytes());
        out[10] = self.originals;
        out[11] = self.repairs;
        out[12] = self.index;
        out[13] = u8::from(self.halves);
        out[14..16].copy_from_slice(&shard_len.to_be_bytes());
        out[REPAIR_HEADER_LEN..].copy_from_slice(self.shard);
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block from path seq 0x0102 covering offsets 0, 1 and 3 (a probe
    /// at offset 2), two repairs, shard 1 of 4 bytes.
    const VECTOR: [u8; 20] = [
        0x01, 0x02, // first path seq
        0, 0, 0, 0, 0, 0, 0, 0b1011, // covered
        3, 2, 1, 0, // originals, repairs, index, halves
        0, 4, // shard length
        0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn the_vector_parses_and_writes_back() {
        let r = RepairBody::parse(&VECTOR).unwrap();
        assert_eq!(r.first_path_seq, 0x0102);
        assert_eq!(r.covered, 0b1011);
        assert_eq!((r.originals, r.repairs, r.index), (3, 2, 1));
        assert_eq!(r.shard, &[0xde, 0xad, 0xbe, 0xef]);
        let mut out = [0u8; 32];
        assert_eq!(r.write(&mut out), Some(VECTOR.len()));
        assert_eq!(&out[..VECTOR.len()], &VECTOR);
        assert_eq!(r.write(&mut out[..19]), None, "too short");
        assert!(!r.halves);
        let mut halved = VECTOR;
        halved[13] = 1;
        let h = RepairBody::parse(&halved).unwrap();
        assert!(h.halves, "each packet two originals");
        assert_eq!(h.write(&mut out), Some(halved.len()));
        assert_eq!(&out[..halved.len()], &halved);
    }

    #[test]
    fn every_out_of_range_field_is_refused() {
        let bad = |at: usize, v: u8| {
            let mut b = VECTOR;
            b[at] = v;
            RepairBody::parse(&b).map(|_| ())
        };
        assert_eq!(bad(10, 2), Err(WireError::BadRepair), "mask population");
        assert_eq!(bad(10, 0), Err(WireError::BadRepair), "no originals");
        assert_eq!(bad(11, 0), Err(WireError::BadRepair), "no repairs");
        assert_eq!(bad(11, 17), Err(WireError::BadRepair), "too many repairs");
        assert_eq!(bad(12, 2), Err(WireError::BadRepair), "index past repairs");
        assert_eq!(bad(13, 2), Err(WireError::BadRepair), "halves");
        assert_eq!(
            bad(15, 6),
            Err(WireError::Truncated),
            "longer than the body"
        );
        assert_eq!(bad(15, 3), Err(WireError::BadRepair), "odd");
        assert_eq!(
            bad(15, 2),
            Err(WireError::BadRepair),
            "shorter than the body"
        );
        assert_eq!(bad(15, 0), Err(WireError::BadRepair), "empty shard");
        for n in 0..VECTOR.len() {
            assert!(RepairBody::parse(&VECTOR[..n]).is_err(), "truncated at {n}");
        }
    }
}
