"""The `measure` scenario: how accurate mpt's measuring instruments are,
against the emulated links' known settings.

Each check builds its own topology (A and B joined by one link through
mpt-netem, which busy-polls on a CPU of its own, away from the sender, so
that frames are read as they arrive and leave on time to a microsecond or
two), measures with mpt-probe, and compares with what the link was set to:

* one-way delay: the median of probes at 1,000 and 10,000 packets/s against
  the link's delay, with the kernel's stamps at both ends (the sender's
  transmit stamps, which the next probe carries, and the receiver's
  receive stamps); user-space stamps at both ends measured in the same
  run, for comparison;
* capacity by dispersion: back-to-back trains on serialised links of 100
  Mbit/s and 1 Gbit/s (mpt-netem's exact per-frame rate, no token bucket),
  the median over consecutive pairs within the trains (a train's first
  packet reaching the emulator late on a busy host made whole trains read
  2-5 % fast at 1 Gbit/s; the per-train median is kept in `train_mbps`);
* loss: probes over a link with random loss, against 3 σ of the binomial;
* the stamping itself: `mpt-probe stamp`, back-to-back packets on the
  loopback.

The hosts are namespaces of one machine: they share one clock, so one-way
delay is exact up to the stamping; across machines only delay differences
and RTT/2 bounds are meaningful (docs/results.md says so with the table).

Invariant: every figure is written with its target and whether it met it;
topologies are torn down whatever happens.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .netns import Shape, Topology, link_addr
from .probe import stream
from .results import machine
from .traffic import ping
from .util import probe_binary
from .util import run as run_cmd

# The NetFPGA timestamping thesis (Gavaletakis), its stated accuracy.
THESIS = {
    "resolution_ns": 6.25,
    "stamp_jitter_ns": 8.0,
    "throughput_error": 0.01,
}


@dataclass
class Settings:
    delay_ms: float = 10.0
    pps: list[int] = field(default_factory=lambda: [1000, 10_000])
    owd_packets: int = 10_000
    rates_mbit: list[float] = field(default_factory=lambda: [100.0, 1000.0])
    train: int = 50
    trains: int = 100
    train_payload: int = 1472
    loss: float = 0.01
    loss_packets: int = 10_000
    spin_us: int = 100
    # Targets (the issue's): median delay error, capacity error.
    owd_error_us_max: float = 10.0
    capacity_error_max: float = 0.02

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Settings:
        s = Settings()
        for k, v in d.items():
            if not hasattr(s, k):
                raise ValueError(f"[measure]: unknown key '{k}'")
            cur = getattr(s, k)
            if isinstance(cur, list):
                items = v if isinstance(v, list) else [v]
                setattr(s, k, [type(cur[0])(x) for x in items])
            else:
                setattr(s, k, type(cur)(v))
        if s.owd_packets < 10 or s.loss_packets < 100 or s.trains < 1 or s.train < 2:
            raise ValueError("[measure]: too few packets or trains to measure anything")
        if not 0 < s.loss < 1:
            raise ValueError("[measure]: loss must be a fraction within 0..1")
        return s


DST = link_addr(1, "b", 4)
# With two CPUs or more, the emulator gets one of its own and the sender
# another, so that neither delays the other's timing.
_PIN = (os.cpu_count() or 1) >= 2
SENDER_CPU = 0 if _PIN else None


def _topology(s: Settings, shape: Shape) -> Topology:
    return Topology(
        1, shape=shape, spin_us=s.spin_us, busy_poll=True, emulator_cpu=1 if _PIN else None
    )


def _receive_beside_the_sender(t: Topology) -> None:
    """B's receive path runs on the sender's CPU (RPS), not inside the
    emulator's sends. On a veth the receiver's protocol work otherwise runs
    in the softirq of the emulator's own send call: on a slow 2-core host
    that took most of the 12 µs a 1 Gbit/s frame lasts, the emulator fell
    behind (10 µs late per frame on average) and released the trains'
    frames bunched, so the link read 3.5-6.9 % fast. The kernel's receive
    stamp is taken before the hand-over (`netdev_tstamp_prequeue`), so it
    still marks when the emulator sent the frame."""
    if SENDER_CPU is None:
        return
    queues = f"/sys/class/net/{t.dev(1, 'b')}/queues"
    mask = f"{1 << SENDER_CPU:x}"
    run_cmd(["sh", "-c", f"for q in {queues}/rx-*; do echo {mask} > $q/rps_cpus; done"], ns=t.b)


def _owd(s: Settings, say: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    with _topology(s, Shape(delay_ms=s.delay_ms)) as t:
        ping(t, "a", DST, count=1)
        for pps in s.pps:
            for stamps in ("kernel", "user"):
                r = stream(
                    t,
                    DST,
                    count=s.owd_packets,
                    pps=pps,
                    size=64,
                    user_stamps=stamps == "user",
                    sender_cpu=SENDER_CPU,
                )
                err_us = (r["owd_p50_ms"] - s.delay_ms) * 1000
                row = {
                    "check": "one-way delay",
                    "setting": f"{s.delay_ms:g} ms at {pps} pkt/s, {stamps} stamps",
                    "pps": pps,
                    "stamps": stamps,
                    "measured": r["owd_p50_ms"],
                    "unit": "ms",
                    "error_us": err_us,
                    "p99_ms": r["owd_p99_ms"],
                    "jitter_ms": r["jitter_ms"],
                    "lost": r["lost"],
                    "send_stamps": r.get("send_stamps"),
                    "target": f"median within ±{s.owd_error_us_max:g} µs",
                    # The target is for the instrument's own (kernel) stamps.
                    "met": abs(err_us) <= s.owd_error_us_max if stamps == "kernel" else None,
                }
                say(f"  {row['setting']}: median {r['owd_p50_ms']:.4f} ms, error {err_us:+.1f} us")
                rows.append(row)
        rows[-1]["emulator"] = t.emulator_stats()
    return rows


# Bytes of a probe's frame beyond its payload: UDP, IPv4 and Ethernet
# headers (the emulator serialises whole frames).
FRAME_OVERHEAD_BYTES = 8 + 20 + 14


def _emulator_late_mean_us(emulator: dict[str, Any] | None) -> float | None:
    """How late, on average, the emulator released the probes' frames
    (the direction that carried most), µs; None without its counters."""
    dirs = (emulator or {}).get("directions") or []
    stats = [d.get("stats") or {} for d in dirs]
    busiest = max(stats, key=lambda x: x.get("passed", 0), default={})
    n = busiest.get("passed", 0)
    return busiest.get("late_ns_sum", 0) / n / 1000 if n else None


def _capacity(s: Settings, say: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    for rate in s.rates_mbit:
        shape = Shape(rate_mbit=rate, serialize=True)
        with _topology(s, shape) as t:
            _receive_beside_the_sender(t)
            ping(t, "a", DST, count=1)
            r = stream(
                t,
                DST,
                count=s.train * s.trains,
                pps=50,
                size=s.train_payload,
                train=s.train,
                sender_cpu=SENDER_CPU,
            )
            emulator = t.emulator_stats()
        cap = r.get("capacity") or {}
        mbps = cap.get("mbps")
        err = None if mbps is None else mbps / rate - 1
        late_us = _emulator_late_mean_us(emulator)
        frame_us = (s.train_payload + FRAME_OVERHEAD_BYTES) * 8 / rate
        faithful = late_us is None or late_us <= frame_us
        target = f"within {s.capacity_error_max:.0%}"
        if not faithful:
            # The reference is the link the emulator serialises: when it
            # releases frames later on average than one frame's time, the
            # trains leave it spread by the host, not by the rate, and the
            # row says nothing of the measurement (this session's machine:
            # 201 µs late at 1 Gbit/s, where frames are 12 µs apart).
            target += (
                f"; not judged: the emulator released frames {late_us:.0f} µs late on "
                f"average, more than a frame's {frame_us:.1f} µs at this rate"
            )
        row = {
            "check": "capacity (dispersion)",
            "setting": f"{rate:g} Mbit/s, trains of {s.train} x {s.train_payload} B",
            "rate_mbit": rate,
            "measured": mbps,
            "unit": "Mbit/s",
            "error": err,
            "train_mbps": cap.get("train_mbps"),
            "pairs": cap.get("pairs"),
            "p10_mbps": cap.get("p10_mbps"),
            "p90_mbps": cap.get("p90_mbps"),
            "trains": cap.get("trains"),
            "target": target,
            "met": (err is not None and abs(err) <= s.capacity_error_max) if faithful else None,
            "emulator_late_mean_us": late_us,
            # How late the emulator released frames: a link it could not
            # serialise on time (a slow host) reads fast, its frames bunched.
            "emulator": emulator,
        }
        say(f"  {row['setting']}: {mbps} Mbit/s ({'-' if err is None else f'{err:+.2%}'})")
        rows.append(row)
    return rows


def _loss(s: Settings, say: Callable[[str], None]) -> list[dict[str, Any]]:
    with _topology(s, Shape(loss=s.loss)) as t:
        ping(t, "a", DST, count=3, interval=0.05)
        r = stream(t, DST, count=s.loss_packets, pps=5000, size=64)
    n = s.loss_packets
    expected = n * s.loss
    sigma = math.sqrt(n * s.loss * (1 - s.loss))
    row = {
        "check": "loss",
        "setting": f"{s.loss:.1%} random, {n} packets",
        "measured": r["lost"],
        "unit": "packets",
        "expected": expected,
        "sigma": sigma,
        "z": (r["lost"] - expected) / sigma,
        "target": f"within 3σ ({expected:.0f} ± {3 * sigma:.0f})",
        "met": abs(r["lost"] - expected) <= 3 * sigma,
    }
    say(f"  {row['setting']}: lost {r['lost']} (z = {row['z']:+.2f})")
    return [row]


def _stamping(say: Callable[[str], None]) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(probe_binary()), "stamp", "--count", "20000", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    k = r["kernel_latency"]
    row = {
        "check": "stamping (loopback)",
        "setting": f"{r['packets']} back-to-back packets of {r['size']} B",
        "measured": k["iqr_ns"],
        "unit": "ns",
        "clock_resolution_ns": r["clock_resolution_ns"],
        "clock_granularity_ns": r["clock_granularity_ns"],
        "kernel_latency": k,
        "user_latency": r["user_latency"],
        "kernel_spacing_min_ns": r["kernel_spacing_min_ns"],
        "target": "reported",
        "met": None,
    }
    say(
        f"  clock step {r['clock_granularity_ns']} ns; send->kernel stamp p50 {k['p50_ns']} ns, "
        f"IQR {k['iqr_ns']} ns, sd {k['sd_ns']:.0f} ns"
    )
    return [row]


def table(rows: list[dict[str, Any]]) -> str:
    """The accuracy table (Markdown), next to the thesis's hardware."""
    out = [
        "| check | setting | measured | error | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["measured"]
        if r["check"] == "one-way delay":
            meas, err = f"{m:.4f} ms", f"{r['error_us']:+.1f} µs"
        elif r["check"].startswith("capacity"):
            meas = "-" if m is None else f"{m:.2f} Mbit/s"
            err = "-" if r["error"] is None else f"{r['error']:+.2%}"
        elif r["check"] == "loss":
            meas, err = f"{m} lost", f"z = {r['z']:+.2f}"
        else:
            k = r["kernel_latency"]
            meas = (
                f"clock step {r['clock_granularity_ns']} ns; send→kernel stamp p50 {k['p50_ns']} ns"
            )
            err = f"jitter IQR {k['iqr_ns']} ns, sd {k['sd_ns']:.0f} ns"
        met = {True: "yes", False: "**no**", None: "-"}[r["met"]]
        out.append(f"| {r['check']} | {r['setting']} | {meas} | {err} | {r['target']} | {met} |")
    out += [
        "",
        f"NetFPGA hardware (Gavaletakis's thesis): {THESIS['resolution_ns']} ns resolution, "
        f"about {THESIS['stamp_jitter_ns']:g} ns stamping jitter, throughput error under "
        f"{THESIS['throughput_error']:.0%}.",
        "",
        "The hosts are namespaces of one machine and share its clock, so one-way delay is "
        "absolute here. Across machines it needs synchronised clocks: `mpt status` says "
        "whether each path's minimum lies within 0..RTT_min (`owd_clocks`: `consistent`, "
        "else `offset`); with an offset, read the delay above each path's minimum "
        "(differences are exact whatever the offset) and RTT/2 as a bound.",
    ]
    return "\n".join(out) + "\n"


def run(settings: dict[str, Any], outdir: Path, command: str, say: Callable[[str], None]) -> int:
    """Run every check; write raw.json and accuracy.md to `outdir`. Returns
    the number of targets missed."""
    s = Settings.from_dict(settings)
    outdir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    rows: list[dict[str, Any]] = []
    for name, fn in (
        ("one-way delay", lambda: _owd(s, say)),
        ("capacity by dispersion", lambda: _capacity(s, say)),
        ("loss", lambda: _loss(s, say)),
        ("stamping", lambda: _stamping(say)),
    ):
        say(f"{name}:")
        rows += fn()
    doc = {
        "scenario": "measure",
        "command": command,
        "machine": machine(),
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": s.__dict__,
        "rows": rows,
    }
    (outdir / "raw.json").write_text(json.dumps(doc, indent=1))
    md = table(rows)
    (outdir / "accuracy.md").write_text(md)
    say("")
    say(md)
    return sum(1 for r in rows if r["met"] is False)
