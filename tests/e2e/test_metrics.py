"""Prometheus endpoint (`[metrics] listen`): scraped inside the daemon's
namespace while traffic flows, and parsed with the reference Python parser
of the text format (prometheus_client); counters match `mpt status` and
grow with the traffic; a wrong method or path is refused.
"""

from __future__ import annotations

from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology
from mptlab.traffic import ping
from mptlab.util import run
from prometheus_client.parser import text_string_to_metric_families

LISTEN = "127.0.0.1:9586"


def _scrape(ns: str, path: str = "/metrics", method: str = "GET") -> tuple[int, str]:
    r = run(
        ["curl", "-s", "-X", method, "-o", "-", "-w", "\n%{http_code}", f"http://{LISTEN}{path}"],
        ns=ns,
        timeout=10,
    )
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "tunnel"))
            out[(s.name, labels)] = s.value
    return out


def test_metrics_endpoint_serves_the_status_in_prometheus_text(workdir: Path) -> None:
    opts = TunnelOpts(
        paths=[PathOpts(1), PathOpts(2)],
        extra=f'[metrics]\nlisten = "{LISTEN}"',
    )
    with Topology(2) as topo:
        a, _b = start_pair(topo, opts, workdir)
        code, first = _scrape(topo.a)
        assert code == 200, first
        before = _samples(first)
        assert before[("mpt_up", ())] == 1
        assert ping(topo, "a", TUNNEL_V4["b"], count=20, interval=0.05).received == 20
        code, text = _scrape(topo.a)
        assert code == 200
        after = _samples(text)
        st = a.status()
        for name in ("link1v4", "link2v4"):
            key = ("mpt_path_up", (("path", name),))
            assert after[key] == 1, after
            tx = ("mpt_path_transmit_packets_total", (("path", name),))
            assert after[tx] > 0
        assert (
            after[("mpt_transmit_packets_total", ())]
            >= before[("mpt_transmit_packets_total", ())] + 20
        )
        assert after[("mpt_paths_up", ())] == st["paths_up"] == 2
        for reason, n in st["drops"].items():
            assert after[("mpt_drops_total", (("reason", reason),))] <= n
        rtt = after[("mpt_path_rtt_seconds", (("path", "link1v4"),))]
        assert 0 < rtt < 1, rtt
        # One-way delay above the path's minimum, by quantile, as in status.
        owd = st["paths"][0]["owd_above_min"]
        p99 = after[("mpt_path_owd_above_min_seconds", (("path", "link1v4"), ("quantile", "0.99")))]
        assert 0 <= p99 <= owd["max_ms"] / 1e3 + 0.01 and owd["samples"] > 0, (p99, owd)
        assert _scrape(topo.a, "/")[0] == 404
        assert _scrape(topo.a, method="POST")[0] == 405
        print(f"\n{len(after)} samples; first lines:\n" + "\n".join(text.splitlines()[:6]))


# Run inside the daemon's namespace: hold `idle` silent connections and
# `slow` ones that send their request a byte every 200 ms, then time
# `scrapes` real scrapes one after another; prints the latencies in ms.
_CROWD = """
import socket, sys, threading, time, json
host, port = sys.argv[1], int(sys.argv[2])
idle, slow, scrapes = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
held = [socket.create_connection((host, port)) for _ in range(idle)]
stop = False
def loris():
    ss = [socket.create_connection((host, port)) for _ in range(slow)]
    while not stop:
        for s in ss:
            try:
                s.send(b"G")
            except OSError:
                pass
        time.sleep(0.2)
t = threading.Thread(target=loris, daemon=True)
t.start()
time.sleep(0.5)
lat = []
for _ in range(scrapes):
    t0 = time.monotonic()
    s = socket.create_connection((host, port))
    s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    lat.append((time.monotonic() - t0) * 1000)
    assert data.startswith(b"HTTP/1.1 200"), data[:100]
    s.close()
stop = True
print(json.dumps(sorted(lat)))
"""


def test_a_scrape_answers_at_once_beside_hundreds_of_idle_and_slow_clients(
    workdir: Path,
) -> None:
    import json

    opts = TunnelOpts(paths=[PathOpts(1)], extra=f'[metrics]\nlisten = "{LISTEN}"')
    with Topology(1) as topo:
        start_pair(topo, opts, workdir)
        host, port = LISTEN.split(":")
        r = run(["python3", "-c", _CROWD, host, port, "300", "50", "100"], ns=topo.a, timeout=120)
        lat = json.loads(r.stdout.strip().splitlines()[-1])
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1]
        print(
            "\nscrape latency beside 300 idle and 50 slow connections: "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lat[-1]:.1f} ms"
        )
        assert p99 < 100, lat


def test_a_listen_address_others_reach_is_warned_about(workdir: Path) -> None:
    from mptlab.util import mpt_binary

    with Topology(1) as topo:
        a, _b = start_pair(
            topo,
            TunnelOpts(paths=[PathOpts(1)], extra='[metrics]\nlisten = "0.0.0.0:9587"'),
            workdir,
        )
        r = run([str(mpt_binary()), "check", "-c", str(a.cfg)], timeout=10)
        assert "is not a loopback address" in r.stderr, r.stderr
        assert "is not a loopback address" in a.log_text()
