"""Memory bounded per tunnel (issue: one engine, memory per peer): the
sender's resident memory after a full-rate TCP transfer on one unshaped
path stays within 16 MiB of what it used idle. The recovery ring is
bounded in bytes (8 MiB); before, its 4096 slots grew to the tunnel MTU
(47 MB) and the sender held 62 MiB against the receiver's 12."""

from __future__ import annotations

from pathlib import Path

from mptlab.concentrate import rss_kib
from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology
from mptlab.traffic import iperf3, ping

MIB = 1024


def test_a_sender_after_a_full_rate_transfer_stays_within_16_mib_of_idle(workdir: Path) -> None:
    with Topology(1) as topo:
        a, b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False), workdir)
        assert ping(topo, "a", TUNNEL_V4["b"], count=3, interval=0.1).received == 3
        assert a.proc is not None and b.proc is not None
        idle = rss_kib(a.proc.pid)
        r = iperf3(topo, TUNNEL_V4["b"], seconds=4)
        after = rss_kib(a.proc.pid)
        receiver = rss_kib(b.proc.pid)
        st = a.status()
        a.stop()
        b.stop()
    ring = (st.get("recovery") or {}).get("ring_bytes", 0)
    print(
        f"\nsender RSS idle {idle / MIB:.1f} MiB, after {r.mbps:.0f} Mbit/s of TCP "
        f"{after / MIB:.1f} MiB (+{(after - idle) / MIB:.1f}); receiver {receiver / MIB:.1f} MiB; "
        f"recovery ring {ring / 2**20:.1f} MiB"
    )
    assert r.mbps > 500, r.mbps
    assert after - idle <= 16 * MIB, (idle, after)
    assert ring <= 8 * 2**20
