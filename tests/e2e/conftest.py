"""Shared fixtures for end-to-end tests in network namespaces.

Tests need root (namespaces, TUN) and the release binary; they are skipped
with a clear reason otherwise, except in CI where missing prerequisites fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

from mptlab.cpu import system_ticks
from mptlab.util import mpt_binary


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces and TUN)"
    if not mpt_binary().exists():
        return f"{mpt_binary()} not built (cargo build --release)"
    for tool in ("ip", "tc", "iperf3", "ping", "ss"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = _missing()
    if why is None:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(f"end-to-end prerequisites missing in CI: {why}")
    for it in items:
        if "e2e" in str(it.fspath):
            it.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


# ---------------------------------------------------------------------------
# The host's state around each test. CI has failed CPU-bound tests late in
# the suite that pass alone: something earlier leaves the host slower. Each
# test's line records what it left behind (processes, named namespaces),
# what the kernel's own threads spent while it ran (namespace teardown runs
# in kworkers, after `ip netns del` returns) and how long a fixed loop takes
# on one core at its start. The summary names the outliers.
# ---------------------------------------------------------------------------

_HOST_ROWS: list[dict] = []


def _kthread_cpu_s() -> float:
    """CPU seconds of all kernel threads (children of kthreadd, pid 2)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state; ppid is fields[1]; utime, stime 11, 12.
        if fields[1] == "2" or d == "2":
            total += int(fields[11]) + int(fields[12])
    return total / tick


def _ours() -> dict[str, int]:
    """Processes a test may leave behind, by name."""
    names = ("mpt", "mpt-netem", "iperf3", "ping", "python3")
    seen = dict.fromkeys(names, 0)
    for d in os.listdir("/proc"):
        if not d.isdigit() or d == str(os.getpid()):
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm in seen:
            seen[comm] += 1
    return seen


def _cpu_s() -> dict[str, float]:
    """Whole-machine CPU seconds: busy (stolen time apart) and stolen."""
    tick = os.sysconf("SC_CLK_TCK")
    total, idle, steal = system_ticks()
    return {"busy": (total - idle - steal) / tick, "steal": steal / tick}


def _calib_ms() -> float:
    import time

    t = time.perf_counter()
    x = 0
    for i in range(300_000):
        x += i
    return (time.perf_counter() - t) * 1e3


def _host_snapshot() -> dict:
    import time

    try:
        netns = len(os.listdir("/var/run/netns"))
    except OSError:
        netns = 0
    with open("/proc/meminfo") as f:
        mem = {ln.split(":")[0]: int(ln.split()[1]) for ln in f}
    return {
        "t": time.monotonic(),
        "kthread_s": _kthread_cpu_s(),
        "cpu": _cpu_s(),
        "netns": netns,
        "procs": _ours(),
        "avail_mib": mem.get("MemAvailable", 0) // 1024,
        "calib_ms": _calib_ms(),
    }


@pytest.fixture(autouse=True)
def _host_state(request: pytest.FixtureRequest):
    if os.geteuid() != 0 or "e2e" not in str(request.node.fspath):
        yield
        return
    before = _host_snapshot()
    yield
    after = _host_snapshot()
    grew = {k: v for k, v in after["procs"].items() if v > before["procs"].get(k, 0)}
    _HOST_ROWS.append(
        {
            "test": request.node.nodeid.split("::", 1)[-1],
            "secs": after["t"] - before["t"],
            "kthread_s": after["kthread_s"] - before["kthread_s"],
            "busy_s": after["cpu"]["busy"] - before["cpu"]["busy"],
            "steal_s": after["cpu"]["steal"] - before["cpu"]["steal"],
            "calib_ms": before["calib_ms"],
            "netns_left": after["netns"],
            "procs_left": grew,
            "avail_mib": after["avail_mib"],
        }
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if not _HOST_ROWS:
        return
    out = os.environ.get("MPT_E2E_HOST_LOG")
    if out:
        import json

        Path(out).write_text("\n".join(json.dumps(r) for r in _HOST_ROWS) + "\n")
    tr = terminalreporter
    tr.section("host state around the end-to-end tests")
    calib = sorted(r["calib_ms"] for r in _HOST_ROWS)
    tr.write_line(
        f"one-core loop at each test's start: median {calib[len(calib) // 2]:.1f} ms, "
        f"max {calib[-1]:.1f} ms; memory available at the end "
        f"{_HOST_ROWS[-1]['avail_mib']} MiB (first test: {_HOST_ROWS[0]['avail_mib']})"
    )
    steal = sum(r["steal_s"] for r in _HOST_ROWS)
    busy = sum(r["busy_s"] for r in _HOST_ROWS)
    tr.write_line(f"all tests: {busy:.0f} CPU s busy, {steal:.1f} s stolen by the hypervisor")
    for r in sorted(_HOST_ROWS, key=lambda r: -r["steal_s"])[:3]:
        if r["steal_s"] >= 1.0:
            tr.write_line(f"  stolen {r['steal_s']:5.1f} s of {r['secs']:6.1f} s  {r['test']}")
    tr.write_line("kernel threads' CPU while a test ran (most first):")
    for r in sorted(_HOST_ROWS, key=lambda r: -r["kthread_s"])[:8]:
        tr.write_line(
            f"  {r['kthread_s']:6.1f} s of {r['secs']:6.1f} s"
            f"  loop {r['calib_ms']:5.1f} ms  {r['test']}"
        )
    left = [r for r in _HOST_ROWS if r["procs_left"] or r["netns_left"]]
    for r in left[:10]:
        tr.write_line(f"  left behind by {r['test']}: {r['procs_left']} netns={r['netns_left']}")
