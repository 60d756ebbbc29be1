//! Pairing our paths with the peer's: by name, not by their order in the
//! two configuration files.
//!
//! Every packet carries the *sender's* path id in its header; each side
//! numbers its paths as it likes. The receiver finds its own path for a
//! packet as follows (wire v6, `docs/protocol.md`):
//!
//! 1. the peer's id is paired already (learned below) with a path served
//!    by the socket the packet came in on: that path;
//! 2. not paired yet: the one path on that socket whose remote is the
//!    sender's address, else the one path on that socket, else the path of
//!    the same id if that socket serves it (the old pairing by order);
//! 3. otherwise the packet is dropped as `unknown_path`.
//!
//! Every probe and echo names the path it travels on in its body
//! (`wire::PathName`). An authentic probe or echo pairs the peer's id with
//! our path of that name, or marks the id as naming a path we do not have,
//! after which its packets are dropped as `unknown_path` (and told once
//! for the log). An authentic packet found by rule 2 pairs the id too,
//! until a name says otherwise.
//!
//! Hearing masks are in the reporter's numbering: bit j says the peer
//! hears *its* path j. [`Pairing::heard`] reads the bit of the peer's id
//! paired with our path.
//!
//! Invariants: a peer id pairs with at most one of our paths and each of
//! our paths with at most one peer id; a name pairing is replaced only by
//! another name (or forgotten when the peer restarts); nothing here
//! allocates per packet.

use std::net::SocketAddr;

use super::{Event, Tunnel};
use crate::wire::PathName;
use crate::{PathId, MAX_PATHS};

impl Tunnel {
    /// Our path for a datagram that claims the peer's path `claimed` and
    /// came in on socket `local_key` from `from` (rules 1 and 2 above).
    pub(super) fn local_path(
        &self,
        claimed: u8,
        local_key: usize,
        from: SocketAddr,
    ) -> Option<PathId> {
        let on_socket =
            |i: usize| self.paths[i].cfg.local_key == local_key && !self.paths[i].removed;
        match self.pairing.local(claimed) {
            // Paired, on this socket. Elsewhere: the peer may have given
            // the id to another path (removed and added at runtime); its
            // first probe names it, found by socket below.
            Some(Ok(l)) if on_socket(l as usize) => return Some(l),
            Some(Err(())) => return None,
            _ => {}
        }
        let same_id = claimed as usize;
        self.socket_path(local_key, from)
            .map(usize::from)
            .or((same_id < self.paths.len() && on_socket(same_id)).then_some(same_id))
            .map(|i| i as PathId)
    }

    /// Our one path that a datagram on socket `local_key` from `from`
    /// can be for: the path on that socket whose remote is `from`, else
    /// the only path on that socket.
    fn socket_path(&self, local_key: usize, from: SocketAddr) -> Option<PathId> {
        let on_socket =
            |i: usize| self.paths[i].cfg.local_key == local_key && !self.paths[i].removed;
        let mut by_source = None;
        let mut only = None;
        let mut count = 0;
        for i in (0..self.paths.len()).filter(|i| on_socket(*i)) {
            count += 1;
            only = Some(i);
            if self.paths[i].remote == Some(from) {
                by_source = Some(i);
            }
        }
        by_source
            .or(only.filter(|_| count == 1))
            .map(|i| i as PathId)
    }

