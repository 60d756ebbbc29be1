"""The qos-matrix scenario's cells, settings and verdicts (no network)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mptlab import scenario
from mptlab.qosmatrix import Settings, _cell_row, _scenario, markdown


def _point(system: str, traffic: str, **details: object) -> SimpleNamespace:
    return SimpleNamespace(system=system, traffic=traffic, details=details, error=None)


def _mix(jain: float, share: float, owd: float, voip_loss: float = 0.0) -> dict[str, object]:
    return {
        "bulk_jain": jain,
        "bulk_share_of_fair": share,
        "voip_owd_mean_ms": owd,
        "voip_loss": voip_loss,
        "m2m_loss": 0.0,
        "bulk_streams_mbps": [10.0, 10.0],
        "flood_mbps": 10.0,
    }


def test_a_cell_meets_the_targets_only_with_every_figure() -> None:
    points = [
        _point("mpt", "voip", owd_mean_ms=5.2),
        _point("mpt", "qos-mix", **_mix(0.995, 0.99, 5.9)),
        _point("mpt-noqos", "qos-mix", **_mix(0.7, 0.3, 120.0)),
    ]
    row = _cell_row(points, "none")
    assert row["met"], row
    assert row["on"]["voip_over_idle_ms"] == pytest.approx(0.7)
    assert row["off"]["voip_over_idle_ms"] == pytest.approx(114.8)
    points[1] = _point("mpt", "qos-mix", **_mix(0.40, 1.005, 5.4))
    row = _cell_row(points, "none")
    assert not row["met"] and row["checks"]["jain"] is False
    # With jitter the VoIP delay is reported, not judged.
    points[1] = _point("mpt", "qos-mix", **_mix(0.99, 0.99, 9.0))
    assert _cell_row(points, "wifi")["met"]
    assert not _cell_row(points, "none")["met"]
    assert "**no**" in markdown(
        {
            "met": 0,
            "total": 1,
            "rows": [
                {
                    **_cell_row(points, "none"),
                    "pair": "60+15",
                    "jitter": "none",
                    "flows": 4,
                    "flood": 3.0,
                    "repeat": 0,
                }
            ],
        }
    )


def test_settings_from_the_scenario_file_and_overrides() -> None:
    sc = scenario.load("qos-matrix", ["matrix.pairs=60+15", "matrix.flows=4"])
    s = Settings.from_dict(sc.matrix or {}, sc.mpt_extra)
    assert s.pairs == ["60+15"] and s.flows == [4] and s.repeats == 3
    assert 'name = "telemetry"' in s.extra
    cell = _scenario(s, "60+15", "wifi", 4, 3.0, ["mpt", "mpt-noqos"])
    assert [x.rate_mbit for x in cell.shapes or []] == [60.0, 15.0]
    assert [x.jitter_ms for x in cell.shapes or []] == [1.5, 5.0]
    assert cell.mix_streams == 4 and cell.flood_factor == 3.0
    for bad in ({"pairs": ["60x15"]}, {"jitter": ["lte"]}, {"flows": [0]}, {"nope": 1}):
        with pytest.raises(ValueError):
            Settings.from_dict(bad, "")


def test_a_base_build_is_reported_against_its_own_idle_reference() -> None:
    points = [
        _point("mpt", "voip", owd_mean_ms=5.2),
        _point("mpt-base", "voip", owd_mean_ms=5.4),
        _point("mpt", "qos-mix", **_mix(0.995, 0.99, 5.5)),
        _point("mpt-base", "qos-mix", **_mix(0.99, 0.99, 6.4)),
        _point("mpt-noqos", "qos-mix", **_mix(0.7, 0.3, 120.0)),
    ]
    row = _cell_row(points, "none", base=True)
    assert row["on"]["voip_over_idle_ms"] == pytest.approx(0.3)
    assert row["base"]["voip_over_idle_ms"] == pytest.approx(1.0)
    assert row["off"]["voip_over_idle_ms"] == pytest.approx(114.8)
    assert row["met"], "the base's figures are reported, not judged"
    table = markdown(
        {
            "settings": {"base": True},
            "met": 1,
            "total": 1,
            "rows": [
                {**row, "pair": "30+30", "jitter": "none", "flows": 4, "flood": 3.0, "repeat": 0}
            ],
        }
    )
    assert "base: VoIP over idle ms" in table and "| 1.00 |" in table
    s = Settings.from_dict({"base": "true"}, "")
    assert s.base is True
    with pytest.raises(ValueError):
        Settings.from_dict({"base": "maybe"}, "")


def test_runs_of_several_sessions_merge_per_cell_with_their_worst_figures() -> None:
    from mptlab.qosmatrix import merge, merged_markdown

    def row(pair: str, rep: int, jain: float, owd: float) -> dict[str, object]:
        points = [
            _point("mpt", "voip", owd_mean_ms=5.0),
            _point("mpt", "qos-mix", **_mix(jain, 0.99, owd)),
            _point("mpt-noqos", "qos-mix", **_mix(0.5, 0.3, 120.0)),
        ]
        r = _cell_row(points, "none")
        r.update({"pair": pair, "jitter": "none", "flows": 4, "flood": 3.0, "repeat": rep})
        return r

    first = {"rows": [row("60+15", 0, 0.999, 5.2), row("100+20", 0, 0.999, 5.1)]}
    # A run stopped before its first cell's row: nothing of it counts.
    second = {"rows": [row("60+15", 0, 0.990, 5.9), row("60+15", 1, 0.995, 5.3)]}
    m = merge([first, second], repeats_min=3)
    cells = {c["pair"]: c for c in m["cells"]}
    assert [c["pair"] for c in m["cells"]] == ["60+15", "100+20"]  # by rates
    c = cells["60+15"]
    assert (c["runs"], c["met"]) == (3, 3)
    assert c["jain_min"] == pytest.approx(0.990)
    assert c["voip_over_idle_ms_max"] == pytest.approx(0.9)
    assert c["off_voip_over_idle_ms_min"] == pytest.approx(115.0)
    # One cell has three runs, all met; the other has one.
    assert (m["complete"], m["runs"], m["met"]) == (1, 4, 4)
    assert "1 cells with at least 3 runs, all met" in merged_markdown(m)
