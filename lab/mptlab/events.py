"""Events during a run: links cut, restored or reshaped while a TCP
transfer or a VoIP stream runs, the rate of each path meanwhile, and the
recovery after a change of capacity.

Invariants: every event is applied at its time from the start of the
transfer; the links are put back as they were (up, with their original
shapes) after the run, also when it fails; the sampler's thread stops
with the run.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import asdict
from typing import Any

from . import systems
from .netns import Topology
from .probe import voip
from .scenario import Scenario
from .traffic import iperf3

# The receiver's report period during events (seconds): the outage and
# stall figures count in these steps.
FAILOVER_INTERVAL_S = 0.2

# How often the per-path sampler reads the sender's status (seconds).
PATH_SAMPLE_S = 0.25


class PathSampler:
    """Per-path send rates of an mpt sender over time, from the byte
    counters of `mpt status` read every PATH_SAMPLE_S on a thread: what each
    path carried while events changed the links. Nothing for other systems."""

    def __init__(self, peer: Any, start: float) -> None:
        self.peer, self.start_t = peer, start
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PathSampler:
        if self.peer is not None:
            self.thread.start()
        return self

    def _run(self) -> None:
        while not self.done.wait(PATH_SAMPLE_S):
            try:
                paths = self.peer.status()["paths"]
            except Exception:  # noqa: BLE001 - a missed sample is a gap, not a failure
                continue
            at = time.monotonic() - self.start_t
            self.samples.append((at, {p["name"]: p["tx_bytes"] for p in paths}))

    def stop(self) -> dict[str, Any] | None:
        """{"t": [s], "mbps": {path: [Mbit/s]}} between samples."""
        self.done.set()
        if self.peer is None:
            return None
        self.thread.join(timeout=5)
        s = self.samples
        if len(s) < 2:
            return None
        out: dict[str, Any] = {"t": [], "mbps": {n: [] for n in s[0][1]}}
        for (t0, b0), (t1, b1) in zip(s, s[1:], strict=False):
            dt = t1 - t0
            if dt <= 0:
                continue
            out["t"].append(round(t1, 3))
            for n in out["mbps"]:
                out["mbps"][n].append(round((b1.get(n, 0) - b0.get(n, 0)) * 8 / dt / 1e6, 3))
        return out


def recovery_after(
    timeline: list[tuple[float, float]], at_s: float, new_sum: float
) -> tuple[float | None, float]:
    """After a link changed at `at_s` (the links now sum to `new_sum`):
    seconds until an interval reaches 85 % of the new sum (None: never),
    and the longest run of intervals below 10 % of it (a stall)."""
    after = [(t, m) for t, m in timeline if t > at_s]
    reached = next((t for t, m in after if m >= 0.85 * new_sum), None)
    recovery = None if reached is None else round(reached - at_s, 3)
    longest = run = 0
    for _, m in after:
        run = run + 1 if m < 0.1 * new_sum else 0
        longest = max(longest, run)
    return recovery, round(longest * FAILOVER_INTERVAL_S, 3)


def tcp_with_events(
    sc: Scenario, topo: Topology, target: systems.Target
) -> tuple[float, dict[str, Any]]:
    """A TCP transfer with the scenario's events applied (links cut,
    restored or reshaped); every link is put back as it was after."""
    out: dict[str, Any] = {}

    def transfer() -> None:
        try:
            out["r"] = iperf3(
                topo,
                target.addr,
                seconds=sc.seconds,
                wrap=target.wrap,
                interval=FAILOVER_INTERVAL_S,
            )
        except Exception as e:  # noqa: BLE001 - recorded as not survived
            out["err"] = str(e)

    original = list(topo.shapes)
    t = threading.Thread(target=transfer)
    start = time.monotonic()
    t.start()
    sampler = PathSampler(target.peers[0] if target.peers else None, start).start()
    try:
        shaped_rates = apply_events(sc, topo, start)
        t.join(timeout=sc.seconds + 60)
    finally:
        path_timeline = sampler.stop()
        restore_links(sc, topo, original)
    if "r" not in out:
        return 0.0, {"survived": False, "error": out.get("err", "transfer did not finish")}
    r = out["r"]
    timeline = [
        (round(iv["sum"]["end"], 3), iv["sum"]["bits_per_second"] / 1e6)
        for iv in r.raw["intervals"]
    ]
    cut = min((e.at_s for e in sc.events if e.action == "cut"), default=None)
    outage = None
    if cut is not None:
        before = [m for t_, m in timeline if t_ <= cut]
        ref = statistics.median(before) if before else 0
        after = [(t_, m) for t_, m in timeline if t_ > cut]
        low = [t_ for t_, m in after if m < 0.1 * ref]
        outage = round(len(low) * FAILOVER_INTERVAL_S, 3)
    shaped = min((e.at_s for e in sc.events if e.action == "shape"), default=None)
    recovery = stall = None
    if shaped is not None and sum(shaped_rates) > 0:
        recovery, stall = recovery_after(timeline, shaped, sum(shaped_rates))
    return r.mbps, {
        "survived": True,
        "retransmits": r.retransmits,
        "timeline": timeline,
        "events": [asdict(e) for e in sc.events],
        "outage_s": outage,
        "recovery_s": recovery,
        "longest_stall_s": stall,
        "rates_after_shape": shaped_rates or None,
        "path_timeline": path_timeline,
    }


def apply_events(sc: Scenario, topo: Topology, start: float) -> list[float]:
    """Apply the scenario's events at their times from `start`; the
    links' rates after the last shape event (empty without one)."""
    shaped_rates: list[float] = []
    for ev in sorted(sc.events, key=lambda e: e.at_s):
        delay = start + ev.at_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if ev.action == "shape":
            topo.shape_link(ev.link, **ev.changes())
            shaped_rates = [s.rate_mbit or 0.0 for s in topo.shapes]
        else:
            topo.set_link(ev.link, up=ev.action == "restore")
    return shaped_rates


def restore_links(sc: Scenario, topo: Topology, original: list[Any]) -> None:
    """Leave the links as found: up, with their original shapes."""
    for ev in sc.events:
        topo.set_link(ev.link, up=True)
    for i, s in enumerate(original, start=1):
        if topo.shapes[i - 1] != s:
            keys = ("rate_mbit", "delay_ms", "jitter_ms", "loss")
            topo.shape_link(i, **{k: getattr(s, k) for k in keys if getattr(s, k) is not None})


def voip_with_events(sc: Scenario, topo: Topology, target: systems.Target) -> dict[str, Any]:
    """A VoIP stream with the scenario's events applied (a path cut in
    the middle of a call); the links are put back as they were after."""
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["v"] = voip(topo, target.addr, seconds=sc.seconds)
        except Exception as e:  # noqa: BLE001 - re-raised below
            out["err"] = e

    original = list(topo.shapes)
    t = threading.Thread(target=call)
    start = time.monotonic()
    t.start()
    try:
        apply_events(sc, topo, start)
        t.join(timeout=sc.seconds + 60)
    finally:
        restore_links(sc, topo, original)
    if "v" not in out:
        raise RuntimeError(f"VoIP stream with events failed: {out.get('err', 'timed out')}")
    return {**out["v"], "events": [asdict(e) for e in sc.events]}
