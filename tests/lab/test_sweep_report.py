"""The sweep's report with the previous build beside mpt and MPTCP
(`mptlab sweep --base`): its columns and its summary line."""

from __future__ import annotations

from mptlab.sweep import markdown, summary_line


def _summary(base: bool) -> dict:
    case = {
        "case": 0,
        "links": "20M/30ms + 10M/60±2.0ms",
        "notes": [],
        "order": ["mpt", "mpt-base", "mptcp"],
        "mpt_share": 0.9,
        "mptcp_share": 0.8,
        "ratio": 1.125,
        "errors": {},
    }
    s = {
        "seed": 3,
        "count": 1,
        "seconds": 10.0,
        "mpt_share_p10": 0.9,
        "mpt_share_median": 0.9,
        "ratio_p10": 1.125,
        "ratio_median": 1.125,
        "mpt_at_least_mptcp": 1,
        "compared": 1,
        "cases": [case],
    }
    if base:
        case["base_share"] = 0.6
        case["base_ratio"] = 1.5
        s["base"] = {
            "share_p10": 0.6,
            "share_median": 0.6,
            "ratio_median": 1.5,
            "mpt_at_least_base": 1,
            "compared": 1,
        }
    return s


def test_the_previous_build_gets_its_columns_and_summary() -> None:
    md = markdown(_summary(True))
    assert "--base`" in md
    assert "| 0 | 20M/30ms + 10M/60±2.0ms | 90.0% | 80.0% | 1.125 | 60.0% | 1.500 |" in md
    line = summary_line(_summary(True))
    assert "mpt >= MPTCP in 1 of 1" in line
    assert "mpt/previous median 1.500, mpt >= previous in 1 of 1" in line


def test_without_the_previous_build_the_report_is_as_before() -> None:
    md = markdown(_summary(False))
    assert "previous" not in md
    assert "| 0 | 20M/30ms + 10M/60±2.0ms | 90.0% | 80.0% | 1.125 |" in md


def test_repeats_take_the_median_and_alternate_the_order(tmp_path, monkeypatch) -> None:
    """`mptlab sweep --repeats 3`: each case runs three times, the order
    of the systems alternates from repeat to repeat, and each system's
    share is the median of its three transfers (no network: the runner
    is a stand-in)."""
    from types import SimpleNamespace

    import mptlab.sweep as sweep

    orders = []
    mbps = iter([10.0, 1.0, 30.0, 5.0, 20.0, 3.0])  # mpt/MPTCP pairs per repeat

    class FakeRunner:
        def __init__(self, sc, work, progress=None) -> None:
            orders.append(list(sc.systems))
            work.mkdir(parents=True, exist_ok=True)

        def run(self):
            return [
                SimpleNamespace(system=s, mbps=next(mbps), error=None, details={})
                for s in ["mpt", "mptcp"]
            ]

    monkeypatch.setattr(sweep, "Runner", FakeRunner)
    s = sweep.run(5, 1, 10.0, tmp_path, say=lambda m: None, repeats=3)
    assert orders == [["mpt", "mptcp"], ["mptcp", "mpt"], ["mpt", "mptcp"]]
    case = sweep.draw(5, 0, 10.0, tmp_path / "traces")
    cap = sweep.capacity(case, 10.0, SimpleNamespace(details={}))
    row = s["cases"][0]
    assert abs(row["mpt_share"] - 20.0 / cap) < 1e-9
    assert abs(row["mptcp_share"] - 3.0 / cap) < 1e-9
    assert len(row["runs"]["mpt"]) == 3
    assert "(median of 3 each)" in sweep.summary_line(s)
    assert "--repeats 3" in (tmp_path / "sweep.md").read_text()


def test_cases_run_only_those_and_are_the_same_cases(tmp_path, monkeypatch) -> None:
    """`mptlab sweep --cases 3,1`: only cases 3 and 1 run, each the link
    set it is in the whole sweep, and the report names them."""
    from types import SimpleNamespace

    import mptlab.sweep as sweep

    seen = []

    class FakeRunner:
        def __init__(self, sc, work, progress=None) -> None:
            seen.append(work.name)
            work.mkdir(parents=True, exist_ok=True)

        def run(self):
            return [
                SimpleNamespace(system=s, mbps=5.0, error=None, details={})
                for s in ["mpt", "mptcp"]
            ]

    monkeypatch.setattr(sweep, "Runner", FakeRunner)
    s = sweep.run(7, 30, 10.0, tmp_path, say=lambda m: None, cases=[3, 1])
    assert seen == ["case3", "case1"]
    assert [r["case"] for r in s["cases"]] == [3, 1]
    whole = sweep.draw(7, 3, 10.0, tmp_path / "t2")
    assert s["cases"][0]["links"] == whole.describe()
    assert s["count"] == 2
    assert "--cases 3,1" in (tmp_path / "sweep.md").read_text()


def test_a_remote_bottleneck_moves_every_fixed_rate_into_the_emulator(tmp_path) -> None:
    """`mptlab sweep --remote-bottleneck`: the same cases, each fixed rate
    carried by the emulator in the middle (`serialize`) instead of tbf on
    the hosts' own ends; a trace link stays as it is; the report and its
    summary line say so."""
    import mptlab.sweep as sweep

    moved = 0
    for i in range(30):
        case = sweep.draw(11, i, 10.0, tmp_path / "traces")
        remote = sweep.remote_bottleneck(case)
        assert remote.describe() == case.describe()
        for before, after in zip(case.shapes, remote.shapes, strict=True):
            assert after.serialize == (before.trace is None)
            assert after.rate_mbit == before.rate_mbit and after.loss == before.loss
            moved += after.serialize
    assert moved > 30
    s = _summary(False)
    s["bottleneck"] = "remote"
    assert "--remote-bottleneck`" in markdown(s)
    assert "rates carried in the middle" in summary_line(s)
    assert "middle" not in summary_line(_summary(False))


def test_sweeps_with_the_bottleneck_in_different_places_do_not_merge() -> None:
    import pytest
    from mptlab.sweepmerge import MergeError, merge

    host, remote = _summary(False), _summary(False)
    remote["bottleneck"] = "remote"
    with pytest.raises(MergeError, match="remote-bottleneck"):
        merge([host, remote], ["a", "b"])
    both = merge([remote, dict(remote)], ["a", "b"])
    assert both["bottleneck"] == "remote"
