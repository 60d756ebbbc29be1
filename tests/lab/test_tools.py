"""A tool the lab needs and the machine lacks is named, with how to get it."""

import pytest
from mptlab.util import need_tool


def test_a_missing_tool_is_named_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match=r"needs ethtool .*apt-get install ethtool"):
        need_tool("ethtool", "to turn the veths' offloads off")


def test_a_present_tool_passes() -> None:
    need_tool("sh", "for nothing")
