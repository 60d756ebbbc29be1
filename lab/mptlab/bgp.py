"""Several concentrators behind BGP, for real: a core router and BIRD 2.

Beside a two-server `Star`, this adds

    core router R (AS 65000)  198.51.100.254/24 on a bridge to both
                              concentrators' uplinks (.1: s, .2: s1),
                              203.0.113.1/24 to host H (203.0.113.10)
    LAN host L 192.168.77.10/24 behind client 0 (192.168.77.1)

and runs BIRD in R, s and s1 with the configurations of `docs/deploy.md`
(read from that page, so that what the guide shows is what runs): each
concentrator announces the prefixes mpt keeps in `announce_table` 201, and
R installs what it learns in its kernel table.

Invariants: the added namespaces are the star's (`extra_ns`) and are torn
down with it; each BIRD has its own directory (configuration, control
socket, log) and is stopped by PID with the star's processes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .netns import _veth
from .star import Star
from .util import repo_root, run

UPLINK = "198.51.100"
CORE = f"{UPLINK}.254"
HOST_NET = "203.0.113.0/24"
HOST = "203.0.113.10"
LAN_NET = "192.168.77.0/24"
LAN_HOST = "192.168.77.10"
ANNOUNCE_TABLE = 201


def bird_binary() -> str | None:
    return shutil.which("bird") or ("/usr/sbin/bird" if Path("/usr/sbin/bird").exists() else None)


def guide_configs(doc: Path | None = None) -> dict[str, str]:
    """The BIRD files of docs/deploy.md: concentrator 1's, concentrator 2's
    (the first with the two changes the guide names) and the core's."""
    text = (doc or repo_root() / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```\n(# bird\.conf on [^\n]*\n.*?)```", text, re.S)
    by = {b.splitlines()[0]: b for b in blocks}
    c1 = next(b for h, b in by.items() if h.startswith("# bird.conf on concentrator 1"))
    core = next(b for h, b in by.items() if h.startswith("# bird.conf on the core router"))
    c2 = c1.replace(f"router id {UPLINK}.1;", f"router id {UPLINK}.2;").replace(
        "local as 65001;", "local as 65002;"
    )
    if c2.count(f"{UPLINK}.2;") < 1 or "65002" not in c2:
        raise ValueError("docs/deploy.md: concentrator 1's BIRD file changed shape")
    return {"s": c1, "s1": c2, "core": core}


class Bgp:
    """See the module documentation."""

    def __init__(self, star: Star, workdir: Path):
        if len(star.servers) != 2:
            raise ValueError("BGP needs a star with two servers")
        self.star = star
        self.dir = workdir / "bgp"
        self.dir.mkdir(parents=True, exist_ok=True)
        uid = star.s[:-1]
        self.core, self.host, self.lan = f"{uid}R", f"{uid}H", f"{uid}L"
        star.extra_ns += [self.core, self.host, self.lan]
        self.birds: dict[str, subprocess.Popen[Any]] = {}
        self._build()

    def ns(self, side: str) -> str:
        return {"core": self.core, "host": self.host, "lan": self.lan}.get(side) or self.star.ns(
            side
        )

    def _build(self) -> None:
        st = self.star
        for ns in (self.core, self.host, self.lan):
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "set", "lo", "up"], ns=ns)
        fwd = ["sysctl", "-qw", "net.ipv4.ip_forward=1"]
        run(["ip", "link", "add", "bgpbr", "type", "bridge"], ns=self.core)
        run(["ip", "link", "set", "bgpbr", "up"], ns=self.core)
        run(["ip", "addr", "add", f"{CORE}/24", "dev", "bgpbr"], ns=self.core)
        run(fwd, ns=self.core)
        for k, side in enumerate(("s", "s1")):
            ns = st.ns(side)
            _veth("wan", ns, f"c{k}", self.core)
            run(["ip", "link", "set", f"c{k}", "master", "bgpbr", "up"], ns=self.core)
            run(["ip", "addr", "add", f"{UPLINK}.{k + 1}/24", "dev", "wan"], ns=ns)
            run(["ip", "link", "set", "wan", "up"], ns=ns)
            run(fwd, ns=ns)
            # The concentrator reaches the host's network through the core.
            run(["ip", "route", "add", HOST_NET, "via", CORE], ns=ns)
        _veth("tohost", self.core, "eth0", self.host)
        run(["ip", "addr", "add", "203.0.113.1/24", "dev", "tohost"], ns=self.core)
        run(["ip", "link", "set", "tohost", "up"], ns=self.core)
        run(["ip", "addr", "add", f"{HOST}/24", "dev", "eth0"], ns=self.host)
        run(["ip", "link", "set", "eth0", "up"], ns=self.host)
        run(["ip", "route", "add", "default", "via", "203.0.113.1"], ns=self.host)
        client = st.ns(0)
        _veth("lan", client, "eth0", self.lan)
        run(["ip", "addr", "add", "192.168.77.1/24", "dev", "lan"], ns=client)
        run(["ip", "link", "set", "lan", "up"], ns=client)
        run(fwd, ns=client)
        run(["ip", "addr", "add", f"{LAN_HOST}/24", "dev", "eth0"], ns=self.lan)
        run(["ip", "link", "set", "eth0", "up"], ns=self.lan)
        run(["ip", "route", "add", "default", "via", "192.168.77.1"], ns=self.lan)

    def start_birds(self, configs: dict[str, str] | None = None) -> None:
        """BIRD in the core and both concentrators, in the foreground, each
        with its own directory."""
        bird = bird_binary()
        if bird is None:
            raise RuntimeError("BIRD 2 is not installed (apt-get install bird2)")
        for side, text in (configs or guide_configs()).items():
            d = self.dir / side
            d.mkdir(exist_ok=True)
            (d / "bird.conf").write_text(text)
            log = open(d / "bird.log", "w")  # noqa: SIM115 (the process holds it)
            args = [bird, "-f", "-c", str(d / "bird.conf"), "-s", str(d / "bird.ctl")]
            p = subprocess.Popen(
                ["ip", "netns", "exec", self.ns(side), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            self.star.procs.append(p)
            self.birds[side] = p

    def birdc(self, side: str, *cmd: str) -> str:
        birdc = shutil.which("birdc") or "/usr/sbin/birdc"
        sock = str(self.dir / side / "bird.ctl")
        return run([birdc, "-s", sock, *cmd], ns=self.ns(side), check=False).stdout

    def core_route(self, prefix: str = LAN_NET) -> str | None:
        """The core router's next hop for `prefix` in its kernel table."""
        out = run(["ip", "route", "show", prefix], ns=self.core, check=False).stdout
        m = re.search(r"via (\S+)", out)
        return m.group(1) if m else None

    def log(self, side: str) -> str:
        f = self.dir / side / "bird.log"
        return f.read_text() if f.exists() else ""
