"""The lab's command line on bad input: a clear message and exit status
2, never a traceback (no root needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

from mptlab import cli  # noqa: E402


@pytest.mark.parametrize("cmd", ["plot", "report", "timeline"])
def test_a_folder_without_results_is_named(
    cmd: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing"
    args = [cmd, str(missing)]
    if cmd == "report":
        args += ["--out", str(tmp_path / "out.md")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"mptlab {cmd}: {missing}" in err
    assert not (tmp_path / "out.md").exists()


def test_results_that_do_not_parse_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "raw.json").write_text("[1, 2")
    assert cli.main(["plot", str(tmp_path)]) == 2
    assert "not a results folder" in capsys.readouterr().err
    (tmp_path / "raw.json").write_text("[1, 2]")
    assert cli.main(["plot", str(tmp_path)]) == 2
    assert "not a results document" in capsys.readouterr().err


def test_a_run_with_a_bad_override_says_which_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "smoke", "seconds=abc"]) == 2
    assert "run.seconds: 'abc' is not a number" in capsys.readouterr().err
