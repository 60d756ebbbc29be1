"""The daemon's wire version, read from its source
(crates/mpt-core/src/wire/mod.rs), so that the tools that craft packets
follow a wire change instead of testing only `bad_version`."""

from __future__ import annotations

from pathlib import Path

WIRE = Path(__file__).resolve().parents[3] / "crates" / "mpt-core" / "src" / "wire" / "mod.rs"
PREFIX = "pub const VERSION: u8 ="


def wire_version() -> int:
    for line in WIRE.read_text().splitlines():
        if line.startswith(PREFIX):
            return int(line[len(PREFIX) :].strip(" ;"))
    raise RuntimeError(f"no `{PREFIX}` in {WIRE}")
