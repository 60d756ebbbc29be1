"""QoS in the daemon: with no configuration, EF-marked VoIP is real-time
and everything else best effort. A VoIP stream next to a UDP flood at
several times the links' capacity keeps every packet and a delay near the
link's, while the flood is dropped at mpt's input (by class, counted);
`mpt status` shows the classes, human and JSON. With QoS off the same VoIP
stream waits behind the flood (the comparison, measured in the same test).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology, link_addr
from mptlab.probe import voip
from mptlab.traffic import iperf3

SECONDS = 4


def _voip_beside_flood(topo: Topology, workdir: Path, extra: str) -> tuple[dict, dict]:
    opts = TunnelOpts(paths=[PathOpts(1), PathOpts(2)], tunnel_v6=False, extra=extra)
    a, _b = start_pair(topo, opts, workdir)
    flood: dict = {}

    def run_flood() -> None:
        flood["r"] = iperf3(
            topo, TUNNEL_V4["b"], udp=True, rate="200M", length=1200, seconds=SECONDS + 2
        )

    t = threading.Thread(target=run_flood)
    t.start()
    time.sleep(1.0)
    v = voip(topo, TUNNEL_V4["b"], seconds=SECONDS)
    t.join(timeout=60)
    status = a.status()
    human = a.status_text(verbose=True)
    a.stop()
    _b.stop()
    return v, {"status": status, "human": human}


def test_voip_keeps_its_delay_beside_a_flood_and_the_classes_show(workdir: Path) -> None:
    shapes = [Shape(rate_mbit=40, delay_ms=5), Shape(rate_mbit=10, delay_ms=20)]
    with Topology(2, shape=shapes) as topo:
        on, st = _voip_beside_flood(topo, workdir / "on", "")
    with Topology(2, shape=shapes) as topo:
        off, _ = _voip_beside_flood(topo, workdir / "off", "[qos]\nenabled = false")
    print(
        f"\nVoIP beside a 200 Mbit/s flood: QoS on {on['owd_mean_ms']:.2f} ms, "
        f"loss {on['loss']:.3f}; off {off['owd_mean_ms']:.2f} ms, loss {off['loss']:.3f}"
    )
    assert on["loss"] == 0, on
    assert on["owd_mean_ms"] < 25, on
    assert off["owd_mean_ms"] > 2 * on["owd_mean_ms"] or off["loss"] > 0.01, off
    classes = {c["name"]: c for c in st["status"]["qos"]}
    assert set(classes) == {"realtime", "besteffort"}
    rt, be = classes["realtime"], classes["besteffort"]
    assert rt["realtime"] and rt["packets"] >= SECONDS * 50 * 0.99
    assert be["dropped_full"] + be["dropped_aqm"] + be["dropped_expired"] + be["dropped_share"] > 0
    drops = st["status"]["drops"]
    assert drops["class_full"] + drops["aqm"] + drops["queue_full"] + drops["flow_share"] > 0
    # The kernel's drops at the TUN's queue, before mpt, are counted too.
    assert "tun_queue_full" in drops, drops
    assert (
        "QoS classes" in st["human"]
        and "realtime (precedence 0, real-time, outer DSCP copied)" in st["human"]
    )


def test_an_ecn_capable_tcp_is_marked_instead_of_dropped(workdir: Path) -> None:
    """A bulk TCP with ECN on (net.ipv4.tcp_ecn = 1 in the sender's
    namespace) through a 20 Mbit/s path: the standing queue it builds in
    mpt's stage gets CoDel's signal as CE marks, which the sender answers
    without a retransmission for them."""
    from mptlab.util import run

    with Topology(1, shape=[Shape(rate_mbit=20, delay_ms=5)]) as topo:
        run(["sysctl", "-qw", "net.ipv4.tcp_ecn=1"], ns=topo.ns("a"))
        opts = TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False)
        a, b = start_pair(topo, opts, workdir)
        try:
            r = iperf3(topo, TUNNEL_V4["b"], seconds=SECONDS)
            status = a.status()
            human = a.status_text(verbose=True)
        finally:
            a.stop()
            b.stop()
    be = {c["name"]: c for c in status["qos"]}["besteffort"]
    print(
        f"\nECN TCP over 20 Mbit/s: {r.mbps:.1f} Mbit/s, {r.retransmits} retransmits, "
        f"{be['marked_aqm']} marked, {be['dropped_aqm']} dropped by CoDel"
    )
    assert be["marked_aqm"] > 0, be
    assert be["marked_aqm"] > be["dropped_aqm"], be
    assert r.mbps > 0.8 * 20 * 0.91, r.mbps
    assert "marked CE by CoDel" in human


def _udp_by_dscp(topo: Topology) -> dict[str, int]:
    """Packets of mpt's datagrams that B received per outer DSCP (EF or
    0), from an nftables counter in B's namespace."""
    import json

    from mptlab.util import run

    out = run(["nft", "-j", "list", "table", "inet", "mptdscp"], ns=topo.ns("b")).stdout
    got = {}
    for item in json.loads(out)["nftables"]:
        rule = item.get("rule")
        if rule:
            counter = next(e["counter"] for e in rule["expr"] if "counter" in e)
            got[rule["comment"]] = counter["packets"]
    return got


def test_real_time_datagrams_carry_ef_outside_and_the_rest_none(workdir: Path) -> None:
    """The outer DSCP of the default classes (RFC 2983's uniform model for
    real-time, none for best effort): pings marked EF through the tunnel
    leave as EF-marked UDP on the link, unmarked pings as DSCP 0; with
    `outer_dscp = 0` on the real-time class nothing is marked."""
    from mptlab.util import run

    for extra, want_ef in [("", True), (REALTIME_UNMARKED, False)]:
        with Topology(1) as topo:
            src = link_addr(1, "a", 4)
            rules = workdir / "dscp.nft"
            rule = f"add rule inet mptdscp c ip saddr {src} meta l4proto udp ip dscp"
            rules.write_text(
                "add table inet mptdscp\n"
                "add chain inet mptdscp c { type filter hook input priority 0; }\n"
                f'{rule} ef counter comment "ef"\n'
                f'{rule} cs0 counter comment "zero"\n'
            )
            run(["nft", "-f", str(rules)], ns=topo.ns("b"))
            opts = TunnelOpts(paths=[PathOpts(1)], tunnel_v6=False, extra=extra)
            a, b = start_pair(topo, opts, workdir / ("on" if want_ef else "off"))
            try:
                before = _udp_by_dscp(topo)
                for tos in ["0xb8", "0x00"]:
                    ping = ["ping", "-q", "-c", "20", "-i", "0.01", "-Q", tos, TUNNEL_V4["b"]]
                    run(ping, ns=topo.ns("a"))
                after = _udp_by_dscp(topo)
                status = a.status()
            finally:
                a.stop()
                b.stop()
        ef, zero = (after[k] - before[k] for k in ("ef", "zero"))
        label = "defaults" if want_ef else "realtime outer_dscp = 0"
        print(f"\nouter DSCP ({label}): {ef} EF, {zero} unmarked")
        rt = {c["name"]: c for c in status["qos"]}["realtime"]
        if want_ef:
            assert ef >= 20 and zero >= 20, (ef, zero)
            assert rt["outer_dscp"] == "inner"
        else:
            assert ef == 0 and zero >= 40, (ef, zero)
            assert rt["outer_dscp"] == "0"


REALTIME_UNMARKED = """
[[qos.class]]
name = "realtime"
dscp = ["EF"]
realtime = true
outer_dscp = 0
"""
