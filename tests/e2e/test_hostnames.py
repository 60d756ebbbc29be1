"""A path's `remote` given as a hostname: the client resolves it when it
starts (here through the namespace's own /etc/hosts, which `ip netns exec`
puts in place), one address per path of the path's IP version, and the
tunnel comes up on both paths. A name that does not resolve is an error
naming the path, from `mpt check` and `mpt up` alike (exit 2).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from mptlab.daemon import TUNNEL_V4, PathOpts, TunnelOpts, start_pair
from mptlab.netns import Topology, link_addr
from mptlab.util import mpt_binary, run

NAME = "server-a.mpt.test"


def test_remote_hostnames_resolve_per_family_and_the_tunnel_comes_up(workdir: Path) -> None:
    with Topology(2) as topo:
        hosts_dir = Path("/etc/netns") / topo.b
        hosts_dir.mkdir(parents=True, exist_ok=True)
        try:
            (hosts_dir / "hosts").write_text(
                f"127.0.0.1 localhost\n"
                f"{link_addr(1, 'a', 4)} {NAME}\n"
                f"{link_addr(2, 'a', 6)} {NAME}\n"
            )

            def edit(side: str, text: str) -> str:
                if side != "b":
                    return text
                text = text.replace(
                    f'remote = "{link_addr(1, "a", 4)}:6000"', f'remote = "{NAME}:6000"'
                )
                return text.replace(
                    f'remote = "[{link_addr(2, "a", 6)}]:6001"', f'remote = "{NAME}:6001"'
                )

            opts = TunnelOpts(paths=[PathOpts(1, 4), PathOpts(2, 6)])
            a, b = start_pair(topo, opts, workdir, edit=edit)
            assert NAME in (workdir / "b.toml").read_text()
            remotes = {p["name"]: p["remote"] for p in b.status()["paths"]}
            assert remotes == {
                "link1v4": f"{link_addr(1, 'a', 4)}:6000",
                "link2v6": f"[{link_addr(2, 'a', 6)}]:6001",
            }, remotes
            run(["ping", "-c", "2", "-W", "2", TUNNEL_V4["a"]], ns=topo.b)
            log = (workdir / "b.log").read_text()
            assert f"resolved from {NAME}:6000" in log, log
            check = run(
                [str(mpt_binary()), "check", "-c", str(workdir / "b.toml")], ns=topo.b
            ).stdout
            assert f"({NAME}:6001)" in check, check
            a.stop()
            b.stop()
            # A name the resolver does not know: both commands say which path.
            bad = workdir / "bad.toml"
            bad.write_text((workdir / "b.toml").read_text().replace(NAME, "nowhere.mpt.test"))
            bad.chmod(0o600)
            for sub in ("check", "up"):
                p = subprocess.run(
                    ["ip", "netns", "exec", topo.b, str(mpt_binary()), sub, "-c", str(bad)],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                assert p.returncode == 2, (sub, p.returncode, p.stderr)
                assert (
                    "path 'link1v4': remote nowhere.mpt.test:6000 does not resolve" in p.stderr
                ), p.stderr
        finally:
            shutil.rmtree(hosts_dir, ignore_errors=True)


def test_a_path_that_stays_down_resolves_its_remote_again(workdir: Path) -> None:
    # The name first points where no peer is: that path stays down while
    # the other comes up. Once the name points at the server, the path's
    # remote follows within a few checks and the path comes up.
    with Topology(2) as topo:
        hosts_dir = Path("/etc/netns") / topo.b
        hosts_dir.mkdir(parents=True, exist_ok=True)
        hosts = hosts_dir / "hosts"
        try:
            hosts.write_text(f"127.0.0.1 localhost\n10.77.1.9 {NAME}\n")

            def edit(side: str, text: str) -> str:
                if side != "b":
                    return text
                old = f'remote = "{link_addr(1, "a", 4)}:6000"'
                return text.replace(old, f'remote = "{NAME}:6000"')

            opts = TunnelOpts(paths=[PathOpts(1), PathOpts(2)])
            _a, b = start_pair(topo, opts, workdir, edit=edit, wait=False)
            b.wait_ready(1, timeout=15)
            st = {p["name"]: p for p in b.status()["paths"]}
            assert st["link1v4"]["state"] != "up" and st["link1v4"]["remote"] == "10.77.1.9:6000"
            # Rewritten in place: the namespace's bind mount shows it.
            with open(hosts, "r+") as f:
                f.seek(0)
                f.truncate()
                f.write(f"127.0.0.1 localhost\n{link_addr(1, 'a', 4)} {NAME}\n")
            b.wait_ready(2, timeout=30)
            st = {p["name"]: p for p in b.status()["paths"]}
            assert st["link1v4"]["remote"] == f"{link_addr(1, 'a', 4)}:6000", st["link1v4"]
            log = b.log_text()
            assert "resolved to a new address" in log and "10.77.1.9:6000" in log, log
            # An operator may set a remote too; a value that is no address
            # is a usage error, a wrong IP version the daemon's refusal.
            mpt = ["ip", "netns", "exec", topo.b, str(mpt_binary()), "path", "-s", str(b.control)]
            for value, code, words in (
                ("nowhere:1", 2, "remote must be an address:port"),
                ("[fd77:0:1::1]:6000", 1, "not of the IP version"),
            ):
                p = subprocess.run(
                    [*mpt, "link1v4", "set", "remote", value],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=False,
                )
                assert p.returncode == code and words in p.stderr, (value, p.returncode, p.stderr)
        finally:
            shutil.rmtree(hosts_dir, ignore_errors=True)
