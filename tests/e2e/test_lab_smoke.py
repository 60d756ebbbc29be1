"""The lab's smoke scenario end to end: `mptlab run smoke --json` measures
plain and mpt over 1 and 2 links of 50 Mbit/s and writes its results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_lab(scenario: str, out: Path) -> tuple[list[dict], str]:
    """`mptlab run SCENARIO --json`; returns the summary points and stderr."""
    p = subprocess.run(
        [sys.executable, "-m", "mptlab.cli", "run", scenario, "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "lab"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])["points"], p.stderr


def test_smoke_scenario(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    pts, stderr = run_lab("smoke", out)
    assert {(x["system"], x["paths"], x["traffic"]) for x in pts} == {
        ("plain", 1, "tcp"),
        ("plain", 1, "udp"),
        ("mpt", 1, "tcp"),
        ("mpt", 1, "udp"),
        ("mpt", 2, "tcp"),
        ("mpt", 2, "udp"),
    }
    assert all(x["error"] is None for x in pts), pts
    two = [x for x in pts if x["system"] == "mpt" and x["paths"] == 2]
    assert all(x["efficiency"] > 0.7 for x in two), two
    for f in (
        "raw.json",
        "summary.csv",
        "throughput-tcp-4in4.png",
        "efficiency-udp-4in4.svg",
        "cpu-tcp-4in4.png",
    ):
        assert (out / f).exists(), f
    print("\n" + stderr)


def test_hook_system_runs_a_user_tunnel(tmp_path: Path) -> None:
    """A user-supplied up/down script pair (here VXLAN over link 1) is
    measured beside the plain link."""
    tools = ROOT / "tests" / "e2e" / "tools"
    sc = tmp_path / "hook.toml"
    sc.write_text(
        'name = "hook"\ndescription = """\nipip beside plain\n  +--+ |\n"""\n'
        "[topology]\nlinks = [1]\nrate_mbit = 50\n"
        '[run]\nsystems = ["plain", "hook"]\nip = ["4in4"]\ntraffic = ["tcp"]\nseconds = 2\n'
        f'[hook]\nup = "{tools / "vxlan-up.sh"}"\ndown = "{tools / "vxlan-down.sh"}"\n'
    )
    pts, _ = run_lab(str(sc), tmp_path / "out")
    hook = [x for x in pts if x["system"] == "hook"]
    assert hook and hook[0]["error"] is None and hook[0]["mbps"] > 30, pts
