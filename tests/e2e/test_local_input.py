"""End-to-end: local input that must get a clear error, never a hang, a
crash or a deleted file: FIFOs and directories as configuration or key
files, oversized files, a control socket path that holds a regular file,
a status socket that never ends its line, and idle control clients."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from mptlab.daemon import PathOpts, TunnelOpts, config_text, start_pair
from mptlab.netns import Topology
from mptlab.util import mpt_binary, run


def _mpt(*args: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(mpt_binary()), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_fifo_directory_and_oversized_files_are_refused(workdir: Path) -> None:
    fifo = workdir / "conf.fifo"
    os.mkfifo(fifo)
    for sub in ("check", "up"):
        started = time.monotonic()
        p = _mpt(sub, "-c", str(fifo))
        assert time.monotonic() - started < 5
        assert p.returncode == 2 and "is a FIFO (named pipe); expected a regular file" in p.stderr
    p = _mpt("check", "-c", str(workdir))
    assert p.returncode == 2 and "is a directory" in p.stderr
    big = workdir / "big.toml"
    big.write_bytes(b"#" * (2 << 20))
    p = _mpt("check", "-c", str(big))
    assert p.returncode == 2 and "more than the 1048576 bytes accepted" in p.stderr
    # A FIFO as the key file of an otherwise valid configuration.
    cfg = workdir / "k.toml"
    cfg.write_text(
        '[tunnel]\nname = "t"\naddresses = ["10.0.0.1/24"]\n[peer]\nrole = "client"\n'
        '[security]\nprivate_key_file = "key.fifo"\n'
        'peer_public_key = "EO8X1obaGbX9eSsqGMLO46y5zVLvzcwVPLInwRcgCAM="\n'
        '[[path]]\nlocal = "10.1.0.1:1"\nremote = "10.1.0.2:1"\n'
    )
    os.mkfifo(workdir / "key.fifo")
    p = _mpt("check", "-c", str(cfg))
    assert p.returncode == 2 and "key.fifo is a FIFO" in p.stderr, p.stderr
    p = _mpt("pubkey", "-i", str(workdir / "key.fifo"))
    assert p.returncode != 0 and "is a FIFO" in p.stderr, p.stderr


def test_key_commands_explain_themselves(workdir: Path) -> None:
    # genkey -o into a missing directory, or onto an existing file.
    p = _mpt("genkey", "-o", str(workdir / "no" / "such" / "k.key"))
    missing = workdir / "no" / "such"
    assert p.returncode == 1 and f"the directory {missing} does not exist" in p.stderr
    key = workdir / "k.key"
    assert _mpt("genkey", "-o", str(key)).returncode == 0
    assert key.stat().st_mode & 0o777 == 0o600
    p = _mpt("genkey", "-o", str(key))
    assert p.returncode == 1 and "already exists" in p.stderr, p.stderr
    # genkey > FILE (mode 0644 with the usual umask) warns.
    shared = workdir / "shared.key"
    with shared.open("w") as f:
        os.chmod(shared, 0o644)
        p = subprocess.run(
            [str(mpt_binary()), "genkey"], stdout=f, stderr=subprocess.PIPE, text=True, check=False
        )
    assert p.returncode == 0 and "readable by others (mode 644)" in p.stderr, p.stderr
    assert "genkey -o FILE" in p.stderr
    # To a pipe: no warning.
    assert _mpt("genkey").stderr == ""
    # Every option has help text.
    for sub, opt in (("check", "--config"), ("genkey", "--out"), ("pubkey", "--input")):
        lines = _mpt(sub, "--help").stdout.splitlines()
        line = next(ln for ln in lines if opt in ln and ln.lstrip().startswith("-"))
        assert len(line.split(">", 1)[1].strip()) > 10, line


def test_control_socket_path_holding_a_file_is_kept(workdir: Path) -> None:
    with Topology(1) as topo:
        opts = TunnelOpts(paths=[PathOpts(1)], security="insecure")
        keep = workdir / "precious.txt"
        keep.write_text("do not delete\n")
        cfg = workdir / "a.toml"
        cfg.write_text(config_text(topo, "a", opts, keep))
        p = run([str(mpt_binary()), "up", "-c", str(cfg)], ns=topo.a, check=False, timeout=10)
        assert p.returncode == 1, p.stderr
        assert "exists and is a regular file" in p.stderr, p.stderr
        assert keep.read_text() == "do not delete\n"
        assert "mpt0" not in run(["ip", "link"], ns=topo.a).stdout


def test_endless_status_answer_is_bounded(workdir: Path) -> None:
    path = workdir / "fake.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.settimeout(10)
        chunk = b"x" * 65536
        try:
            while not stop.is_set():
                conn.sendall(chunk)
        except OSError:
            pass
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    p = _mpt("status", "-s", str(path), timeout=30)
    stop.set()
    srv.close()
    assert p.returncode == 1 and "longer than" in p.stderr, p.stderr


def test_idle_control_clients_do_not_block_status(workdir: Path) -> None:
    with Topology(1) as topo:
        a, _b = start_pair(topo, TunnelOpts(paths=[PathOpts(1)], security="insecure"), workdir)
        idle = []
        for _ in range(5):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(a.control))
            idle.append(s)
        started = time.monotonic()
        doc = a.status()
        took = time.monotonic() - started
        for s in idle:
            s.close()
        print(f"\nstatus with 5 idle control clients connected: {took * 1000:.0f} ms")
        assert doc["paths_up"] == 1
        assert took < 1.0
