"""Capacity traces of trace-driven links (mahimahi's format, which
mpt-netem replays: `crates/mpt-netem/src/trace.rs` states the rules).

A trace is one line per delivery opportunity, the time in milliseconds
from its start, non-decreasing; each opportunity carries 1500 bytes; the
trace repeats with its last time as period. This module reads traces,
tells what a trace offered in a window of the emulator's time (the same
count as the emulator's), and makes synthetic LTE-like traces from a
seed (`mptlab trace`), so that the repository carries traces of its own.

Invariants: `offered_bits` counts the opportunities whose time lies in
[from, to) of the replay, exactly as mpt-netem serves them; a generated
trace is a function of its arguments alone.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

OPPORTUNITY_BYTES = 1500


class TraceError(ValueError):
    """A trace file that cannot be read or does not follow the format."""


@dataclass(frozen=True)
class Trace:
    times_ms: tuple[int, ...]

    @property
    def period_ms(self) -> int:
        return self.times_ms[-1]

    def mean_mbps(self) -> float:
        return len(self.times_ms) * OPPORTUNITY_BYTES * 8 / self.period_ms / 1000

    def first_from(self, t_ms: int) -> int:
        """Index (over repetitions) of the first opportunity at or after t_ms."""
        n = len(self.times_ms)
        rep, r = divmod(t_ms, self.period_ms)
        return rep * n + bisect.bisect_left(self.times_ms, r)

    def offered_bits(self, start_ms: float, from_s: float, to_s: float) -> float:
        """Bits offered between `from_s` and `to_s` seconds of replay that
        started at `start_ms` of the trace."""

        def at(t_s: float) -> int:
            return self.first_from(int(start_ms) + math.ceil(max(t_s, 0.0) * 1000))

        return (at(to_s) - at(from_s)) * OPPORTUNITY_BYTES * 8

    def rates_mbps(self, start_ms: float, seconds: float, step_s: float = 1.0) -> list[float]:
        """What the trace offers in each `step_s` of a replay from `start_ms`."""
        steps = max(int(seconds / step_s), 1)
        return [
            self.offered_bits(start_ms, i * step_s, (i + 1) * step_s) / step_s / 1e6
            for i in range(steps)
        ]


def parse(text: str, name: str = "trace") -> Trace:
    times: list[int] = []
    for i, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if not s.isdigit():
            raise TraceError(f"{name}: line {i}: '{s}' is not a time in whole milliseconds")
        t = int(s)
        if times and t < times[-1]:
            raise TraceError(f"{name}: line {i}: {t} ms is earlier than the line before")
        times.append(t)
    if not times:
        raise TraceError(f"{name}: no delivery opportunity")
    if times[-1] == 0:
        raise TraceError(f"{name}: the trace must span at least 1 ms")
    return Trace(tuple(times))


@lru_cache(maxsize=32)
def load_trace(path: Path) -> Trace:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e}") from e
    return parse(text, str(path))


def generate(
    seed: int,
    seconds: int = 120,
    mean_mbps: float = 10.0,
    low_mbps: float = 1.0,
    high_mbps: float = 30.0,
    outages: int = 2,
    outage_s: tuple[float, float] = (2.0, 8.0),
) -> str:
    """A synthetic cellular trace: the rate of each 100 ms follows a
    log-normal AR(1) process around `mean_mbps` (correlation time about
    2 s, clipped to `low_mbps`..`high_mbps`), with `outages` gaps of no
    capacity at all (each `outage_s` long, placed at random), then each
    millisecond gets its share of 1500-byte opportunities."""
    rnd = random.Random(seed)
    step_ms = 100
    phi = math.exp(-step_ms / 2000)
    sigma = 0.7
    x = 0.0
    rates = []
    for _ in range(seconds * 1000 // step_ms):
        x = phi * x + math.sqrt(1 - phi * phi) * rnd.gauss(0, sigma)
        r = mean_mbps * math.exp(x - sigma * sigma / 2)
        rates.append(min(max(r, low_mbps), high_mbps))
    for _ in range(outages):
        length = int(rnd.uniform(*outage_s) * 1000 / step_ms)
        at = rnd.randrange(0, max(len(rates) - length, 1))
        for i in range(at, min(at + length, len(rates))):
            rates[i] = 0.0
    lines = []
    credit = 0.0
    for ms in range(1, seconds * 1000 + 1):
        credit += rates[(ms - 1) // step_ms] * 1e6 / 8 / 1000 / OPPORTUNITY_BYTES
        while credit >= 1.0:
            lines.append(str(ms))
            credit -= 1.0
    if not lines or lines[-1] != str(seconds * 1000):
        # The period is the last time: end the trace at its full length.
        lines.append(str(seconds * 1000))
    return "\n".join(lines) + "\n"


def offered_mbit(topo: Any, shapes: list[Any], t_from_ns: int, t_to_ns: int, system: str) -> float:
    """The capacity the links offered A to B between two monotonic times,
    Mbit/s: a fixed link's rate, a trace-driven link's opportunities in the
    window (as mpt-netem served them, from its start `emulator_t0_ns`).
    `plain` uses the first link only."""
    t0 = topo.emulator_t0_ns or t_from_ns
    a, b = (t_from_ns - t0) / 1e9, (t_to_ns - t0) / 1e9
    total = 0.0
    for s in shapes[:1] if system == "plain" else shapes:
        if s.trace:
            bits = load_trace(Path(s.trace)).offered_bits(s.trace_start_s * 1000, a, b)
            total += bits / max(b - a, 1e-9) / 1e6
        else:
            total += s.rate_mbit or 0.0
    return total


def link_offered_mbit(topo: Any, shape: Any, t_from_ns: int, t_to_ns: int) -> float | None:
    """What one trace-driven link offered A to B between two monotonic
    times, Mbit/s (as `offered_mbit`); None for a link of fixed rate."""
    if not shape.trace:
        return None
    t0 = topo.emulator_t0_ns or t_from_ns
    a, b = (t_from_ns - t0) / 1e9, (t_to_ns - t0) / 1e9
    bits = load_trace(Path(shape.trace)).offered_bits(shape.trace_start_s * 1000, a, b)
    return bits / max(b - a, 1e-9) / 1e6


def longest_stall_s(
    spans: list[dict[str, float]],
    offered_mbps: Callable[[float, float], float],
    idle_mbps: float = 0.1,
    offered_min_mbps: float = 1.0,
) -> float:
    """The longest stretch of consecutive receiver intervals (iperf3's
    server `sum`s: start, end, bytes) in which nothing arrived (under
    `idle_mbps`) although the links offered at least `offered_min_mbps`:
    a stall of the system, not of the links (a trace's own outage offers
    nothing and ends a stretch)."""
    longest = run = 0.0
    for sp in spans:
        secs = sp["end"] - sp["start"]
        if secs <= 0:
            continue
        got = sp["bytes"] * 8 / secs / 1e6
        if got < idle_mbps and offered_mbps(sp["start"], sp["end"]) >= offered_min_mbps:
            run += secs
            longest = max(longest, run)
        else:
            run = 0.0
    return longest


def transfer_stall_s(
    topo: Any, shapes: list[Any], raw: dict[str, Any] | None, t_from_ns: int, system: str
) -> float:
    """The longest stall of an iperf3 transfer (its receiver's intervals)
    on links of which some follow traces; the transfer's window starts at
    monotonic `t_from_ns` (`longest_stall_s`)."""
    server = (raw or {}).get("server_output_json") or {}
    spans = [i["sum"] for i in server.get("intervals", []) if "sum" in i]

    def offered(a: float, b: float) -> float:
        return offered_mbit(
            topo, shapes, t_from_ns + int(a * 1e9), t_from_ns + int(b * 1e9), system
        )

    return longest_stall_s(spans, offered)
