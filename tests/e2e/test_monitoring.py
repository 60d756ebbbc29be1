"""Monitoring for real: a Prometheus server (Debian's package) scrapes a
running tunnel, and PromQL's rate() over the per-path byte counters gives
each path's rate within 10 % of what its link carried; every metric the
Grafana dashboard (packaging/grafana/mpt-dashboard.json) queries exists in
a live scrape of a tunnel or of a concentrator."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Shape, Topology
from mptlab.star import Star, start
from mptlab.traffic import iperf3
from mptlab.util import repo_root, run, wait_for

LISTEN = "127.0.0.1:9586"
PROM = "127.0.0.1:9595"
# Ethernet, IPv4 and UDP headers: what a link counts beyond mpt's datagram.
FRAME_OVERHEAD = 14 + 20 + 8
DASHBOARD = repo_root() / "packaging" / "grafana" / "mpt-dashboard.json"


def _prometheus() -> str | None:
    return shutil.which("prometheus")


def _get(ns: str, url: str) -> str:
    return run(["curl", "-sf", url], ns=ns, timeout=10).stdout


def _query(ns: str, expr: str, at: float) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    doc = json.loads(_get(ns, f"http://{PROM}/api/v1/query?{q}"))
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def _start_prometheus(topo: Topology, workdir: Path) -> subprocess.Popen[Any]:
    d = workdir / "prometheus"
    d.mkdir(parents=True, exist_ok=True)
    (d / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: mpt\n"
        f"    static_configs:\n      - targets: ['{LISTEN}']\n"
    )
    log = open(d / "prometheus.log", "w")  # noqa: SIM115 (the process holds it)
    p = topo.spawn(
        "a",
        [
            str(_prometheus()),
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--web.listen-address={PROM}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_for(
        "prometheus ready",
        lambda: (
            run(["curl", "-sf", f"http://{PROM}/-/ready"], ns=topo.a, check=False).returncode == 0
        ),
        30,
        interval=0.2,
    )
    # Targets reach the scrape loop some seconds after start (discovery
    # updates are batched): wait for two scrapes of mpt.
    wait_for(
        "prometheus scraped mpt twice",
        lambda: (
            (r := _query(topo.a, "count_over_time(mpt_up[10s])", time.time()))
            and float(r[0]["value"][1]) >= 2
        ),
        30,
        interval=0.5,
    )
    return p


def _link_counters(ns: str, devs: list[str]) -> dict[str, tuple[int, int]]:
    """(tx bytes, tx packets) of each device."""
    doc = json.loads(run(["ip", "-j", "-s", "link", "show"], ns=ns).stdout)
    out = {}
    for d in doc:
        if d["ifname"] in devs:
            tx = d["stats64"]["tx"]
            out[d["ifname"]] = (tx["bytes"], tx["packets"])
    return out


def _at(samples: list[tuple[float, dict[str, tuple[int, int]]]], dev: str, t: float) -> float:
    """A device's datagram bytes (frame bytes less the headers) at time t,
    interpolated between the two samples around it."""
    pts = [(ts, c[dev][0] - FRAME_OVERHEAD * c[dev][1]) for ts, c in samples]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:], strict=False):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    raise ValueError(f"{t} outside the sampled interval {pts[0][0]}..{pts[-1][0]}")


@pytest.mark.skipif(_prometheus() is None, reason="prometheus is not installed")
def test_prometheus_rate_per_path_matches_what_each_link_carried(workdir: Path) -> None:
    opts = TunnelOpts(
        paths=[PathOpts(1), PathOpts(2)],
        extra=f'[metrics]\nlisten = "{LISTEN}"',
    )
    # Two 30 Mbit/s links and 45 Mbit/s of UDP: both paths carry a share.
    with Topology(2, shape=Shape(rate_mbit=30)) as topo:
        start_pair(topo, opts, workdir)
        _start_prometheus(topo, workdir)
        devs = ["l1a", "l2a"]
        samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.time(), _link_counters(topo.a, devs)))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            iperf3(topo, TUNNEL_V4["b"], udp=True, rate="45M", length=1200, seconds=12)
        finally:
            stop.set()
            sampler.join()
        # A window inside the transfer, after Prometheus scraped it.
        end = samples[-1][0] - 3.0
        window = 6.0
        time.sleep(2.0)
        by_path: dict[str, float] = {}
        for r in _query(topo.a, f"rate(mpt_path_transmit_bytes_total[{window:g}s])", end):
            by_path[r["metric"]["path"]] = float(r["value"][1])
        lines = []
        for i, dev in enumerate(devs, start=1):
            carried = (_at(samples, dev, end) - _at(samples, dev, end - window)) / window
            promql = by_path[f"link{i}v4"]
            lines.append(
                f"link{i}: PromQL rate() {promql * 8 / 1e6:.2f} Mbit/s, "
                f"the link carried {carried * 8 / 1e6:.2f} Mbit/s"
            )
            assert carried * 8 > 5e6, lines
            assert abs(promql / carried - 1) <= 0.10, lines
        print("\n" + "\n".join(lines))
        up = _query(topo.a, "mpt_path_up", end)
        assert len(up) == 2 and all(r["value"][1] == "1" for r in up), up
        names = set(json.loads(_get(topo.a, f"http://{PROM}/api/v1/label/__name__/values"))["data"])
        tunnel_scrape = _get(topo.a, f"http://{LISTEN}/metrics")
    missing = (
        _dashboard_metrics() - names - _families(tunnel_scrape) - _concentrator_families(workdir)
    )
    assert not missing, f"the dashboard queries metrics no live scrape has: {sorted(missing)}"


def _dashboard_metrics() -> set[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15, exprs
    return {m for e in exprs for m in re.findall(r"\bmpt_[a-z0-9_]+", e)}


def _families(text: str) -> set[str]:
    return {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}


def _concentrator_families(workdir: Path) -> set[str]:
    with Star(1, links=2) as star:
        _server, clients = start(
            star, workdir / "conc", server_extra=f'[metrics]\nlisten = "{LISTEN}"'
        )
        clients[0].wait_ready(paths_up=2, timeout=15)
        text = _get(star.ns("s"), f"http://{LISTEN}/metrics")
    fams = _families(text)
    assert "mpt_peer_transmit_bytes_total" in fams, text[:2000]
    return fams


def test_dashboard_covers_paths_loss_drops_classes_and_peers() -> None:
    doc = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"] for p in doc["panels"])
    wanted = ("Rate per path", "RTT", "One-way delay", "Loss", "Drops by reason", "Class", "peer")
    for what in wanted:
        assert what in titles, titles
    metrics = _dashboard_metrics()
    for m in (
        "mpt_path_transmit_bytes_total",
        "mpt_path_rtt_seconds",
        "mpt_path_owd_above_min_seconds",
        "mpt_path_receive_lost_by_cause_packets_total",
        "mpt_drops_total",
        "mpt_class_queueing_delay_seconds",
        "mpt_class_drops_total",
        "mpt_peer_transmit_bytes_total",
    ):
        assert m in metrics, m
