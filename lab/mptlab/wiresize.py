"""How large the lab's UDP datagrams may be, and what one costs on a link.

The sizes of the encapsulations (mpt's header and tag, UDP/IP of either
version, Ethernet) that the runner needs to send UDP that never fragments,
and to count a datagram's bytes on a shaped veth link.

Invariants: `udp_payload_for` never returns more than `wanted`; a payload
it returns fits one datagram of the path's 1500-byte MTU with the
system's encapsulation.
"""

from __future__ import annotations

MPT_HEADER = 24
# UDP datagrams are sized for the 36-byte header of wire version 3, so that
# an A/B run against a previous build (`mpt-base`) sends the same datagrams
# to both without fragmenting either.
MPT_HEADER_ROOM = 36
AEAD_TAG = 16
UDP_IP = {4: 28, 6: 48}
ETHERNET = 14


def udp_payload_for(
    wanted: int, system: str, tunnel_v: int, path_v: int, mtu: int | None = None
) -> int:
    """The scenario's UDP payload, reduced so that one datagram fits the
    tunnel MTU (1500 minus the encapsulation of the path's IP version; a
    hook's own `mtu` when known) or the plain link's 1500 bytes: no IP
    fragmentation in any combination."""
    if mtu:
        return min(wanted, mtu - UDP_IP[tunnel_v])
    tunnelled = system.startswith("mpt") and system != "mptcp"
    if tunnelled:
        tag = 0 if system == "mpt-insecure" else AEAD_TAG
        mtu = 1500 - (UDP_IP[path_v] + MPT_HEADER_ROOM + tag)
        return min(wanted, mtu - UDP_IP[tunnel_v])
    return min(wanted, 1500 - UDP_IP[path_v])


def udp_wire_bytes(payload: int, system: str, tunnel_v: int, path_v: int) -> int:
    """Bytes one UDP datagram of `payload` costs on a shaped veth link."""
    tunnelled = system.startswith("mpt") and system != "mptcp"
    inner = payload + UDP_IP[tunnel_v if tunnelled else path_v]
    if tunnelled:
        tag = 0 if system == "mpt-insecure" else AEAD_TAG
        return inner + MPT_HEADER + tag + UDP_IP[path_v] + ETHERNET
    return inner + ETHERNET
