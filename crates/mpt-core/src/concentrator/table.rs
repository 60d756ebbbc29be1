//! The allowed-IPs table of a concentrator: which peer owns which
//! addresses (WireGuard's "cryptokey routing").
//!
//! One table answers both questions the data path asks:
//! * sending: the peer a packet read from the TUN goes to, by the longest
//!   prefix that contains its destination;
//! * receiving: whether the peer a packet came from may use its source
//!   address (the longest prefix containing the source must be that
//!   peer's), so that no client can send with another's addresses.
//!
//! Prefixes live in two longest-prefix-match tries (`prefix-trie`), one per
//! IP family: a lookup walks at most 32 or 128 levels, whatever the number
//! of prefixes (benchmarked at 10 and 10,000 peers in `benches/core.rs`).
//!
//! Invariants: a prefix belongs to at most one peer (inserting a prefix
//! another peer holds is refused with the holder's id); host bits of a
//! prefix are cleared on insert (`10.0.0.1/24` is `10.0.0.0/24`); removing
//! a peer removes exactly its prefixes.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use prefix_trie::PrefixMap;

/// Index of a peer in its concentrator.
pub type PeerId = u32;

/// See the module documentation.
#[derive(Default)]
pub struct AllowedIps {
    v4: PrefixMap<Ipv4Net, PeerId>,
    v6: PrefixMap<Ipv6Net, PeerId>,
}

impl AllowedIps {
    pub fn new() -> Self {
        Self::default()
    }

    /// Give `net` to `peer`. `Err(holder)` if another peer holds exactly
    /// that prefix (the table is unchanged).
    pub fn insert(&mut self, net: IpNet, peer: PeerId) -> Result<(), PeerId> {
        match net.trunc() {
            IpNet::V4(n) => Self::put(&mut self.v4, n, peer),
            IpNet::V6(n) => Self::put(&mut self.v6, n, peer),
        }
    }

    fn put<P: prefix_trie::Prefix>(
        map: &mut PrefixMap<P, PeerId>,
        net: P,
        peer: PeerId,
    ) -> Result<(), PeerId> {
        match map.get(&net) {
            Some(&holder) if holder != peer => Err(holder),
            _ => {
                map.insert(net, peer);
                Ok(())
            }
        }
    }

    /// Take `net` from `peer` (nothing if another peer holds it).
    pub fn remove(&mut self, net: IpNet, peer: PeerId) {
        match net.trunc() {
            IpNet::V4(n) => {
                if self.v4.get(&n) == Some(&peer) {
                    self.v4.remove(&n);
                }
            }
            IpNet::V6(n) => {
                if self.v6.get(&n) == Some(&peer) {
                    self.v6.remove(&n);
                }
            }
        }
    }

    /// The peer whose prefix is the longest to contain `addr`.
    pub fn lookup(&self, addr: IpAddr) -> Option<PeerId> {
        match addr {
            IpAddr::V4(a) => self.v4.get_lpm(&Ipv4Net::from(a)).map(|(_, &p)| p),
            IpAddr::V6(a) => self.v6.get_lpm(&Ipv6Net::from(a)).map(|(_, &p)| p),
        }
    }

    /// Whether `peer` may send from `src`.
    pub fn allows(&self, peer: PeerId, src: IpAddr) -> bool {
        self.lookup(src) == Some(peer)
    }

    /// Number of prefixes held.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_longest_prefix_wins_in_both_families() {
        let mut t = AllowedIps::new();
        t.insert(net("10.0.0.0/8"), 1).unwrap();
        t.insert(net("10.1.0.0/16"), 2).unwrap();
        t.insert(net("10.1.2.3/32"), 3).unwrap();
        t.insert(net("fd00::/8"), 4).unwrap();
        t.insert(net("fd00:1::/32"), 5).unwrap();
        assert_eq!(t.lookup(ip("10.9.9.9")), Some(1));
        assert_eq!(t.lookup(ip("10.1.9.9")), Some(2));
        assert_eq!(t.lookup(ip("10.1.2.3")), Some(3));
        assert_eq!(t.lookup(ip("11.0.0.1")), None);
        assert_eq!(t.lookup(ip("fd00:1::7")), Some(5));
        assert_eq!(t.lookup(ip("fd77::7")), Some(4));
        assert_eq!(t.lookup(ip("2001:db8::1")), None);
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn a_prefix_has_one_owner_and_host_bits_are_ignored() {
        let mut t = AllowedIps::new();
        t.insert(net("10.0.0.7/24"), 1).unwrap();
        assert_eq!(t.insert(net("10.0.0.0/24"), 2), Err(1));
        assert_eq!(t.insert(net("10.0.0.0/24"), 1), Ok(()));
        assert!(t.allows(1, ip("10.0.0.200")));
        assert!(!t.allows(2, ip("10.0.0.200")));
        // Removing another peer's prefix does nothing.
        t.remove(net("10.0.0.0/24"), 2);
        assert_eq!(t.lookup(ip("10.0.0.1")), Some(1));
        t.remove(net("10.0.0.0/24"), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn ten_thousand_peers_each_find_their_own() {
        let mut t = AllowedIps::new();
        for p in 0..10_000u32 {
            let [_, _, b, c] = p.to_be_bytes();
            t.insert(net(&format!("10.{b}.{c}.0/24")), p).unwrap();
            t.insert(net(&format!("fd00:{p:x}::/64")), p).unwrap();
        }
        for p in (0..10_000u32).step_by(97) {
            let [_, _, b, c] = p.to_be_bytes();
            assert_eq!(t.lookup(ip(&format!("10.{b}.{c}.9"))), Some(p));
            assert_eq!(t.lookup(ip(&format!("fd00:{p:x}::9"))), Some(p));
        }
    }
}
