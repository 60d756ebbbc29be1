"""The lab's smoke scenario end to end: `mptlab run smoke --json` measures
plain and mpt over 1 and 2 links of 50 Mbit/s and writes its results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mptlab import runner

ROOT = Path(__file__).resolve().parents[2]


def run_lab(scenario: str, out: Path, **env: str) -> tuple[list[dict], str]:
    """`mptlab run SCENARIO --json`, from outside the repository; returns
    the summary points and stderr."""
    p = subprocess.run(
        [sys.executable, "-m", "mptlab.cli", "run", scenario, "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=out.parent,
        env={"PYTHONPATH": str(ROOT / "lab"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env},
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
    # The commit and version are recorded though mptlab ran elsewhere.
    doc = json.loads((out / "raw.json").read_text())
    assert len(doc["machine"]["commit"]) >= 7, doc["machine"]
    assert doc["machine"]["mpt_version"].startswith("mpt "), doc["machine"]
    assert doc["setup"] == {
        "seconds": 3.0,
        "link_rates_mbit": [50.0, 50.0],
        "tcp_congestion_control": "cubic",
    }
    # The plain system reads as such, not as "-in4".
    assert "plain  IPv4 N=1" in stderr, stderr
    print("\n" + stderr)


@pytest.mark.parametrize("cc", ["reno", "bbr"])
def test_the_hosts_take_the_scenarios_congestion_control(cc: str) -> None:
    from mptlab.netns import Topology, run

    with Topology(1, cc=cc) as topo:
        for ns in (topo.a, topo.b):
            got = run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"], ns=ns).stdout
            assert got.strip() == cc, ns


def test_hook_system_runs_a_user_tunnel(tmp_path: Path) -> None:
    """A user-supplied up/down script pair (here VXLAN over link 1) is
    measured beside the plain link."""
    tools = ROOT / "tests" / "e2e" / "tools"
    sc = tmp_path / "hook.toml"
    sc.write_text(
        'name = "hook"\ndescription = """\nipip beside plain\n  +--+ |\n"""\n'
        "[topology]\nlinks = [1]\nrate_mbit = 50\n"
        '[run]\nsystems = ["plain", "hook"]\nip = ["4in4"]\ntraffic = ["tcp", "udp"]\n'
        "seconds = 2\nudp_payload = 1472\n"
        f'[hook]\nup = "{tools / "vxlan-up.sh"}"\ndown = "{tools / "vxlan-down.sh"}"\n'
    )
    env_file = tmp_path / "hook.env"
    pts, _ = run_lab(str(sc), tmp_path / "out", MPTLAB_HOOK_ENV_FILE=str(env_file))
    hook = [x for x in pts if x["system"] == "hook"]
    assert hook and all(x["error"] is None for x in hook), pts
    assert next(x for x in hook if x["traffic"] == "tcp")["mbps"] > 30, pts
    # UDP datagrams fit the MTU the hook printed (VXLAN: 1450), not 1500.
    doc = json.loads((tmp_path / "out" / "raw.json").read_text())
    udp = {p["system"]: p["details"]["payload"] for p in doc["points"] if p["traffic"] == "udp"}
    assert udp == {"plain": 1472, "hook": 1450 - 28}, udp
    # The hook was told the link's rate, delay and loss.
    told = dict(ln.split("=", 1) for ln in env_file.read_text().splitlines())
    assert told["MPTLAB_LINK1_RATE_MBIT"] == "50", told
    assert told["MPTLAB_LINK1_DELAY_MS"] == "0" and told["MPTLAB_LINK1_LOSS"] == "0", told


def test_hook_processes_count_as_the_tunnel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "cpu_hz", lambda: 2e9)
    cycles_per_byte = runner.cycles_per_byte
    cpu = {"system_busy": 150.0, "a:glorytun": 40.0, "b:glorytun": 30.0, "a:iperf3": 50.0}
    plain = cycles_per_byte(cpu, 100.0)
    assert "tunnel_cycles_per_byte" not in plain
    own = cycles_per_byte(cpu, 100.0, ["glorytun"])
    ratio = own["tunnel_cycles_per_byte"] / own["cycles_per_byte"]
    assert abs(ratio - 70 / 150) < 1e-9, own


def test_plot_titles_and_labels() -> None:
    from mptlab import plot

    doc = {"scenario": "wifi-lte", "setup": {"seconds": 8.0, "link_rates_mbit": [100.0, 20.0]}}
    assert plot._setup(doc, [2]) == "wifi-lte, links of 20/100 Mbit/s, 8 s"
    doc["setup"]["link_rates_mbit"] = [50.0, 50.0]
    assert plot._setup(doc, [1, 2]) == "wifi-lte, 50 Mbit/s links, 8 s"
    assert runner.label_ip("-in4") == "IPv4" and runner.label_ip("4in6") == "4in6"
    assert plot._who({"system": "plain", "ip": "-in6"}) == "plain IPv6"
