//! The initiator's retry policy for handshake initiations, and the cookies
//! it holds.
//!
//! * While nothing answers, the interval between initiations doubles from
//!   [`knobs::HANDSHAKE_RETRY`] to [`knobs::HANDSHAKE_RETRY_MAX`] (the
//!   server is away: do not hammer it).
//! * A cookie reply shows that the server is there but under load. From
//!   then on, until a handshake completes, the interval is twice the
//!   round trip the cookie reply took (within the same bounds): a server
//!   whose receive queue is long answers late, and an initiation that is
//!   replaced before its answer can arrive would never complete.
//! * A cookie reply may answer any of the last [`RECENT_INITIATIONS`]
//!   initiations (each is remembered with its mac1, which the reply is
//!   bound to, and its path, whose source address the cookie is bound to).
//!   Each is used once.
//!
//! Invariants: bounded memory (a fixed ring and one cookie per path);
//! no clock: time comes in as arguments.

use super::cookie::{Cookie, COOKIE_USE_LIFETIME, MAC_LEN};
use super::knobs;
use crate::Nanos;

/// Initiations remembered for matching late cookie replies (tuning knob).
pub const RECENT_INITIATIONS: usize = 8;

/// One initiation that went out.
#[derive(Debug, Clone, Copy)]
pub struct SentInit {
    pub index: u32,
    pub mac1: [u8; MAC_LEN],
    pub path: usize,
    pub sent_at: Nanos,
}

#[derive(Debug, Clone)]
pub struct Retry {
    /// Initiations in this round (since the last completed handshake).
    attempts: u64,
    /// Round trip of the latest cookie reply of this round.
    cookie_rtt: Option<Nanos>,
    recent: [Option<SentInit>; RECENT_INITIATIONS],
    next_slot: usize,
    /// The latest cookie per path, with when it arrived.
    path_cookies: Vec<Option<(Cookie, Nanos)>>,
}

impl Retry {
    pub fn new(paths: usize) -> Self {
        Self {
            attempts: 0,
            cookie_rtt: None,
            recent: [None; RECENT_INITIATIONS],
            next_slot: 0,
            path_cookies: vec![None; paths],
        }
    }

    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// Whether the server answered this round with a cookie reply.
    pub fn under_load(&self) -> bool {
        self.cookie_rtt.is_some()
    }

    /// A new (not cookie-prompted) attempt of this round.
    pub fn on_attempt(&mut self) {
        self.attempts += 1;
    }

    /// A handshake completed: the next round starts afresh.
    pub fn on_established(&mut self) {
        self.attempts = 0;
        self.cookie_rtt = None;
        self.recent = [None; RECENT_INITIATIONS];
    }

    /// Remember an initiation that went out (after its MACs were written).
    pub fn on_sent(&mut self, s: SentInit) {
        self.recent[self.next_slot] = Some(s);
        self.next_slot = (self.next_slot + 1) % RECENT_INITIATIONS;
    }

    /// The remembered initiation with sender index `index`.
    pub fn sent(&self, index: u32) -> Option<SentInit> {
        self.recent
            .iter()
            .flatten()
            .find(|s| s.index == index)
            .copied()
    }

    /// A verified cookie reply to `sent` arrived at `now`.
    pub fn on_cookie(&mut self, now: Nanos, sent: &SentInit, cookie: Cookie) {
        for slot in &mut self.recent {
            if slot.is_some_and(|s| s.index == sent.index) {
                *slot = None;
            }
        }
        if let Some(c) = self.path_cookies.get_mut(sent.path) {
            *c = Some((cookie, now));
        }
        self.cookie_rtt = Some(now.saturating_sub(sent.sent_at));
    }

    /// The cookie to put in mac2 on `path`, if one is fresh enough.
    pub fn cookie_for(&self, now: Nanos, path: usize) -> Option<Cookie> {
        self.path_cookies
            .get(path)
            .copied()
            .flatten()
            .filter(|(_, at)| now.saturating_sub(*at) < COOKIE_USE_LIFETIME)
            .map(|(c, _)| c)
    }

    /// The path whose cookie is the freshest one still usable, if any.
    pub fn cookie_path(&self, now: Nanos) -> Option<usize> {
        self.path_cookies
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|(_, at)| (i, at)))
            .filter(|(_, at)| now.saturating_sub(*at) < COOKIE_USE_LIFETIME)
            .max_by_key(|(_, at)| *at)
            .map(|(i, _)| i)
    }

    /// How long to wait after an initiation before the next one.
    pub fn interval(&self) -> Nanos {
        let wait = match self.cookie_rtt {
            Some(rtt) => rtt.saturating_mul(2),
            None => {
                let shift = self.attempts.saturating_sub(1).min(16) as u32;
                knobs::HANDSHAKE_RETRY.saturating_mul(1 << shift)
            }
        };
        wait.clamp(knobs::HANDSHAKE_RETRY, knobs::HANDSHAKE_RETRY_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NANOS_PER_MS;

    const MS: Nanos = NANOS_PER_MS;

    fn sent(index: u32, path: usize, at: Nanos) -> SentInit {
        SentInit {
            index,
            mac1: [index as u8; MAC_LEN],
            path,
            sent_at: at,
        }
    }

    #[test]
    fn backs_off_while_unanswered_and_follows_the_cookie_round_trip() {
        let mut r = Retry::new(2);
        let mut waits = vec![];
        for _ in 0..7 {
            r.on_attempt();
            waits.push(r.interval() / MS);
        }
        assert_eq!(waits, [250, 500, 1000, 1000, 1000, 1000, 1000]);
        // A cookie reply after 300 ms: the server is there, slow to answer.
        r.on_sent(sent(7, 1, 10_000 * MS));
        let s = r.sent(7).unwrap();
        r.on_cookie(10_300 * MS, &s, [1; MAC_LEN]);
        assert_eq!(r.interval(), 600 * MS);
        // A fast cookie reply: the base interval, never below.
        r.on_sent(sent(8, 0, 20_000 * MS));
        r.on_cookie(20_010 * MS, &r.sent(8).unwrap(), [2; MAC_LEN]);
        assert_eq!(r.interval(), 250 * MS);
        r.on_established();
        r.on_attempt();
        assert_eq!(r.interval(), 250 * MS);
    }

    #[test]
    fn late_replies_match_recent_initiations_once() {
        let mut r = Retry::new(3);
        for i in 0..RECENT_INITIATIONS as u32 + 2 {
            r.on_sent(sent(i, (i % 3) as usize, Nanos::from(i) * 250 * MS));
        }
        // The two oldest fell out of the ring.
        assert!(r.sent(0).is_none() && r.sent(1).is_none());
        let s = r.sent(4).unwrap();
        assert_eq!((s.path, s.mac1), (1, [4; MAC_LEN]));
        r.on_cookie(5_000 * MS, &s, [9; MAC_LEN]);
        assert!(r.sent(4).is_none(), "a reply is used once");
        assert_eq!(r.cookie_for(5_001 * MS, 1), Some([9; MAC_LEN]));
        assert_eq!(r.cookie_for(5_001 * MS, 0), None);
        assert_eq!(r.cookie_path(5_001 * MS), Some(1));
        let expired = 5_000 * MS + COOKIE_USE_LIFETIME;
        assert_eq!(r.cookie_for(expired, 1), None);
        assert_eq!(r.cookie_path(expired), None);
    }
}
