"""Packaging: the systemd unit, shell completions, the man page, the Debian
package (cargo-deb) and `cargo install`.

The unit is checked with `systemd-analyze verify` (with ExecStart pointed at
the binary under test, since /usr/bin/mpt is where a package installs it);
completions and the man page are generated from the CLI's own definitions,
so every subcommand appears in them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mptlab.util import mpt_binary

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "mpt@.service"
SUBCOMMANDS = [
    "up",
    "check",
    "reload",
    "genkey",
    "pubkey",
    "status",
    "path",
    "peer",
    "capture",
    "completions",
    "man",
]


def _mpt(*args: str) -> str:
    r = subprocess.run(
        [str(mpt_binary()), *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    text = UNIT.read_text().replace("/usr/bin/mpt", str(mpt_binary()))
    assert "ExecStart=" in text and "Restart=on-failure" in text
    unit = tmp_path / "mpt@t1.service"
    unit.write_text(text)
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Warnings about the host's other units are not ours: only lines that
    # name this unit count.
    ours = [ln for ln in (r.stdout + r.stderr).splitlines() if "mpt@" in ln]
    assert r.returncode == 0 and not ours, r.stdout + r.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completions_cover_every_subcommand(shell: str) -> None:
    script = _mpt("completions", shell)
    for sub in SUBCOMMANDS:
        assert sub in script, (shell, sub)
    if shell == "bash" and shutil.which("bash"):
        r = subprocess.run(
            ["bash", "-n"], input=script, text=True, capture_output=True, check=False
        )
        assert r.returncode == 0, r.stderr


def test_man_page_names_every_subcommand_and_the_exit_codes() -> None:
    page = _mpt("man")
    assert page.startswith(".ie") or ".TH mpt" in page
    assert ".TH mpt 1" in page
    for sub in SUBCOMMANDS:
        assert sub in page, sub
    assert "EXIT STATUS" in page
    if shutil.which("groff"):
        r = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z"],
            input=page,
            text=True,
            capture_output=True,
            check=False,
        )
        assert r.returncode == 0 and r.stderr == "", r.stderr


def test_unknown_shell_is_a_usage_error() -> None:
    r = subprocess.run(
        [str(mpt_binary()), "completions", "tcsh"], capture_output=True, text=True, check=False
    )
    assert r.returncode == 2 and "tcsh" in r.stderr


def test_man_dir_writes_a_page_per_subcommand(tmp_path: Path) -> None:
    _mpt("man", "--dir", str(tmp_path))
    pages = sorted(p.name for p in tmp_path.iterdir())
    assert pages == sorted(["mpt.1"] + [f"mpt-{s}.1" for s in SUBCOMMANDS]), pages
    assert "EXIT STATUS" in (tmp_path / "mpt.1").read_text()
    assert ".TH mpt-status 1" in (tmp_path / "mpt-status.1").read_text()
    r = subprocess.run(
        [str(mpt_binary()), "man", "--dir", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1 and "cannot write" in r.stderr and "missing" in r.stderr


@pytest.mark.skipif(
    subprocess.run(["cargo", "deb", "--version"], capture_output=True, check=False).returncode != 0,
    reason="cargo-deb missing (./scripts/install-deps installs it)",
)
def test_debian_package_holds_binary_unit_pages_and_completions(tmp_path: Path) -> None:
    r = subprocess.run(
        [str(ROOT / "scripts" / "package-deb")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    deb = Path(r.stdout.strip().splitlines()[-1])
    deb = deb if deb.is_absolute() else ROOT / deb
    info = subprocess.run(
        ["dpkg-deb", "--info", str(deb)], capture_output=True, text=True, check=True
    )
    assert "Package: mpt" in info.stdout and "Depends: libc6" in info.stdout, info.stdout
    listing = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True
    )
    for f in (
        "./usr/bin/mpt",
        "./lib/systemd/system/mpt@.service",
        "./usr/share/man/man1/mpt.1.gz",
        "./usr/share/man/man1/mpt-reload.1.gz",
        "./usr/share/bash-completion/completions/mpt",
        "./usr/share/doc/mpt/copyright",
        "./usr/share/doc/mpt/examples/client.toml",
    ):
        assert f in listing.stdout, f
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    v = subprocess.run(
        [str(tmp_path / "usr/bin/mpt"), "--version"], capture_output=True, text=True, check=False
    )
    assert v.returncode == 0 and v.stdout.startswith("mpt "), v.stdout + v.stderr


def test_cargo_install_from_the_tree(tmp_path: Path) -> None:
    # Into a scratch root; the workspace's target directory keeps it quick.
    r = subprocess.run(
        ["cargo", "install", "--path", "crates/mpt", "--root", str(tmp_path), "--locked"]
        + ["--offline", "--target-dir", str(ROOT / "target"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    v = subprocess.run(
        [str(tmp_path / "bin" / "mpt"), "--version"], capture_output=True, text=True, check=False
    )
    assert v.returncode == 0 and v.stdout.startswith("mpt "), v.stdout + v.stderr
