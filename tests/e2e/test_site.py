"""Routed sites: a host on a LAN (MTU 1500) behind each of two mpt
routers. Its 1500-byte packets with DF set are carried (never vanish), and
its TCP connections have their MSS clamped to one datagram at both
routers, while the routers' own traffic between tunnel addresses keeps
its large segments."""

from __future__ import annotations

from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.site import add_lans, lan_host, mpt_routes
from mptlab.traffic import iperf3
from mptlab.util import run


def _clamped(peer) -> int:
    return peer.status()["fragments"]["mss_clamped"]


def test_lan_hosts_reach_each_other_in_whole_datagrams(workdir: Path) -> None:
    with Topology(2, shape=Shape(rate_mbit=50)) as topo:
        lans = add_lans(topo)
        opts = TunnelOpts(
            paths=[PathOpts(1), PathOpts(2)],
            tunnel_v6=False,
            side_extra={"a": mpt_routes("a"), "b": mpt_routes("b")},
        )
        a, b = start_pair(topo, opts, workdir)
        # The DF probe: a full LAN packet (1500 bytes) with DF set.
        r = run(
            ["ping", "-M", "do", "-s", "1472", "-c", "5", "-i", "0.1", "-W", "2", lan_host("b")],
            ns=lans.ns("a"),
            check=False,
            timeout=20,
        )
        assert " 0% packet loss" in r.stdout, r.stdout + r.stderr
        # Routed TCP: clamped at both routers (the SYN at A, its SYN-ACK at B).
        before = (_clamped(a), _clamped(b))
        t = iperf3(lans, lan_host("b"), seconds=3)
        assert t.mbps > 30, t
        assert _clamped(a) > before[0] and _clamped(b) > before[1]
        mss = run(["ss", "-tin", "dst", lan_host("b")], ns=lans.ns("a"), check=False).stdout
        # The routers' own connection between tunnel addresses: not clamped.
        before = (_clamped(a), _clamped(b))
        iperf3(topo, TUNNEL_V4["b"], seconds=1)
        assert (_clamped(a), _clamped(b)) == before
        status = a.status_text(verbose=True)
        assert "routed TCP clamped to MSS 1392/1372" in status, status
        print(f"\nrouted TCP {t.mbps:.1f} Mbit/s over 2 x 50; {mss.strip()[:200]}")
