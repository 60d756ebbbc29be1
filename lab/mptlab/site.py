"""Routed sites: a LAN host behind each end of a topology, so that
traffic goes from LAN host to LAN host through A and B acting as routers
(the tunnel's `[[route]]`s, or plain routes over link 1).

    LA 192.168.101.2 --(LAN, MTU 1500)-- A ==links== B --(LAN)-- LB 192.168.102.2

A `LanView` stands for the topology where traffic is made: its `a` and
`b` are the LAN hosts' namespaces, and what else a caller reads (shapes,
the emulator, restarting traces) is the topology's.

Invariants: the LAN hosts' namespaces are uniquely named and torn down
with the topology (`Topology.extra_ns`); the LANs have MTU 1500, so no
packet from a LAN host is larger, as on a real Ethernet LAN.
"""

from __future__ import annotations

import subprocess
from typing import Any

from .netns import Topology, _veth
from .util import run

LAN_MTU = 1500
LAN = {"a": "192.168.101", "b": "192.168.102"}


def lan_host(side: str) -> str:
    """The LAN host's address behind `side`."""
    return f"{LAN[side]}.2"


def lan_net(side: str) -> str:
    return f"{LAN[side]}.0/24"


def add_lans(topo: Topology) -> LanView:
    """Give A and B a LAN each with one host, and make them routers."""
    hosts = {}
    for side, router in (("a", topo.a), ("b", topo.b)):
        ns = f"{router}l"
        run(["ip", "netns", "add", ns])
        topo.extra_ns.append(ns)
        run(["ip", "link", "set", "lo", "up"], ns=ns)
        for k in ("net.ipv4.tcp_no_metrics_save=1", f"net.ipv4.tcp_congestion_control={topo.cc}"):
            run(["sysctl", "-qw", k], ns=ns)
        _veth("lan0", router, "eth0", ns, LAN_MTU)
        run(["ip", "addr", "add", f"{LAN[side]}.1/24", "dev", "lan0"], ns=router)
        run(["ip", "link", "set", "lan0", "up"], ns=router)
        run(["ip", "addr", "add", f"{lan_host(side)}/24", "dev", "eth0"], ns=ns)
        run(["ip", "link", "set", "eth0", "up"], ns=ns)
        run(["ip", "route", "add", "default", "via", f"{LAN[side]}.1"], ns=ns)
        for k in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"):
            run(["sysctl", "-qw", k], ns=router)
        hosts[side] = ns
    return LanView(topo, hosts["a"], hosts["b"])


class LanView:
    """The topology as the traffic generators see it: ends at the LAN hosts."""

    def __init__(self, topo: Topology, a: str, b: str):
        self.topo, self.a, self.b = topo, a, b

    def ns(self, side: str) -> str:
        return {"a": self.a, "b": self.b}.get(side, self.topo.ns(side))

    def spawn(self, side: str, args: list[str], **kw: Any) -> subprocess.Popen[Any]:
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(side), *args], **kw)
        self.topo.procs.append(p)
        return p

    def __getattr__(self, name: str) -> Any:
        return getattr(self.topo, name)


def plain_routes(topo: Topology, add: bool) -> None:
    """Route each LAN to the other over link 1 (the plain system)."""
    from .netns import link_addr

    verb = "add" if add else "del"
    for side, other in (("a", "b"), ("b", "a")):
        run(
            ["ip", "route", verb, lan_net(other), "via", link_addr(1, other, 4)],
            ns=topo.ns(side),
            check=False,
        )


def mpt_routes(side: str) -> str:
    """The `[[route]]` of side `side`'s tunnel: the other LAN."""
    other = "b" if side == "a" else "a"
    return f'[[route]]\nnetwork = "{lan_net(other)}"\n'
