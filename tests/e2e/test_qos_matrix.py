"""The qos-matrix scenario, one cell (the issue's failing one: 60 + 15
Mbit/s, four TCP flows beside a flood at 3x, classes named and configured
otherwise than the qos scenario's), QoS on and off in the same run. The
whole matrix is for docs/results.md; CI runs this cell."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_one_cell_of_the_qos_matrix_runs_and_holds(tmp_path: Path) -> None:
    out = tmp_path / "qm"
    cell = ["matrix.pairs=60+15", "matrix.jitter=none", "matrix.flows=4", "matrix.floods=3"]
    r = subprocess.run(
        [sys.executable, "-m", "mptlab.cli", "run", "qos-matrix", *cell]
        + ["matrix.repeats=1", "matrix.seconds=6", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(r.stdout[-2000:])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "qos-matrix.json").read_text())
    (row,) = doc["rows"]
    on, off = row["on"], row["off"]
    assert on["error"] is None and off["error"] is None, row
    # Looser than the matrix's targets (a 6-second run): the flows share,
    # VoIP and M2M lose nothing, and QoS off shows the difference.
    assert on["jain"] >= 0.9, row
    assert on["share"] >= 0.8, row
    assert on["voip_loss"] == 0 and on["m2m_loss"] == 0, row
    assert on["voip_over_idle_ms"] < 5, row
    assert off["voip_over_idle_ms"] > 10 * max(on["voip_over_idle_ms"], 1.0), row
    assert "| 60+15 | none | 4 | 3x |" in (out / "qos-matrix.md").read_text()
