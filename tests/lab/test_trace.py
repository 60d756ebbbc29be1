"""Capacity traces (lab/mptlab/trace.py): the format's rules, what a
window offers (the same count as mpt-netem's), the generator, and the
scenario keys that name traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from mptlab import scenario
from mptlab.trace import TraceError, generate, parse


def test_parse_follows_mahimahis_format() -> None:
    t = parse("0\n1\n1\n\n4\n")
    assert t.times_ms == (0, 1, 1, 4) and t.period_ms == 4
    assert abs(t.mean_mbps() - 12.0) < 1e-9
    for bad, line in (("3\n2\n", "line 2"), ("1\nx\n", "line 2"), ("-1\n", "line 1")):
        with pytest.raises(TraceError, match=line):
            parse(bad)
    for bad in ("", "0\n0\n"):
        with pytest.raises(TraceError):
            parse(bad)


def test_offered_counts_opportunities_in_the_window_as_the_emulator_does() -> None:
    # The same case as mpt-netem's trace.rs test: from 3 ms on, the first
    # 10 ms hold the opportunities at 8, 10, 10 (the next period's 0), 11, 12.
    t = parse("0\n1\n2\n8\n10\n")
    assert t.offered_bits(3, 0, 0.010) == 5 * 1500 * 8
    # The trace repeats: a window a whole number of periods long offers
    # that many periods' worth, wherever it starts.
    for start in (0, 3, 7):
        assert t.offered_bits(start, 0, 0.1) == 10 * 5 * 1500 * 8


def test_the_generator_is_seeded_and_has_its_outages() -> None:
    a = generate(5, seconds=60, mean_mbps=8, outages=2)
    assert a == generate(5, seconds=60, mean_mbps=8, outages=2)
    assert a != generate(6, seconds=60, mean_mbps=8, outages=2)
    t = parse(a)
    assert t.period_ms == 60_000
    rates = t.rates_mbps(0, 60)
    assert 4 < t.mean_mbps() < 14
    assert sum(1 for r in rates if r == 0) >= 2, "outages of 2 s at least"


def test_scenario_traces_are_relative_to_the_scenario_and_checked(tmp_path: Path) -> None:
    (tmp_path / "t.down").write_text("1\n2\n")
    f = tmp_path / "s.toml"
    f.write_text('[[topology.link]]\ntrace = "t.down"\ndelay_ms = 10\n')
    sc = scenario.load(str(f))
    assert sc.shapes is not None and sc.shapes[0].trace == str(tmp_path / "t.down")
    assert sc.link_rates(1) == [12.0]
    f.write_text('[[topology.link]]\ntrace = "missing"\n')
    with pytest.raises(scenario.ScenarioError, match="cannot read"):
        scenario.load(str(f))
    f.write_text('[[topology.link]]\ntrace = "t.down"\nrate_mbit = 5\n')
    with pytest.raises(scenario.ScenarioError, match="exclude"):
        scenario.load(str(f))
    for name in ("lte-trace", "two-lte", "site-to-site"):
        assert scenario.load(name).name == name


def test_repeats_on_fresh_tunnels_merge_into_medians() -> None:
    from mptlab.repeats import merge_repeats
    from mptlab.runner import Point

    def pt(mbps: float | None, err: str | None = None) -> Point:
        p = Point("s", "mpt", "4in4", 4, 4, 2, "tcp", 100.0, mbps=mbps, error=err)
        p.efficiency = None if mbps is None else mbps / 100
        return p

    m = merge_repeats([pt(80), pt(90), pt(None, "boom"), pt(85)])
    assert m.mbps == 85 and (m.mbps_min, m.mbps_max) == (80, 90)
    assert m.efficiency == 0.85 and m.details["repeat_mbps"] == [80, 90, 85]
    assert m.details["failed_repeats"] == ["boom"]
    assert merge_repeats([pt(None, "down")]).error == "down"


def test_an_ab_summary_gives_medians_spread_and_the_slot_bias() -> None:
    from mptlab.ab import report, summarize

    # A first in runs 0 and 2, B first in runs 1 and 3; the first slot
    # reads 2 points lower for both.
    figs = {
        "mpt": [(0, 0.88), (1, 0.90), (0, 0.88), (1, 0.90)],
        "mpt-base": [(1, 0.86), (0, 0.84), (1, 0.86), (0, 0.84)],
    }
    s = summarize("mpt", "mpt-base", figs)
    assert abs(s["a_minus_b"] - 0.04) < 1e-9
    assert abs(s["slot_bias"] + 0.02) < 1e-9
    assert s["systems"]["mpt"]["min"] == 0.88 and s["systems"]["mpt"]["max"] == 0.90
    assert "slot bias (first slot − second): -2.0 points" in report(s)[-1]


def test_a_stall_is_counted_only_where_the_links_offered_capacity() -> None:
    from mptlab.trace import longest_stall_s

    spans = [
        {"start": i * 0.5, "end": (i + 1) * 0.5, "bytes": b}
        for i, b in enumerate([1e6, 0, 0, 0, 1e6, 0, 0, 0, 0, 1e6])
    ]

    # The links offer nothing from 2.5 s to 4 s (an outage of the trace).
    def offered(a: float, b: float) -> float:
        return 0.0 if 2.5 <= a < 4.0 else 10.0

    assert longest_stall_s(spans, offered) == 1.5  # 0.5-2.0 s
    assert longest_stall_s(spans, lambda a, b: 10.0) == 2.0  # 2.5-4.5 s
