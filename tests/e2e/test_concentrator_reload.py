"""A concentrator's reload keeps its word on security: a narrowed
`allowed_ips` applies at once, a new pre-shared key cuts off a client that
lacks it (and the server logs a failed handshake naming the peer, never a
session), and a change of the server's own key is said to need a restart
(exit 3), never "nothing changed". Idle clients' TUNs send no link chatter
that the server would count as an attack."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

from mptlab.star import SERVER_TUNNEL, Star, client_tunnel, start
from mptlab.traffic import ping
from mptlab.util import mpt_binary, run, wait_for


def _status(star: Star, workdir: Path) -> dict:
    out = run(
        [str(mpt_binary()), "status", "-s", str(workdir / "server.sock"), "--json"],
        ns=star.ns("s"),
        timeout=10,
    ).stdout
    return json.loads(out)


def _reload(star: Star, workdir: Path):
    return run(
        [str(mpt_binary()), "reload", "-s", str(workdir / "server.sock")],
        ns=star.ns("s"),
        check=False,
        timeout=20,
    )


def test_a_concentrator_reload_applies_security_changes(tmp_path: Path) -> None:
    with Star(2, links=1) as star:
        server, clients = start(star, tmp_path)
        wait_for(
            "both clients connected", lambda: _status(star, tmp_path)["peers_connected"] == 2, 15
        )
        for i in (0, 1):
            assert ping(star, i, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        # Idle for a while: no client TUN sends link-local chatter (router
        # solicitations come a few seconds after a link is up).
        time.sleep(4)
        doc = _status(star, tmp_path)
        assert all(p["source_not_allowed"] == 0 for p in doc["peers"]), doc["peers"]
        conf = tmp_path / "server.toml"
        log = tmp_path / "server.log"

        # 1. Client 0's allowed IPs narrowed to an address it does not use.
        own = f'allowed_ips = ["{client_tunnel(0)}/32"]\n'
        conf.write_text(conf.read_text().replace(own, 'allowed_ips = ["10.201.200.9/32"]\n'))
        r = _reload(star, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "peer changed: client0: allowed_ips" in r.stdout, r.stdout
        assert ping(star, 0, SERVER_TUNNEL, count=3, interval=0.1).received == 0  # type: ignore[arg-type]
        assert ping(star, "s", client_tunnel(0), count=2, interval=0.1).received == 0  # type: ignore[arg-type]
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        assert _status(star, tmp_path)["peers"][0]["source_not_allowed"] >= 3
        # Back again: it applies as fast.
        conf.write_text(conf.read_text().replace('allowed_ips = ["10.201.200.9/32"]\n', own))
        assert _reload(star, tmp_path).returncode == 0
        assert ping(star, 0, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]

        # 2. A pre-shared key for client 1, which the client does not have.
        psk = base64.b64encode(os.urandom(32)).decode()
        block = f'allowed_ips = ["{client_tunnel(1)}/32"]\n'
        conf.write_text(conf.read_text().replace(block, block + f'preshared_key = "{psk}"\n'))
        sessions_before = log.read_text().count("session established")
        r = _reload(star, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "peer changed: client1: preshared_key" in r.stdout, r.stdout
        # Its session ended at once; it tries again, and never gets one.
        assert ping(star, 1, SERVER_TUNNEL, count=3, interval=0.1).received == 0  # type: ignore[arg-type]
        wait_for(
            "a failed handshake logged for client1",
            lambda: "handshake failed: the peer holding this key" in log.read_text(),
            20,
        )
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.2).received == 0  # type: ignore[arg-type]
        text = log.read_text()
        assert text.count("session established") == sessions_before, text[-3000:]
        failed = [ln for ln in text.splitlines() if "handshake failed: the peer holding" in ln]
        assert all("client1" in ln for ln in failed), failed
        doc = _status(star, tmp_path)
        assert not doc["peers"][1]["connected"], doc["peers"][1]
        assert ping(star, 0, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]

        # 3. The server's own key: a restart is needed, and said (exit 3).
        key = tmp_path / "server.key"
        new_key = tmp_path / "server2.key"
        run([str(mpt_binary()), "genkey", "-o", str(new_key)])
        conf.write_text(conf.read_text().replace(str(key), str(new_key)))
        r = _reload(star, tmp_path)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "needs a restart (still running the old value): security" in r.stdout, r.stdout
        assert "nothing changed" not in r.stdout
        assert ping(star, 0, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        assert server.stop() == 0
        for c in clients:
            c.stop()


def test_a_peer_whose_key_changes_is_a_peer_replaced(tmp_path: Path) -> None:
    """The public key names a peer: a reload with another key for client 0
    removes the old peer (its session ends at once) and adds the new one,
    which the client, holding the old key, cannot be."""
    with Star(2, links=1) as star:
        server, clients = start(star, tmp_path)
        wait_for(
            "both clients connected", lambda: _status(star, tmp_path)["peers_connected"] == 2, 15
        )
        conf = tmp_path / "server.toml"
        text = conf.read_text()
        old = text.split('[[peer]]\nname = "client0"\npublic_key = "')[1].split('"')[0]
        other = tmp_path / "other.key"
        run([str(mpt_binary()), "genkey", "-o", str(other)])
        new = run([str(mpt_binary()), "pubkey", "-i", str(other)]).stdout.strip()
        conf.write_text(text.replace(old, new))
        r = _reload(star, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "peer removed: client0" in r.stdout and "peer added: client0" in r.stdout, r.stdout
        assert ping(star, 0, SERVER_TUNNEL, count=3, interval=0.2).received == 0  # type: ignore[arg-type]
        assert ping(star, 1, SERVER_TUNNEL, count=2, interval=0.1).received == 2  # type: ignore[arg-type]
        doc = _status(star, tmp_path)
        connected = {p["name"]: p["connected"] for p in doc["peers"]}
        assert connected == {"client0": False, "client1": True}, doc["peers"]
        assert server.stop() == 0
        for c in clients:
            c.stop()
