"""The measuring instruments' accuracy (issue: measurement instruments):
the `measure` lab scenario against the emulated links' settings, and
mpt-probe's own reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mptlab.util import probe_binary


def _run_measure(out: Path) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(
        [sys.executable, "-m", "mptlab.cli", "run", "measure", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(p.stdout[-4000:], p.stderr[-2000:])
    return p


def test_measure_scenario_meets_every_accuracy_target(tmp_path: Path) -> None:
    out = tmp_path / "measure"
    p = _run_measure(out)
    for attempt in (2, 3):
        if p.returncode == 0:
            break
        # The targets are a few microseconds wide; on a loaded 2-core
        # machine the emulator's own wake-ups once read 10.4 µs against
        # 10 (that was before the sender's transmit stamps, which halved
        # the error at 1,000 probes/s), and in one CI run the host was so
        # slow for minutes that 1 Gbit/s read 896 Mbit/s twice (a UDP
        # flood in another test lost 18-26 % at the same time). Up to two
        # more runs; the last one's figures must all hold.
        print(f"a target was missed; measuring again (attempt {attempt})")
        out = tmp_path / f"measure-{attempt}"
        p = _run_measure(out)
    doc = json.loads((out / "raw.json").read_text())
    rows = doc["rows"]
    by = {(r["check"], r.get("pps"), r.get("stamps"), r.get("rate_mbit")): r for r in rows}
    # One-way delay: the median within 10 µs of the emulated 10 ms, at
    # 1,000 and 10,000 probes/s, with kernel receive stamps.
    for pps in (1000, 10_000):
        r = by[("one-way delay", pps, "kernel", None)]
        assert abs(r["error_us"]) <= 10.0, r
        assert r["lost"] == 0
        # Departures timed by the kernel's transmit stamps, but the last.
        assert r["send_stamps"]["kernel"] >= doc["settings"]["owd_packets"] - 1, r
        user = by[("one-way delay", pps, "user", None)]
        assert user["send_stamps"]["kernel"] == 0, user
        # User-space stamps were measured in the same run, for comparison.
        assert ("one-way delay", pps, "user", None) in by
    # Capacity by dispersion within 2 % on 100 Mbit/s and 1 Gbit/s. At 1
    # Gbit/s frames are 12 µs apart: a host whose emulator releases them
    # later than that on average does not emulate the link (one machine:
    # 201 µs), and the row says so instead of judging the measurement.
    for rate in (100.0, 1000.0):
        r = by[("capacity (dispersion)", None, None, rate)]
        assert r["trains"] >= 90, r
        if rate == 1000.0 and r["met"] is None:
            assert "not judged: the emulator released frames" in r["target"], r
            print(f"1 Gbit/s dispersion not judged on this host: {r['target']}")
            continue
        assert abs(r["error"]) <= 0.02, r
    loss = next(r for r in rows if r["check"] == "loss")
    assert abs(loss["z"]) <= 3.0, loss
    stamp = next(r for r in rows if r["check"].startswith("stamping"))
    assert stamp["clock_resolution_ns"] >= 1
    assert 0 < stamp["kernel_latency"]["p50_ns"] < 1_000_000
    table = (out / "accuracy.md").read_text()
    assert "NetFPGA" in table and "| one-way delay |" in table
    assert p.returncode == 0, "a target was missed"


def test_probe_reports_in_text_and_json_with_kernel_stamps() -> None:
    probe = str(probe_binary())
    recv = subprocess.Popen(
        [probe, "recv", "--bind", "127.0.0.1:47911", "--count", "200", "--train", "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert recv.stderr is not None
        assert "listening" in recv.stderr.readline()
        send = subprocess.run(
            [probe, "send", "--to", "127.0.0.1:47911", "--count", "200", "--pps", "100"]
            + ["--train", "10"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert send.stdout.startswith("sent 200 probes")
        out, _ = recv.communicate(timeout=30)
    finally:
        recv.kill()
    assert "received 200 of 200 probes" in out, out
    assert "one-way delay ms: min" in out
    assert "reordering (RFC 4737)" in out
    assert "capacity (dispersion, median of 180 pairs in 20 trains)" in out
    assert "arrivals stamped by: kernel" in out


def test_stamp_selftest_reports_resolution_and_jitter() -> None:
    p = subprocess.run(
        [str(probe_binary()), "stamp", "--count", "2000", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    r = json.loads(p.stdout)
    assert r["packets"] == 2000
    k = r["kernel_latency"]
    assert k["min_ns"] <= k["p50_ns"] <= k["p99_ns"] <= k["max_ns"]
    # The stamps separate consecutive packets. Not every pair: on a VM two
    # packets of one burst read the same kernel stamp now and then (a CI
    # run read a least spacing of 0 once in 2000).
    assert r["kernel_spacing_p50_ns"] > 0
    assert r["kernel_spacing_min_ns"] <= r["kernel_spacing_p50_ns"]
    text = subprocess.run(
        [str(probe_binary()), "stamp", "--count", "500"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "clock: resolution" in text and "jitter: IQR" in text
