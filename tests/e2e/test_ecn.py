"""ECN across the tunnel (RFC 6040 normal mode), end to end: an ECN-capable
TCP through a link that marks instead of dropping (mpt-netem marks CE on
ECN-capable frames that wait beyond 10 ms at 20 Mbit/s; this kernel has no
ECN-capable qdisc). The outer header carries the inner ECT, the link marks
mpt's datagrams, B carries the CE into the inner packets, and the sending
TCP sees it echoed back (TcpExtTCPDeliveredCE)."""

from __future__ import annotations

from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.traffic import iperf3
from mptlab.util import run


def _delivered_ce(ns: str) -> int:
    out = run(["nstat", "-az", "TcpExtTCPDeliveredCE"], ns=ns).stdout
    for ln in out.splitlines():
        if ln.startswith("TcpExtTCPDeliveredCE"):
            return int(ln.split()[1])
    return 0


def test_a_path_that_marks_ce_reaches_the_inner_tcp(workdir: Path) -> None:
    link = Shape(rate_mbit=20, delay_ms=5, serialize=True, ecn_mark_ms=10)
    with Topology(1, shape=[link]) as topo:
        for side in ("a", "b"):
            run(["sysctl", "-qw", "net.ipv4.tcp_ecn=1"], ns=topo.ns(side))
        opts = TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False)
        a, b = start_pair(topo, opts, workdir)
        before = _delivered_ce(topo.ns("a"))
        r = iperf3(topo, TUNNEL_V4["b"], seconds=4)
        echoed = _delivered_ce(topo.ns("a")) - before
        st = b.status()
        a.stop()
        b.stop()
        emu = topo.emulator_stats() or {}
    marked = emu["directions"][0]["stats"]["ecn_marked"]
    ecn = st["ecn"]
    print(
        f"\nECN TCP through a marking 20 Mbit/s link: {r.mbps:.1f} Mbit/s, "
        f"{r.retransmits} retransmits; the link marked {marked} datagrams, B saw "
        f"{ecn['outer_ce']} outer CE and carried {ecn['ce_carried']} into inner packets; "
        f"the sending TCP counted {echoed} CE-marked packets delivered"
    )
    assert marked > 0, emu
    # Every outer CE is accounted for; the inner TCP's packets are all
    # ECN-capable, so none is dropped for want of ECT.
    assert st["drops"]["ecn_ce_not_ect"] == 0
    assert ecn["ce_carried"] > 0, ecn
    assert ecn["ce_carried"] + ecn["ce_not_carried"] == ecn["outer_ce"], ecn
    assert echoed > 0
    # The marks slow TCP down as drops would, without the losses: a sanity
    # bound (CUBIC answers each round trip with marks by 0.7; 14-15 Mbit/s
    # measured with a 10 ms threshold).
    assert r.mbps > 8, r.mbps
