//! The DSCP of the outer header: what the networks a path crosses see of
//! a class's datagrams.
//!
//! A tunnel hides the inner packet's DSCP from every network between the
//! peers, so a Wi-Fi access point files all of mpt's datagrams under best
//! effort (RFC 8325 maps DSCP to the IEEE 802.11 access categories: EF to
//! AC_VO, whose frames do not wait behind the best-effort queue). RFC 2983
//! (Differentiated Services and Tunnels) names two models: the *uniform*
//! model copies the inner DSCP to the outer header (as IPsec does, RFC
//! 4301 §5.1.2.1), the *pipe* model leaves the outer header to the tunnel.
//! Each class picks one ([`OuterDscp`]); by default real-time classes copy
//! the inner DSCP and ordered classes leave it at 0 (WireGuard's choice
//! for everything: the DSCP says what kind of traffic the tunnel carries).
//!
//! Invariants: the result is a TOS / traffic-class byte whose ECN bits are
//! 0 (the ECN field is the tunnel's to set: [`crate::ecn_tunnel`] copies
//! the inner ECT there, RFC 6040); a packet too
//! short to hold an IP version and traffic class, or of neither IP version,
//! reads as DSCP 0.

/// What a class's datagrams carry in the outer DSCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OuterDscp {
    /// 0 (RFC 2983's pipe model).
    #[default]
    Zero,
    /// The inner packet's own DSCP (RFC 2983's uniform model).
    Inner,
    /// This DSCP (0 to 63) for every packet of the class.
    Fixed(u8),
}

/// Highest DSCP (six bits; RFC 2474).
pub const DSCP_MAX: u8 = 63;

impl OuterDscp {
    /// The outer TOS / traffic-class byte for inner packet `pkt`.
    pub fn tos(self, pkt: &[u8]) -> u8 {
        let dscp = match self {
            Self::Zero => 0,
            Self::Fixed(d) => d.min(DSCP_MAX),
            Self::Inner => inner_dscp(pkt),
        };
        dscp << 2
    }

    /// How the configuration and `mpt status` name it.
    pub fn describe(self) -> String {
        match self {
            Self::Zero => "0".into(),
            Self::Inner => "inner".into(),
            Self::Fixed(d) => d.to_string(),
        }
    }
}

/// The DSCP of an IPv4 or IPv6 packet (0 if it is neither or too short).
fn inner_dscp(pkt: &[u8]) -> u8 {
    match (pkt.first().map(|b| b >> 4), pkt.get(1)) {
        (Some(4), Some(tos)) => tos >> 2,
        (Some(6), Some(b1)) => (((pkt[0] & 0x0f) << 4) | (b1 >> 4)) >> 2,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_the_inner_dscp_without_ecn() {
        // IPv4 TOS 0xb9: EF (46) with ECT(1).
        let v4 = [0x45, 0xb9, 0, 20];
        assert_eq!(OuterDscp::Inner.tos(&v4), 0xb8);
        // IPv6 traffic class 0xb9: version 6, TC split over bytes 0 and 1.
        let v6 = [0x6b, 0x90, 0, 0];
        assert_eq!(OuterDscp::Inner.tos(&v6), 0xb8);
        assert_eq!(OuterDscp::Zero.tos(&v4), 0);
        assert_eq!(OuterDscp::Fixed(34).tos(&v4), 34 << 2, "AF41");
    }

    #[test]
    fn reads_zero_from_what_is_not_ip() {
        for pkt in [&[][..], &[0x45][..], &[0x55, 0xb8][..], &[0x00, 0xff][..]] {
            assert_eq!(OuterDscp::Inner.tos(pkt), 0, "{pkt:?}");
        }
        assert_eq!(OuterDscp::Fixed(200).tos(&[]), DSCP_MAX << 2);
    }

    #[test]
    fn names_itself_as_the_configuration_does() {
        assert_eq!(OuterDscp::Inner.describe(), "inner");
        assert_eq!(OuterDscp::Zero.describe(), "0");
        assert_eq!(OuterDscp::Fixed(46).describe(), "46");
    }
}
