"""`mptlab sweep-merge`: sweeps of one seed joined, each case the median of
every transfer; sweeps that do not belong together, and files that are not
sweeps, are refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mptlab.cli import main
from mptlab.sweep import markdown, summary_line
from mptlab.sweepmerge import MergeError, load, merge


def _row(case: int, mpt: float, mptcp: float, runs: dict | None = None) -> dict:
    row = {
        "case": case,
        "links": f"{10 + case}M/30ms + 5M/60ms",
        "notes": [],
        "order": ["mpt", "mptcp"],
        "mpt_share": mpt,
        "mptcp_share": mptcp,
        "ratio": mpt / mptcp,
        "errors": {},
    }
    if runs is not None:
        row["runs"] = runs
    return row


def _sweep(tmp: Path, name: str, rows: list[dict], seed: int = 1, repeats: int = 1) -> Path:
    d = tmp / name
    d.mkdir()
    s = {"seed": seed, "count": len(rows), "seconds": 10.0, "repeats": repeats, "cases": rows}
    (d / "sweep.json").write_text(json.dumps(s))
    return d


def test_each_case_is_the_median_of_every_transfer(tmp_path: Path) -> None:
    whole = _sweep(tmp_path, "whole", [_row(0, 0.50, 0.60), _row(1, 0.90, 0.80)])
    more = _sweep(
        tmp_path,
        "more",
        [_row(0, 0.70, 0.60, runs={"mpt": [0.70, 0.80], "mptcp": [0.60, 0.40]})],
        repeats=2,
    )
    s = merge([load(whole), load(more)], ["whole", "more"])
    by = {r["case"]: r for r in s["cases"]}
    # Case 0: mpt 0.50, 0.70, 0.80 -> 0.70; MPTCP 0.60, 0.60, 0.40 -> 0.60.
    assert by[0]["mpt_share"] == pytest.approx(0.70)
    assert by[0]["mptcp_share"] == pytest.approx(0.60)
    assert by[0]["ratio"] == pytest.approx(0.70 / 0.60)
    assert by[0]["transfers"] == 3
    # Case 1 ran once, and keeps its one transfer.
    assert by[1]["mpt_share"] == pytest.approx(0.90)
    assert by[1]["transfers"] == 1
    assert s["mpt_at_least_mptcp"] == 2 and s["compared"] == 2
    assert s["repeats"] == 1 and s["transfers_max"] == 3
    assert "(median of 1-3 transfers each, 2 sweeps merged)" in summary_line(s)
    md = markdown(s)
    assert md.startswith("`mptlab sweep-merge --out OUT whole more`")
    assert "| 0 | 10M/30ms + 5M/60ms | 70.0% | 60.0% | 1.167 |" in md


def test_a_loss_in_a_later_sweep_counts_as_much_as_a_win(tmp_path: Path) -> None:
    """Every transfer counts: a case mpt won once and lost twice is lost."""
    a = _sweep(tmp_path, "a", [_row(3, 0.80, 0.70)])
    b = _sweep(tmp_path, "b", [_row(3, 0.60, 0.70)])
    c = _sweep(tmp_path, "c", [_row(3, 0.65, 0.72)])
    s = merge([load(a), load(b), load(c)], ["a", "b", "c"])
    assert s["cases"][0]["mpt_share"] == pytest.approx(0.65)
    assert s["mpt_at_least_mptcp"] == 0


def test_sweeps_of_different_seeds_do_not_merge(tmp_path: Path) -> None:
    a = _sweep(tmp_path, "a", [_row(0, 0.5, 0.6)], seed=1)
    b = _sweep(tmp_path, "b", [_row(0, 0.5, 0.6)], seed=2)
    with pytest.raises(MergeError, match="different seeds"):
        merge([load(a), load(b)], ["a", "b"])


def test_a_folder_without_a_sweep_is_refused(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "sweep.json").write_text('{"seed": 1}')
    good = _sweep(tmp_path, "good", [_row(0, 0.5, 0.6)])
    assert main(["sweep-merge", "--out", str(tmp_path / "out"), str(good), str(bad)]) == 2
    assert "not a sweep summary" in capsys.readouterr().out
    assert main(["sweep-merge", "--out", str(tmp_path / "out"), str(tmp_path / "none")]) == 2
    assert "sweep.json" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_the_cli_writes_a_report_mptlab_report_reads(tmp_path: Path, capsys) -> None:
    a = _sweep(tmp_path, "a", [_row(0, 0.5, 0.6)])
    b = _sweep(tmp_path, "b", [_row(0, 0.7, 0.6)])
    out = tmp_path / "merged"
    assert main(["sweep-merge", "--out", str(out), str(a), str(b)]) == 0
    assert "mpt >= MPTCP in 1 of 1" in capsys.readouterr().out
    s = json.loads((out / "sweep.json").read_text())
    assert s["merged_from"] == [str(a), str(b)]
    assert (out / "sweep.md").read_text().startswith("`mptlab sweep-merge")


@pytest.mark.parametrize(
    "rows",
    [
        [{"links": "10M/30ms"}],
        ["case 0"],
        [{"case": 0, "mpt_share": "high"}],
        [{"case": 0, "runs": {"mpt": [0.5, "x"]}}],
        [{"case": 0, "runs": [0.5]}],
    ],
)
def test_a_malformed_case_is_named_not_a_crash(tmp_path: Path, rows: list) -> None:
    d = _sweep(tmp_path, "bad", rows)
    with pytest.raises(MergeError, match="case entry 0"):
        load(d)
