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


def test_rows_name_the_losses_that_happened_in_their_interval() -> None:
    from mptlab.timeline import counters, rows_with_rates

    def doc(gave_up: int, late: int, aqm: int) -> dict:
        d = _doc([0])
        d["reorder"] = {"lost": gave_up, "late_delivered": late, "in_order": 99}
        d["recovery"] = {"gave_up": gave_up, "retransmitted": 0}
        d["drops"] = {"aqm": aqm, "queue_full": 1, "duplicate": 7}
        return d

    assert counters(doc(2, 1, 3)) == {
        "reorder.lost": 2,
        "reorder.late_delivered": 1,
        "recovery.gave_up": 2,
        "recovery.retransmitted": 0,
        "queue_drops": 4,
    }
    assert counters({}) == {"queue_drops": 0}
    samples = [
        {"t": t, "t_ns": int(t * 1e9), "paths": [path_row(p) for p in d["paths"]], "counters": c}
        for t, d, c in [
            (0.0, doc(0, 0, 0), counters(doc(0, 0, 0))),
            (0.2, doc(0, 0, 0), counters(doc(0, 0, 0))),
            (0.4, doc(6, 6, 2), counters(doc(6, 6, 2))),
        ]
    ]
    rows = rows_with_rates(samples)
    assert rows[0]["counters_grew"] == {}
    assert rows[1]["counters_grew"] == {
        "reorder.lost": 6,
        "reorder.late_delivered": 6,
        "recovery.gave_up": 6,
        "queue_drops": 2,
    }
    text = render(rows)
    assert "+6 recovery.gave_up" in text.splitlines()[1]
    assert "gave_up" not in text.splitlines()[0]


def _one_row(doc: dict) -> list[dict]:
    """A timeline of one 200 ms row from a status document."""
    paths = [{**path_row(p), "sent_mbps": 1.0} for p in doc["paths"]]
    return [{"t": 0.2, "from_ns": 0, "to_ns": 200_000_000, "paths": paths}]


def _rendered_with(key: str, first: float) -> tuple[list[dict], str]:
    """A row of two paths whose `sending.<key>` is `first` and 0.0, and its
    rendered line."""
    doc = _doc([1000, 1000])
    doc["paths"][0]["sending"][key] = first
    doc["paths"][1]["sending"][key] = 0.0
    rows = _one_row(doc)
    return rows, render(rows)


def test_a_links_own_queue_is_kept_and_rendered_when_learned() -> None:
    rows, line = _rendered_with("link_queue_ms", 8.8)
    assert rows[0]["paths"][0]["link_queue_ms"] == 8.8
    assert line.count(" own ") == 1 and "own   8.8" in line


def test_the_queue_the_scheduler_expects_is_kept_and_rendered() -> None:
    rows, line = _rendered_with("queue_ahead_ms", 12.5)
    assert rows[0]["paths"][0]["queue_ahead_ms"] == 12.5
    assert line.count(" ahead ") == 1 and "ahead  12.5" in line


def test_a_path_sent_more_than_it_delivered_is_marked_over() -> None:
    doc = _doc([1000, 1000, 1000])
    rates = [(26.0, 13.0), (20.0, 19.5), (None, 10.0)]
    for p, (sent, got) in zip(doc["paths"], rates, strict=True):
        p["sending"]["sent_then_mbps"] = sent
        p["sending"]["delivered_mbps"] = got
    rows = _one_row(doc)
    assert rows[0]["paths"][0]["sent_then_mbps"] == 26.0
    line = render(rows)
    assert line.count(" over ") == 1 and "over 2.00" in line