    /// An authentic probe or echo on the peer's `peer_path` names its path
    /// `name`; it came in on our `guessed` path. Returns our path of that
    /// name if it is served by the same socket, `None` (a counted drop)
    /// otherwise; pairings and mismatches are told for the log.
    pub(super) fn pair_by_name(
        &mut self,
        peer_path: u8,
        guessed: PathId,
        name: PathName,
        from: SocketAddr,
    ) -> Option<PathId> {
        let socket = self.paths[guessed as usize].cfg.local_key;
        let ours = (0..self.paths.len())
            .find(|i| {
                !self.paths[*i].removed && self.paths[*i].cfg.name.as_bytes() == name.as_bytes()
            })
            .map(|i| i as PathId);
        let by_socket = self.socket_path(socket, from);
        match self.pairing.name(peer_path, name, ours, by_socket) {
            Named::Path { local, new } => {
                if self.paths[local as usize].cfg.local_key != socket {
                    // Our path of that name listens elsewhere: the peer
                    // sends it to the address of another of our paths.
                    self.pairing.forget_local(local);
                    self.mismatches += 1;
                    if self.mismatches.is_power_of_two() {
                        self.events.push_back(Event::PathMismatch {
                            peer_path,
                            name: name.lossy(),
                            from,
                            ours: Some(local),
                        });
                    }
                    return None;
                }
                if new {
                    self.events.push_back(Event::PathPaired {
                        path: local,
                        peer_path,
                    });
                }
                Some(local)
            }
            Named::Socket { local, new } => {
                if new {
                    self.events.push_back(Event::PathPairedBySocket {
                        path: local,
                        peer_path,
                        name: name.lossy(),
                    });
                }
                Some(local)
            }
            Named::NoSuch { new } => {
                if new {
                    self.events.push_back(Event::PathMismatch {
                        peer_path,
                        name: name.lossy(),
                        from,
                        ours: None,
                    });
                }
                None
            }
        }
    }

    /// The peer's paths whose names match none of ours (status).
    pub fn unmatched_peer_paths(&self) -> Vec<(u8, String)> {
        self.pairing
            .unmatched()
            .map(|(i, n)| (i, n.lossy()))
            .collect()
    }

    /// The peer's id of our path `local`, once known (status).
    pub fn peer_path_id(&self, local: PathId) -> Option<u8> {
        self.pairing.peer(local)
    }

    /// The name our probes and echoes on path `pid` carry.
    pub(super) fn wire_name(&self, pid: PathId) -> PathName {
        PathName::new(&self.paths[pid as usize].cfg.name).unwrap_or_default()
    }
}

/// What a peer's path id stands for here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Slot {
    /// Nothing learned yet.
    #[default]
    Unknown,
    /// Our path, learned from where an authentic packet came in.
    Guessed(PathId),
    /// Our path of the same name.
    Named(PathId),
    /// We have no path of the peer's name; our only path that the socket
    /// (and the sender's address) can mean.
    BySocket(PathId),
    /// The peer named this path and we have none of that name.
    NoSuch,
}

/// The pairing of the peer's path ids with ours.
#[derive(Debug, Clone)]
pub struct Pairing {
    to_local: [Slot; MAX_PATHS],
    /// Per path of ours: the peer's id paired with it.
    to_peer: [Option<u8>; MAX_PATHS],
    /// The peer's names that match none of ours, by their id (status).
    unmatched: [Option<PathName>; MAX_PATHS],
}

impl Default for Pairing {
    fn default() -> Self {
        Self {
            to_local: [Slot::Unknown; MAX_PATHS],
            to_peer: [None; MAX_PATHS],
            unmatched: [None; MAX_PATHS],
        }
    }
}

/// What [`Pairing::name`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// Paired with this path of ours (as before, or newly).
    Path { local: PathId, new: bool },
    /// We have no path of that name: paired with our path that its socket
    /// means (as before, or newly).
    Socket { local: PathId, new: bool },
    /// We have no path of that name; `new` the first time it is seen.
    NoSuch { new: bool },
}

impl Pairing {
    /// Our path paired with the peer's `peer`: `Some(Ok(local))`, `Some(Err(()))`
    /// when the peer's path is one we do not have, `None` when not paired.
    pub fn local(&self, peer: u8) -> Option<Result<PathId, ()>> {
        match self
            .to_local
            .get(peer as usize)
            .copied()
            .unwrap_or_default()
        {
            Slot::Unknown => None,
            Slot::Guessed(l) | Slot::Named(l) | Slot::BySocket(l) => Some(Ok(l)),
            Slot::NoSuch => Some(Err(())),
        }
    }

    /// The peer's id paired with our path `local`.
    pub fn peer(&self, local: PathId) -> Option<u8> {
        self.to_peer.get(local as usize).copied().flatten()
    }

    /// Whether our path `local` was paired by a name (its own, or the
    /// peer's that we lack, by socket).
    pub fn named(&self, local: PathId) -> bool {
        self.peer(local).is_some_and(|p| {
            matches!(
                self.to_local[p as usize],
                Slot::Named(_) | Slot::BySocket(_)
            )
        })
    }

