//! Anti-replay sliding window after RFC 6479 ("IPsec Anti-Replay Algorithm
//! without Bit Shifting"): a ring of 64-bit blocks, cleared block-wise as
//! the highest counter advances.
//!
//! Invariants: for every counter `c` with `highest − c ≤ WINDOW`, the window
//! answers exactly whether `c` was accepted before; older counters are
//! rejected; `check` never changes state, so a packet that fails
//! authentication cannot move the window.

/// Blocks in the ring (tuning knob: 256 blocks = 16,384 bits).
const BLOCKS: usize = 256;
const BITS: u64 = (BLOCKS as u64) * 64;
/// Counters tracked behind the highest one. At least 8,192 is required for
/// multipath reordering; one block is lost to the ring's rotation.
pub const WINDOW: u64 = BITS - 64;

/// Verdict of a replay check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    Fresh,
    Duplicate,
    TooOld,
}

#[derive(Clone)]
pub struct ReplayWindow {
    blocks: Box<[u64; BLOCKS]>,
    highest: u64,
    any: bool,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self {
            blocks: Box::new([0; BLOCKS]),
            highest: 0,
            any: false,
        }
    }
}

impl ReplayWindow {
    /// The highest counter accepted (0 before any).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// Whether `c` would be newer than every counter accepted so far.
    pub fn is_newest(&self, c: u64) -> bool {
        !self.any || c > self.highest
    }

    /// Whether `c` would be accepted (no state change).
    pub fn check(&self, c: u64) -> Replay {
        if !self.any || c > self.highest {
            return Replay::Fresh;
        }
        if self.highest - c > WINDOW {
            return Replay::TooOld;
        }
        let block = ((c >> 6) as usize) % BLOCKS;
        if self.blocks[block] & (1 << (c & 63)) != 0 {
            Replay::Duplicate
        } else {
            Replay::Fresh
        }
    }

    /// Accept `c` (after authentication). Returns the verdict; only `Fresh`
    /// changes state.
    pub fn update(&mut self, c: u64) -> Replay {
        let v = self.check(c);
        if v != Replay::Fresh {
            return v;
        }
        if !self.any {
            self.any = true;
            self.highest = c;
        } else if c > self.highest {
            let cur = self.highest >> 6;
            let new = c >> 6;
            let diff = (new - cur).min(BLOCKS as u64);
            for i in 1..=diff {
                self.blocks[((cur + i) as usize) % BLOCKS] = 0;
            }
            self.highest = c;
        }
        self.blocks[((c >> 6) as usize) % BLOCKS] |= 1 << (c & 63);
        Replay::Fresh
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn basics() {
        let mut w = ReplayWindow::default();
        assert_eq!(w.update(0), Replay::Fresh);
        assert_eq!(w.update(0), Replay::Duplicate);
        assert_eq!(w.update(5), Replay::Fresh);
        assert_eq!(w.update(3), Replay::Fresh);
        assert_eq!(w.check(3), Replay::Duplicate);
        assert_eq!(w.update(WINDOW + 5), Replay::Fresh);
        assert_eq!(w.check(5), Replay::Duplicate);
        assert_eq!(w.check(4), Replay::TooOld);
        assert_eq!(w.update(u64::MAX - 1), Replay::Fresh);
        assert_eq!(w.check(WINDOW + 5), Replay::TooOld);
        const { assert!(WINDOW >= 8192) };
    }

    proptest! {
        /// Against a reference model that remembers every counter.
        #[test]
        fn matches_reference(ops in proptest::collection::vec(0u64..40_000, 1..2000)) {
            let mut w = ReplayWindow::default();
            let mut seen = HashSet::new();
            let mut highest: Option<u64> = None;
            for c in ops {
                let expected = match highest {
                    Some(h) if c <= h && h - c > WINDOW => Replay::TooOld,
                    _ if seen.contains(&c) => Replay::Duplicate,
                    _ => Replay::Fresh,
                };
                prop_assert_eq!(w.update(c), expected, "counter {}", c);
                if expected == Replay::Fresh {
                    seen.insert(c);
                    highest = Some(highest.map_or(c, |h| h.max(c)));
                }
            }
        }
    }
}
