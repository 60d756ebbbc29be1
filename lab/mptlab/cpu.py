"""CPU use of processes, sampled with timestamps.

The original MPT measurements logged CPU without timestamps; here every
sample carries its time. Invariant: sampling runs on its own thread, is
stopped by `stop()`, and a process that exits mid-run simply stops
contributing samples.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")


def _proc_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def _system_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals), idle


class CpuSampler:
    """Samples CPU % (of one core) per labelled PID, and whole-machine busy %."""

    def __init__(self, pids: dict[str, int], interval: float = 0.25):
        self.pids = pids
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        last = {k: _proc_ticks(p) for k, p in self.pids.items()}
        last_sys = _system_ticks()
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
            tot, idle = _system_ticks()
            dtot, didle = tot - last_sys[0], idle - last_sys[1]
            if dtot > 0:
                row["system_busy"] = round((dtot - didle) / dtot * 100 * os.cpu_count(), 1)
            last_sys = (tot, idle)
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
        for k in keys:
            vals = [s[k] for s in self.samples if k in s]
            means[k] = round(sum(vals) / len(vals), 1) if vals else 0.0
        return {"mean_pct": means, "samples": self.samples}