    /// The peer's paths whose names we lack: (its id, its name).
    pub fn unmatched(&self) -> impl Iterator<Item = (u8, PathName)> + '_ {
        self.unmatched
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (i as u8, n)))
    }

    fn unpair_local(&mut self, local: PathId) {
        if let Some(p) = self.to_peer[local as usize].take() {
            self.to_local[p as usize] = Slot::Unknown;
        }
    }

    fn unpair_peer(&mut self, peer: u8) {
        if let Slot::Guessed(l) | Slot::Named(l) | Slot::BySocket(l) = self.to_local[peer as usize]
        {
            self.to_peer[l as usize] = None;
        }
        self.to_local[peer as usize] = Slot::Unknown;
        self.unmatched[peer as usize] = None;
    }

    /// An authentic packet from the peer's `peer` was placed on our `local`
    /// by where it came in (rule 2): pair them unless a name says otherwise.
    pub fn guess(&mut self, peer: u8, local: PathId) {
        let (p, l) = (peer as usize, local as usize);
        if p >= MAX_PATHS || l >= MAX_PATHS || self.to_local[p] != Slot::Unknown {
            return;
        }
        if self.named(local) {
            return;
        }
        self.unpair_local(local);
        self.to_local[p] = Slot::Guessed(local);
        self.to_peer[l] = Some(peer);
    }

    /// An authentic probe or echo on the peer's `peer` names its path
    /// `name`; `ours` finds our path of that name, `by_socket` our only
    /// path its socket and sender can mean (used when we lack the name,
    /// unless another of the peer's paths holds that path by a name).
    pub fn name(
        &mut self,
        peer: u8,
        name: PathName,
        ours: Option<PathId>,
        by_socket: Option<PathId>,
    ) -> Named {
        let p = peer as usize;
        if p >= MAX_PATHS {
            return Named::NoSuch { new: false };
        }
        match ours {
            Some(l) if self.to_local[p] == Slot::Named(l) => Named::Path {
                local: l,
                new: false,
            },
            Some(l) if (l as usize) < MAX_PATHS => {
                self.unpair_peer(peer);
                self.unpair_local(l);
                self.to_local[p] = Slot::Named(l);
                self.to_peer[l as usize] = Some(peer);
                Named::Path {
                    local: l,
                    new: true,
                }
            }
            None if by_socket.is_some_and(|l| self.to_local[p] == Slot::BySocket(l)) => {
                Named::Socket {
                    local: by_socket.unwrap_or_default(),
                    new: false,
                }
            }
            None if by_socket.is_some_and(|l| (l as usize) < MAX_PATHS && !self.named(l)) => {
                let l = by_socket.unwrap_or_default();
                self.unpair_peer(peer);
                self.unpair_local(l);
                self.to_local[p] = Slot::BySocket(l);
                self.to_peer[l as usize] = Some(peer);
                Named::Socket {
                    local: l,
                    new: true,
                }
            }
            _ => {
                let new = self.unmatched[p] != Some(name);
                self.unpair_peer(peer);
                self.to_local[p] = Slot::NoSuch;
                self.unmatched[p] = Some(name);
                Named::NoSuch { new }
            }
        }
    }

    /// Whether the peer hears our path `local`, by its hearing `mask`. A
    /// path not paired yet reads the bit of its own id, if the peer's id
    /// of that number is not paired with another of our paths.
    pub fn heard(&self, mask: u32, local: PathId) -> bool {
        let bit = |j: u8| j < 32 && mask & (1u32 << j) != 0;
        match self.peer(local) {
            Some(j) => bit(j),
            None => self.local(local).is_none() && bit(local),
        }
    }

    /// Our path `local` is gone (removed at runtime): forget its pairing.
    pub fn forget_local(&mut self, local: PathId) {
        if (local as usize) < MAX_PATHS {
            self.unpair_local(local);
        }
    }

    /// The peer restarted: its ids may mean other paths now.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> PathName {
        PathName::new(s).unwrap()
    }

    #[test]
    fn a_name_we_lack_pairs_by_socket_unless_a_name_holds_that_path() {
        let mut p = Pairing::default();
        // The peer's path 2 ("lte") arrives where only our path 1 listens.
        assert_eq!(
            p.name(2, n("lte"), None, Some(1)),
            Named::Socket {
                local: 1,
                new: true
            }
        );
        assert_eq!(p.local(2), Some(Ok(1)));
        assert_eq!(
            p.name(2, n("lte"), None, Some(1)),
            Named::Socket {
                local: 1,
                new: false
            }
        );
        assert_eq!(p.unmatched().count(), 0);
        // A guess does not take it over.
        p.guess(0, 1);
        assert_eq!(p.local(0), None);
        // Another path of the peer, also unnamed here, cannot take it.
        assert_eq!(
            p.name(3, n("dsl"), None, Some(1)),
            Named::NoSuch { new: true }
        );
        assert_eq!(p.local(3), Some(Err(())));
        // A path of the peer named like ours does, by name.
        assert_eq!(
            p.name(4, n("link1"), Some(1), Some(1)),
            Named::Path {
                local: 1,
                new: true
            }
        );
        assert_eq!(p.local(2), None, "the socket pairing gave way");
    }

    #[test]
    fn a_name_pairs_and_overrides_a_guess() {
        let mut p = Pairing::default();
        assert_eq!(p.local(0), None);
        p.guess(0, 1);
        assert_eq!(p.local(0), Some(Ok(1)));
        assert_eq!(p.peer(1), Some(0));
        // The peer's path 0 is named like our path 0: the name wins.
        assert_eq!(
            p.name(0, n("wifi"), Some(0), None),
            Named::Path {
                local: 0,
                new: true
            }
        );
        assert_eq!(p.local(0), Some(Ok(0)));
        assert_eq!(p.peer(0), Some(0));
        assert_eq!(p.peer(1), None, "the guess for our path 1 is gone");
        // A guess never replaces a name.
        p.guess(0, 1);
        assert_eq!(p.local(0), Some(Ok(0)));
        assert_eq!(
            p.name(0, n("wifi"), Some(0), None),
            Named::Path {
                local: 0,
                new: false
            }
        );
    }

    #[test]
    fn crossed_orders_pair_by_name() {
        let mut p = Pairing::default();
        p.name(0, n("lte"), Some(1), None);
        p.name(1, n("wifi"), Some(0), None);
        assert_eq!(p.local(0), Some(Ok(1)));
        assert_eq!(p.local(1), Some(Ok(0)));
        // The peer hears its path 0 (our 1) only.
        assert!(p.heard(0b01, 1));
        assert!(!p.heard(0b01, 0));
    }

    #[test]
    fn an_unknown_name_is_refused_and_told_once() {
        let mut p = Pairing::default();
        assert_eq!(p.name(2, n("dsl"), None, None), Named::NoSuch { new: true });
        assert_eq!(
            p.name(2, n("dsl"), None, None),
            Named::NoSuch { new: false }
        );
        assert_eq!(p.local(2), Some(Err(())));
        assert_eq!(p.unmatched().collect::<Vec<_>>(), vec![(2, n("dsl"))]);
        // The peer renamed it to one of ours (a reload there).
        p.name(2, n("wifi"), Some(0), None);
        assert_eq!(p.local(2), Some(Ok(0)));
        assert_eq!(p.unmatched().count(), 0);
    }

    #[test]
    fn one_peer_id_per_path_and_back() {
        let mut p = Pairing::default();
        p.name(0, n("wifi"), Some(0), None);
        // The peer moved its wifi to id 3 (it removed paths and added it
        // again): id 0 no longer means our wifi.
        p.name(3, n("wifi"), Some(0), None);
        assert_eq!(p.local(3), Some(Ok(0)));
        assert_eq!(p.local(0), None);
        assert_eq!(p.peer(0), Some(3));
        p.forget_local(0);
        assert_eq!(p.local(3), None);
        p.reset();
        assert_eq!(p.peer(0), None);
    }

    #[test]
    fn unpaired_paths_read_their_own_bit() {
        let p = Pairing::default();
        assert!(p.heard(0b10, 1));
        assert!(!p.heard(0b10, 0));
        assert!(!p.heard(u32::MAX, 40));
    }
}
