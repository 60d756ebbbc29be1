"""Command execution and waiting helpers.

Invariants: every wait has a timeout and raises TimeoutError naming what it
waited for; every command failure raises CommandError with the command line
and its stderr, never a bare CalledProcessError.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class CommandError(RuntimeError):
    """A command exited non-zero."""


def run(
    args: list[str], *, ns: str | None = None, check: bool = True, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run a command (inside namespace `ns` if given) and capture its output."""
    full = (["ip", "netns", "exec", ns] if ns else []) + args
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=False)
    if check and p.returncode != 0:
        raise CommandError(f"{' '.join(full)} -> exit {p.returncode}: {p.stderr.strip()}")
    return p


def need_tool(name: str, why: str) -> None:
    """Raise a clear error when command `name` is not installed: a missing
    tool otherwise shows only as a timeout far from its cause (no
    `iperf3`: "waiting for iperf3 server"; no `ethtool`: tunnels that
    never come up)."""
    if shutil.which(name) is None:
        raise RuntimeError(
            f"the lab needs {name} {why}: apt-get install {name}, or run ./scripts/install-deps"
        )


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.05
) -> T:
    """Call `probe` until it returns something truthy; raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            v = probe()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}{extra}")
        time.sleep(interval)


def repo_root() -> Path:
    """The repository root (where Cargo.toml lives)."""
    env = os.environ.get("MPT_REPO")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "Cargo.toml").exists() and (parent / "crates").exists():
            return parent
    return Path.cwd()


def mpt_binary() -> Path:
    """The mpt binary to test: $MPT_BIN or the release build."""
    env = os.environ.get("MPT_BIN")
    if env:
        return Path(env)
    return repo_root() / "target" / "release" / "mpt"


def base_binary() -> Path:
    """The mpt binary of the `mpt-base` system (A/B against an earlier
    build in the same run): $MPT_BASE_BIN, which must be set."""
    env = os.environ.get("MPT_BASE_BIN")
    if not env:
        raise CommandError("system mpt-base needs MPT_BASE_BIN (the earlier mpt binary)")
    path = Path(env)
    if not path.is_file():
        raise CommandError(f"MPT_BASE_BIN={env}: no such file")
    return path


def netem_binary() -> Path:
    """The link emulator binary: $MPT_NETEM_BIN or the release build."""
    env = os.environ.get("MPT_NETEM_BIN")
    return Path(env) if env else repo_root() / "target" / "release" / "mpt-netem"


def probe_binary() -> Path:
    """The probe generator binary: $MPT_PROBE_BIN or the release build."""
    env = os.environ.get("MPT_PROBE_BIN")
    return Path(env) if env else repo_root() / "target" / "release" / "mpt-probe"
