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
