"""Run a scenario: every IP combination × link count × system × traffic.

For each measured point the runner records throughput (median, minimum and
maximum over repeats), efficiency against the sum of the links' rates, CPU
of the involved processes (sampled with timestamps) and traffic-specific
details (retransmissions, UDP loss, one-way delay and jitter, failover
timeline).

Invariants: every topology is torn down after its points, also on error or
Ctrl-C; a failing point is recorded with its error and the run goes on; the
plain reference is measured once per path IP version on a single link.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import systems
from .cpu import (  # noqa: F401 (re-exported)
    CpuSampler,
    cpu_hz,
    cycles_per_byte,
    process_pct,
    stolen_note,
)
from .events import tcp_with_events, voip_with_events
from .netns import Topology, link_addr
from .probe import voip
from .qosmix import run_mix, run_precedence
from .qosmix import summary as mix_summary
from .repeats import merge_repeats
from .scenario import Scenario
from .shapers import shaper_delta
from .site import LanView, add_lans, lan_host, mpt_routes, plain_routes
from .systems import MPT_VARIANTS, without_qos
from .tcpinfo import TcpSampler, tcp_line, tcp_summary
from .timeline import StatusSampler, add_offered
from .trace import link_offered_mbit, offered_mbit, transfer_stall_s
from .traffic import http_download, iperf3, receiver_details
from .wiresize import UDP_IP, udp_payload_for, udp_wire_bytes

# "voip-load": the UDP load beside the VoIP stream, as a share of the links'
# sum (below capacity: no standing queue, only the links' own delay under
# packet load), and its payload.
LOAD_SHARE = 0.8
LOAD_PAYLOAD = 1200


@dataclass
class Point:
    scenario: str
    system: str
    ip: str
    tunnel_v: int
    path_v: int
    links: int
    traffic: str
    sum_mbit: float
    mbps: float | None = None
    mbps_min: float | None = None
    mbps_max: float | None = None
    efficiency: float | None = None
    cpu_pct: dict[str, float] = field(default_factory=dict)
    cpu_samples: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def label_ip(ip: str) -> str:
    """How a point's IP combination reads: `4in6` for a tunnel, `IPv4` for
    a system without one (plain, MPTCP), whose field holds `-in4`."""
    return f"IPv{ip[3:]}" if ip.startswith("-in") else ip


def _ip(combo: str) -> tuple[int, int]:
    t, p = combo.split("in")
    return int(t), int(p)


def _link_offered(topo: Any, shapes: list[Any]) -> Any:
    """`offered(link, from_ns, to_ns)` for a timeline: what a trace link
    offered then (None for a fixed link or beyond the links)."""

    def offered(i: int, a: int, b: int) -> float | None:
        return link_offered_mbit(topo, shapes[i], a, b) if i < len(shapes) else None

    return offered


# Socket buffers of iperf3's UDP sender and receiver (-w): the defaults
# (~200 KiB) overflow at Gbit/s rates and would measure iperf3, not the
# system under test (2 x 1 Gbit/s: 35 % loss with defaults, 0 % with this).
UDP_SOCKET_BUFFER = "8M"

# The warm-up transfer on each link before the first system on a
# topology (seconds per link), for runs of at least WARM_UP_MIN_RUN_S
# seconds (quick runs skip it).
WARM_UP_S = 1.0
WARM_UP_MIN_RUN_S = 5
# A TCP point also reports the receiver's rate from this second on (its
# start and slow start left out), on runs of at least STEADY_MIN_RUN_S.
STEADY_AFTER_S = 2.0
STEADY_MIN_RUN_S = 6.0


class Runner:
    def __init__(self, sc: Scenario, outdir: Path, progress: Callable[[str], None] = print):
        self.sc = sc
        self.outdir = outdir
        self.progress = progress
        self.points: list[Point] = []
        # The LAN view of each topology of a routed-sites scenario, by id.
        self.lans: dict[int, LanView] = {}
        self.total = self._count()
        self.done = 0

    def _count(self) -> int:
        sc, n = self.sc, 0
        for combo in sc.ip:
            tv, pv = _ip(combo)
            for _ in sc.link_counts:
                # Each listing runs (`mpt,mpt-base,mpt-base,mpt` is four).
                for s in sc.systems:
                    if s in ("mpt", "hook") or s.startswith("mpt-"):
                        n += len(sc.traffic)
                    elif s == "mptcp" and tv == pv and not sc.lans:
                        n += len([t for t in sc.traffic if t in ("tcp", "http")])
        if "plain" in sc.systems:
            n += len({_ip(c)[1] for c in sc.ip}) * len(sc.traffic)
        return n

    # -- measurement of one traffic type on one brought-up system ----------

    def _measure(
        self, topo: Topology, target: systems.Target, point: Point, repeats: int | None = None
    ) -> None:
        sc = self.sc
        results: list[float] = []
        details: dict[str, Any] = {}
        rates = sc.link_rates(point.links)
        if point.system == "plain":
            rates = rates[:1]
        total_rate = sum(rates)
        traced = any(s.trace for s in sc.shapes_for(point.links))
        offered: list[float] = []
        for _ in range(repeats or sc.repeats):
            if traced:
                topo.restart_traces()
            t_begin = time.monotonic_ns()
            shapers_before = topo.shaper_counters()
            sides = {"a": topo.a, "b": topo.b}
            sampler = CpuSampler(target.pids, namespaces=sides).start()
            paths = StatusSampler(target.peers[0]).start() if sc.timeline and target.peers else None
            # The inner TCP's window, round trip and limits (any system).
            tcp = TcpSampler(topo.a).start() if sc.timeline and point.traffic == "tcp" else None
            # The receiver's side: where the reverse direction (the inner
            # TCP's ACKs) goes, and whether its paths stall.
            back = (
                StatusSampler(target.peers[1]).start()
                if sc.timeline and len(target.peers) > 1
                else None
            )
            try:
                if point.traffic == "tcp":
                    if sc.events and point.system != "plain":
                        mbps, d = tcp_with_events(sc, topo, target)
                    else:
                        r = iperf3(
                            topo,
                            target.addr,
                            seconds=sc.seconds,
                            wrap=target.wrap,
                            streams=sc.tcp_streams,
                            server_intervals=sc.seconds >= STEADY_MIN_RUN_S,
                        )
                        mbps, d = r.mbps, {"retransmits": r.retransmits}
                        if traced:
                            d["raw"] = r.raw
                        d.update(receiver_details(r.raw, STEADY_AFTER_S))
                elif point.traffic == "udp":
                    payload = (
                        # A LAN host sends what its LAN of MTU 1500 carries.
                        min(sc.udp_payload, 1500 - UDP_IP[4])
                        if sc.lans
                        else udp_payload_for(
                            sc.udp_payload, point.system, point.tunnel_v, point.path_v, target.mtu
                        )
                    )
                    wire = udp_wire_bytes(payload, point.system, point.tunnel_v, point.path_v)
                    share = total_rate * payload / wire * 0.98
                    if sc.udp_load is not None:
                        share = total_rate * sc.udp_load
                    rate = f"{share:.2f}M" if total_rate else "0"
                    r = iperf3(
                        topo,
                        target.addr,
                        udp=True,
                        rate=rate,
                        length=payload,
                        seconds=sc.seconds,
                        window=UDP_SOCKET_BUFFER,
                    )
                    mbps, d = (
                        r.mbps,
                        {"lost_percent": r.lost_percent, "offered": rate, "payload": payload},
                    )
                elif point.traffic == "qos-mix":
                    mix = run_mix(
                        topo,
                        target.addr,
                        seconds=sc.seconds,
                        capacity_mbit=total_rate or 100,
                        flood_factor=sc.flood_factor,
                        streams=sc.mix_streams,
                    )
                    d = mix_summary(mix)
                    mbps = d.get("bulk_mbps") or 0.0
                elif point.traffic == "precedence":
                    d = run_precedence(
                        topo, target.addr, seconds=sc.seconds, capacity_mbit=total_rate or 100
                    )
                    mbps = d.get("high_mbps") or 0.0
                elif point.traffic == "http":
                    size = (
                        int(sc.http_mb * 1e6)
                        if sc.http_mb
                        else int((total_rate or 1000) * 1e6 / 8 * sc.seconds)
                    )
                    h = http_download(topo, target.addr, size, wrap=target.wrap)
                    mbps, d = h.mbps, {"bytes": h.bytes, "seconds": h.seconds}
                else:  # voip, alone or beside a bulk TCP transfer or a UDP load
                    bulk = (
                        self._bulk(topo, target)
                        if point.traffic == "voip-bulk"
                        else self._bulk(topo, target, udp_mbit=LOAD_SHARE * (total_rate or 100))
                        if point.traffic == "voip-load"
                        else None
                    )
                    events = sc.events and point.system != "plain"
                    try:
                        v = (
                            voip_with_events(sc, topo, target)
                            if events
                            else voip(topo, target.addr, seconds=sc.seconds)
                        )
                    finally:
                        bulk_mbps = bulk() if bulk else None
                    mbps = v["mbps"]
                    d = {
                        k: v[k]
                        for k in (
                            "owd_mean_ms",
                            "owd_p99_ms",
                            "jitter_ms",
                            "loss",
                            "lost",
                            "duplicates",
                            "reordered",
                            "owd_cdf_ms",
                            "events",
                        )
                        if k in v
                    }
                    if bulk_mbps is not None:
                        d["bulk_tcp_mbps"] = bulk_mbps
            finally:
                cpu = sampler.stop()
                if paths is not None:
                    d["paths_timeline"] = add_offered(
                        paths.stop(), _link_offered(topo, sc.shapes_for(point.links))
                    )
                if back is not None:
                    d["paths_timeline_back"] = back.stop()
                if tcp is not None:
                    d["tcp_timeline"] = tcp.stop()
            d["bottleneck"] = shaper_delta(shapers_before, topo.shaper_counters())
            results.append(mbps)
            if traced:
                # What the links offered while this transfer ran (its last
                # `seconds`): a trace's capacity is what it was then.
                t_end = time.monotonic_ns()
                t_from = max(t_begin, t_end - int(sc.seconds * 1e9))
                offered.append(
                    offered_mbit(topo, sc.shapes_for(point.links), t_from, t_end, point.system)
                )
                if point.traffic == "tcp" and "raw" in d:
                    d["stall_s"] = transfer_stall_s(
                        topo, sc.shapes_for(point.links), d.pop("raw"), t_from, point.system
                    )
            details = d
            point.cpu_pct = cpu["mean_pct"]
            point.cpu_samples = cpu["samples"]
        point.mbps = statistics.median(results)
        point.mbps_min, point.mbps_max = min(results), max(results)
        point.efficiency = (
            point.mbps / total_rate
            if total_rate and point.traffic in ("tcp", "udp", "http")
            else None
        )
        if offered and point.traffic in ("tcp", "udp", "http"):
            shares = [m / o for m, o in zip(results, offered, strict=True) if o > 0]
            point.efficiency = statistics.median(shares) if shares else None
            details["offered_mbit"] = offered
            details["offered_median_mbit"] = statistics.median(offered)
        own = sc.hook_processes if point.system == "hook" else None
        point.details = {
            **details,
            **target.notes,
            **cycles_per_byte(point.cpu_pct, point.mbps, own),
        }
        if target.peers:
            st = target.peers[1].status()
            point.details["receiver_reorder"] = st.get("reorder")
            point.details["receiver_drops"] = {k: v for k, v in st.get("drops", {}).items() if v}
            point.details["receiver_recovery"] = st.get("recovery")
            # The sender's classes: each one's time inside mpt (TUN to
            # socket) and its drops by reason, the node's own share of the
            # delay (the ED-SGSN thesis measures its node so).
            sender = target.peers[0].status()
            point.details["sender_recovery"] = sender.get("recovery")
            # Both ends' whole status at the end, beside their logs.
            for peer, doc in ((target.peers[0], sender), (target.peers[1], st)):
                peer.log.with_suffix(".status.json").write_text(json.dumps(doc, indent=1))
            classes = sender.get("qos") or []
            point.details["sender_classes"] = [
                {
                    "name": c.get("name"),
                    "realtime": c.get("realtime"),
                    "packets": c.get("packets"),
                    "delay": c.get("delay"),
                    **{
                        k: v
                        for k, v in c.items()
                        if (k.startswith("dropped_") or k == "policed_flows") and v
                    },
                }
                for c in classes
            ]

    def _bulk(
        self, topo: Topology, target: systems.Target, udp_mbit: float | None = None
    ) -> Callable[[], float | None]:
        """Start a bulk TCP transfer (or, with `udp_mbit`, a UDP stream at
        that rate) beside the measured traffic (on another port, a little
        longer than it); the returned call waits for it and gives its rate
        (None if it failed)."""
        out: dict[str, Any] = {}

        def transfer() -> None:
            try:
                out["r"] = iperf3(
                    topo,
                    target.addr,
                    seconds=self.sc.seconds + 2,
                    wrap=target.wrap,
                    port=5202,
                    udp=udp_mbit is not None,
                    rate=None if udp_mbit is None else f"{udp_mbit:.1f}M",
                    length=None if udp_mbit is None else LOAD_PAYLOAD,
                )
            except Exception as e:  # noqa: BLE001 - reported as no figure
                out["err"] = str(e)

        t = threading.Thread(target=transfer)
        t.start()
        time.sleep(1.0)  # let the transfer fill the links first

        def finish() -> float | None:
            t.join(timeout=self.sc.seconds + 60)
            r = out.get("r")
            return r.mbps if r else None

        return finish

    # -- scenario loop ------------------------------------------------------

    def _run_system(
        self,
        topo: Topology,
        make: Callable[[], AbstractContextManager[systems.Target]],
        proto: Point,
        traffics: list[str],
    ) -> None:
        """Bring the system up (`make`) and measure each traffic. Repeats
        each get a fresh tunnel (a user's transfers meet a tunnel that has
        learned nothing yet), unless the scenario keeps one warm tunnel for
        all (`run.warm_tunnel`); `plain` has no tunnel to renew."""
        fresh = not self.sc.warm_tunnel and self.sc.repeats > 1 and proto.system != "plain"
        if fresh:
            for tr in traffics:
                parts = []
                for _ in range(self.sc.repeats):
                    p = Point(**{**asdict(proto), "traffic": tr})
                    self._bring_up_and_measure(topo, make, p, [tr], parts)
                self._record(merge_repeats(parts))
            return
        self._bring_up_and_measure(topo, make, proto, traffics, None)

    def _bring_up_and_measure(
        self,
        topo: Topology,
        make: Callable[[], AbstractContextManager[systems.Target]],
        proto: Point,
        traffics: list[str],
        into: list[Point] | None,
    ) -> None:
        """One tunnel's life: each traffic measured on it (once each if
        `into` collects the points, else `repeats` times and recorded)."""
        view = self.lans.get(id(topo))
        done: list[Point] = []
        try:
            with make() as target:
                if view is not None:
                    # Routed sites: from LAN host to LAN host through A and B.
                    target.addr = lan_host("b")
                    if proto.system == "plain":
                        plain_routes(topo, add=True)
                for tr in traffics:
                    p = Point(**{**asdict(proto), "traffic": tr})
                    try:
                        self._measure(view or topo, target, p, 1 if into is not None else None)
                    except Exception as e:  # noqa: BLE001 - recorded, run goes on
                        p.error = f"{type(e).__name__}: {e}"
                    done.append(p)
        except Exception as e:  # noqa: BLE001 - the system failed to come up
            for tr in traffics[len(done) :]:
                done.append(
                    Point(**{**asdict(proto), "traffic": tr, "error": f"{type(e).__name__}: {e}"})
                )
        for p in done:
            if into is not None:
                into.append(p)
            else:
                self._record(p)

    def _record(self, p: Point) -> None:
        self.points.append(p)
        self.done += 1
        if p.error:
            what = f"ERROR {p.error}"
        else:
            # A trace's share is of what it offered during the transfer,
            # not of its mean rate (the links' sum).
            offered = p.details.get("offered_median_mbit")
            ref = offered or p.sum_mbit
            of = f"{offered:g} offered" if offered else f"{p.sum_mbit:g}"
            eff = f" = {p.efficiency:.1%} of {of}" if p.efficiency is not None else ""
            extra = ""
            if p.details.get("steady_mbps") is not None and ref:
                extra = (
                    f", from {p.details['steady_after_s']:g} s on"
                    f" {p.details['steady_mbps'] / ref:.1%}"
                )
            if "stall_s" in p.details:
                extra += f", longest stall {p.details['stall_s']:.1f} s"
            if "outage_s" in p.details:
                extra = f", outage {p.details['outage_s']} s"
            if "owd_mean_ms" in p.details:
                extra = (
                    f", owd {p.details['owd_mean_ms']:.2f} ms jitter "
                    f"{p.details['jitter_ms']:.3f} ms loss {p.details['loss']:.2%}"
                )
            t = tcp_summary(p.details.get("tcp_timeline"))
            if t is not None:
                extra += "; inner TCP " + tcp_line("", t).lstrip()
            dropped = sum(v["drops"] for v in (p.details.get("bottleneck") or {}).values())
            if dropped:
                extra += f", {dropped} dropped at the links' shapers"
            what = f"{p.mbps:.1f} Mbit/s{eff}{extra}"
        cpu = process_pct(p.cpu_pct)
        # What the hypervisor took: a figure of this run is the machine's,
        # not the tunnel's alone.
        cpu_s = (f" cpu {cpu:.0f}%" if cpu else "") + stolen_note(p.cpu_pct)
        self.progress(
            f"[{self.done}/{self.total}] {p.system:<6} {label_ip(p.ip)} N={p.links:<2} "
            f"{p.traffic:<4}: {what}{cpu_s}"
        )

    def _warm_up(self, topo: Topology) -> None:
        """A short plain transfer over every link, one after the other,
        before the first system is measured on a new topology, so that no
        system meets a link and its emulator cold. Warming link 1 alone left
        the first system of a run 5.3 points below the second on wifi-lte
        with the same binary in both slots (4 runs ABBA, first slot 84-88 %,
        second 91 %); warming every link brought the bias to +0.3 points
        (89-91 % in both slots). Still list systems both ways for an A/B
        (`mptlab ab`)."""
        if self.sc.seconds < WARM_UP_MIN_RUN_S:
            return
        try:
            for i in range(1, topo.n + 1):
                iperf3(topo, link_addr(i, "b", 4), seconds=WARM_UP_S, port=5298)
        except Exception:  # noqa: BLE001 - a warm-up that fails measures nothing
            pass

    def _run_listed(
        self, topo: Topology, system: str, base: Point, rates: list[float], work: Path
    ) -> None:
        """Bring up and measure one system of the scenario's list on `topo`."""
        sc = self.sc
        combo, tv, pv, n = base.ip, base.tunnel_v, base.path_v, base.links
        routes = {"a": mpt_routes("a"), "b": mpt_routes("b")} if sc.lans else None
        if system == "mpt":

            def cm() -> AbstractContextManager[systems.Target]:
                return systems.mpt(
                    topo,
                    tv,
                    pv,
                    rates,
                    work / f"{combo}-{n}",
                    sc.mpt_extra,
                    learns=sc.server_learns,
                    side_extra=routes,
                )

            self._run_system(topo, cm, Point(**{**asdict(base), "system": "mpt"}), sc.traffic)
        elif system in MPT_VARIANTS:
            variant_kw = MPT_VARIANTS[system]
            kw = {
                k: (v() if callable(v) else v)
                for k, v in variant_kw.items()
                if k not in ("extra", "without_qos", "transform")
            }
            more = str(variant_kw.get("extra", ""))
            own = sc.mpt_extra
            if variant_kw.get("without_qos"):
                own = without_qos(own)
            if callable(variant_kw.get("transform")):
                own = variant_kw["transform"](own)
            extra = "\n".join(x for x in (own, more) if x)
            kw.setdefault("learns", sc.server_learns)
            kw.setdefault("side_extra", routes)
            where = work / f"{combo}-{n}-{system}"
            self._run_system(
                topo,
                lambda: systems.mpt(topo, tv, pv, rates, where, extra, **kw),
                Point(**{**asdict(base), "system": system}),
                sc.traffic_by_system.get(system, sc.traffic),
            )
        elif system == "mptcp" and tv == pv and not sc.lans:
            tr = [t for t in sc.traffic if t in ("tcp", "http")]
            proto = Point(**{**asdict(base), "system": "mptcp", "ip": f"-in{pv}", "tunnel_v": 0})
            self._run_system(topo, lambda: systems.mptcp(topo, pv), proto, tr)
        elif system == "hook" and sc.hook_up and sc.hook_down:
            self._run_system(
                topo,
                lambda: systems.hook(topo, sc.hook_up, sc.hook_down, tv, pv, sc.hook_mtu),
                Point(**{**asdict(base), "system": "hook"}),
                sc.traffic,
            )

    def run(self) -> list[Point]:
        sc = self.sc
        work = self.outdir / "work"
        if "plain" in sc.systems:
            for pv in sorted({_ip(c)[1] for c in sc.ip}):
                shapes = sc.shapes_for(1)[:1]
                with Topology(1, shape=shapes, cc=sc.cc) as topo:
                    if sc.lans:
                        self.lans[id(topo)] = add_lans(topo)
                    proto = Point(
                        sc.name, "plain", f"-in{pv}", 0, pv, 1, "", sum(sc.link_rates(1)[:1])
                    )
                    self._run_system(topo, lambda pv=pv: systems.plain(topo, pv), proto, sc.traffic)
        for combo in sc.ip:
            tv, pv = _ip(combo)
            for n in sc.link_counts:
                shapes = sc.shapes_for(n)
                rates = sc.link_rates(n)
                with Topology(n, shape=shapes, cc=sc.cc) as topo:
                    if sc.lans:
                        self.lans[id(topo)] = add_lans(topo)
                    base = Point(sc.name, "", combo, tv, pv, n, "", sum(rates))
                    self._warm_up(topo)
                    # In the order the scenario (or `systems=`) lists them.
                    for system in sc.systems:
                        self._run_listed(topo, system, base, rates, work)
        return self.points
