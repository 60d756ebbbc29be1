"""Shared fixtures for end-to-end tests in network namespaces.

Tests need root (namespaces, TUN) and the release binary; they are skipped
with a clear reason otherwise, except in CI where missing prerequisites fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))

from mptlab.util import mpt_binary


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces and TUN)"
    if not mpt_binary().exists():
        return f"{mpt_binary()} not built (cargo build --release)"
    for tool in ("ip", "tc", "iperf3", "ping", "ss"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = _missing()
    if why is None:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(f"end-to-end prerequisites missing in CI: {why}")
    for it in items:
        if "e2e" in str(it.fspath):
            it.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
