"""Unit tests of the per-path timeline (no root needed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

from mptlab.timeline import StatusSampler, add_offered, path_row, render  # noqa: E402


def _doc(tx: list[int]) -> dict:
    return {
        "paths": [
            {
                "name": f"p{i}",
                "state": "up",
                "tx_bytes": b,
                "sending": {"pacing_mbps": 4.0, "control": "grow", "queueing_ms": 2.5},
            }
            for i, b in enumerate(tx)
        ]
    }


class _Peer:
    """A daemon whose byte counters grow by 50 kB per poll on path 0 and
    that fails every third poll."""

    def __init__(self) -> None:
        self.polls = 0

    def status(self) -> dict:
        self.polls += 1
        if self.polls % 3 == 0:
            raise OSError("control socket gone")
        return _doc([50_000 * self.polls, 0])


def test_the_sampler_turns_byte_counters_into_rates_and_skips_failed_polls() -> None:
    peer = _Peer()
    s = StatusSampler(peer, interval=0.02).start()
    import time

    deadline = time.monotonic() + 5
    while peer.polls < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    rows = s.stop()
    polls = peer.polls
    time.sleep(0.1)
    assert peer.polls == polls, "no poll after stop"
    assert len(rows) >= 3
    for r in rows:
        p0, p1 = r["paths"]
        assert p0["name"] == "p0" and p0["control"] == "grow"
        assert p0["sent_mbps"] is not None and p0["sent_mbps"] > 0
        assert p1["sent_mbps"] == 0
        assert r["to_ns"] > r["from_ns"]


def test_offered_is_added_per_path_and_rendered() -> None:
    rows = [
        {
            "t": 0.2,
            "from_ns": 0,
            "to_ns": 200_000_000,
            "paths": [
                {**path_row(_doc([1000, 0])["paths"][0]), "sent_mbps": 3.5},
                {**path_row(_doc([1000, 0])["paths"][1]), "sent_mbps": 0.0},
            ],
        }
    ]
    add_offered(rows, lambda i, a, b: 6.0 if i == 0 else None)
    assert rows[0]["paths"][0]["offered_mbps"] == 6.0
    assert rows[0]["paths"][1]["offered_mbps"] is None
    line = render(rows)
    assert "sent   3.5 offered   6.0" in line and line.count("offered") == 1


def test_a_path_that_stalled_in_an_interval_is_marked() -> None:
    from mptlab.timeline import rows_with_rates

    def sample(t: float, stalls: int) -> dict:
        doc = _doc([1000, 1000])
        doc["paths"][1]["stalls"] = stalls
        return {"t": t, "t_ns": int(t * 1e9), "paths": [path_row(p) for p in doc["paths"]]}

    rows = rows_with_rates([sample(0.0, 0), sample(0.2, 0), sample(0.4, 1)])
    assert [r["paths"][1]["stalled_now"] for r in rows] == [False, True]
    assert [r["paths"][0]["stalled_now"] for r in rows] == [False, False]
    text = render(rows)
    assert text.splitlines()[1].endswith("STALL")
    assert "STALL" not in text.splitlines()[0]
