"""CPU use of processes, sampled with timestamps.

The original MPT measurements logged CPU without timestamps; here every
sample carries its time. Besides the processes named by PID, every process
in the given namespaces is found at each tick (`ip netns pids`) and counted
under `side:command` (for example `a:iperf3`, `b:mpt`, `b:nginx`), so the
traffic tools are measured as well as the tunnel. Invariant: sampling runs
on its own thread, is stopped by `stop()`, and a process that exits mid-run
simply stops contributing samples.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")
# A point's progress line names the CPU the hypervisor stole during it
# (percent of one core, mean over the point) from this much on.
STEAL_NOTE_PCT = 5.0


def _proc_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _ns_pids(ns: str) -> list[int]:
    p = subprocess.run(
        ["ip", "netns", "pids", ns], capture_output=True, text=True, check=False, timeout=5
    )
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def system_ticks() -> tuple[int, int, int]:
    """(all, idle, stolen) ticks of the machine. Steal is time the
    hypervisor ran something else while this guest wanted a CPU: on a
    shared VM a run's figures fall with it, so each run records it."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    steal = vals[7] if len(vals) > 7 else 0
    return sum(vals), idle, steal


def process_pct(cpu: dict[str, float] | None) -> float:
    """The processes' CPU of a point's `cpu_pct` (percent of one core),
    without the whole machine's `system_*` figures."""
    return round(sum(v for k, v in (cpu or {}).items() if not k.startswith("system_")), 1)


def stolen_note(cpu: dict[str, float] | None) -> str:
    """` (stolen N%)` when the hypervisor took [`STEAL_NOTE_PCT`] of a
    core or more during a point, else nothing."""
    steal = (cpu or {}).get("system_steal", 0.0)
    return f" (stolen {steal:.0f}%)" if steal >= STEAL_NOTE_PCT else ""


class CpuSampler:
    """Samples CPU % (of one core) per labelled PID, and whole-machine busy
    % and stolen % (`system_steal`, counted in `system_busy` too)."""

    def __init__(
        self, pids: dict[str, int], interval: float = 0.25, namespaces: dict[str, str] | None = None
    ):
        self.pids = pids
        self.namespaces = namespaces or {}
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _ns_ticks(self) -> dict[int, tuple[str, int]]:
        """pid -> (side:command, ticks) for every process in the namespaces."""
        out: dict[int, tuple[str, int]] = {}
        named = set(self.pids.values())
        for side, ns in self.namespaces.items():
            for pid in _ns_pids(ns):
                t = _proc_ticks(pid)
                if t is not None and pid not in named:
                    out[pid] = (f"{side}:{_comm(pid)}", t)
        return out

    def _loop(self) -> None:
        last = {k: _proc_ticks(p) for k, p in self.pids.items()}
        last_ns = self._ns_ticks()
        last_sys = system_ticks()
        t0 = last_t = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            dt = now - last_t
            row: dict[str, Any] = {"t": round(now - t0, 3)}
            for k, p in self.pids.items():
                cur = _proc_ticks(p)
                prev = last.get(k)
                if cur is not None and prev is not None and dt > 0:
                    row[k] = round((cur - prev) / TICKS / dt * 100, 1)
                last[k] = cur
            cur_ns = self._ns_ticks()
            for pid, (label, ticks) in cur_ns.items():
                prev_ns = last_ns.get(pid)
                if prev_ns is not None and dt > 0:
                    pct = (ticks - prev_ns[1]) / TICKS / dt * 100
                    row[label] = round(row.get(label, 0.0) + pct, 1)
            last_ns = cur_ns
            tot, idle, steal = system_ticks()
            dtot, didle = tot - last_sys[0], idle - last_sys[1]
            if dtot > 0:
                row["system_busy"] = round((dtot - didle) / dtot * 100 * os.cpu_count(), 1)
                row["system_steal"] = round((steal - last_sys[2]) / dtot * 100 * os.cpu_count(), 1)
            last_sys = (tot, idle, steal)
            last_t = now
            self.samples.append(row)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=5)
        means: dict[str, float] = {}
        keys = {k for s in self.samples for k in s if k != "t"}
        n = max(len(self.samples), 1)
        for k in keys:
            # Over the whole run: a process absent from a sample used nothing.
            means[k] = round(sum(s.get(k, 0.0) for s in self.samples) / n, 1)
        return {"mean_pct": means, "samples": self.samples}


def cpu_hz() -> float:
    """The CPU clock from /proc/cpuinfo (the first core's), in Hz."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) * 1e6
    except (OSError, ValueError):
        pass
    return 0.0


def cycles_per_byte(
    cpu_pct: dict[str, float], mbps: float, processes: list[str] | None = None
) -> dict[str, float]:
    """CPU cycles per delivered byte: of the whole machine (busy time of
    all cores) and of the tunnel's own processes (names starting 'mpt-',
    and a hook tunnel's `processes`, counted on either side)."""
    hz, rate = cpu_hz(), mbps * 1e6 / 8
    if not hz or rate <= 0:
        return {}
    own = set(processes or [])
    tunnel = sum(
        v for k, v in cpu_pct.items() if k.startswith("mpt-") or k.split(":", 1)[-1] in own
    )
    out = {"cycles_per_byte": cpu_pct.get("system_busy", 0.0) / 100 * hz / rate}
    if tunnel:
        out["tunnel_cycles_per_byte"] = tunnel / 100 * hz / rate
    return out
