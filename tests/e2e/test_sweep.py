"""`mptlab sweep`: three link sets from the seeded generator, each run
with mpt and MPTCP; the summary and the per-case table come out (the
figures are the lab's to report, not this test's to judge). With
`--timeline`, each case's raw.json holds the mpt sender's paths and each
system's inner TCP, read from `ss` in the namespaces, and `mptlab
timeline` prints them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_a_three_case_sweep_runs_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    r = subprocess.run(
        [sys.executable, "-m", "mptlab.cli", "sweep", "--seed", "7", "--count", "3"]
        + ["--seconds", "4", "--timeline", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(r.stdout[-2000:])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    s = json.loads((out / "sweep.json").read_text())
    assert len(s["cases"]) == 3
    for c in s["cases"]:
        assert not c["errors"], c
        assert c["mpt_share"] > 0 and c["mptcp_share"] > 0, c
    assert s["compared"] == 3
    assert "mpt >= MPTCP in" in (out / "sweep.md").read_text()
    for c in s["cases"]:
        # Every transfer's inner TCP was seen: a window, a round trip.
        assert set(c["tcp"]) == {"mpt", "mptcp"}, c
        for runs in c["tcp"].values():
            assert runs[0]["cwnd_mb_max"] > 0 and runs[0]["rtt_ms_median"] > 0, c
    assert "inner TCP: MPTCP rtt" in r.stdout or "inner TCP: mpt rtt" in r.stdout
    t = subprocess.run(
        [sys.executable, "-m", "mptlab.cli", "timeline", str(out / "case0")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert t.returncode == 0, t.stderr
    assert "the inner TCP at the sender" in t.stdout and " paced " in t.stdout
