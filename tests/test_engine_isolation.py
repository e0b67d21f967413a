"""The engine is reachable only by the owner of its data directory, and survives restarts.

Issue 19: another local user sent one 47 MB message to the engine's loopback port before any
login (mongoeco checksums it in pure Python on its only loop) and every tenant stalled; and
after `mongogate engine stop` and a restart, running servers never found the engine again.

The attack runs as `nobody` (setpriv), so it needs root (skipped otherwise). Waits poll a file
or a lock with a generous cap; no assertion rests on a wall-clock margin.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from pymongo import MongoClient

from mongogate.config import DatabaseSettings, load_settings
from mongogate.db import Database
from mongogate.engine import client as engine_client
from mongogate.server.app import build_server

NOBODY = 65534
CAP_S = 60

#: what an unauthenticated local process can do with the engine's address: connect, then send a
#: header that announces a 47 MB message and the first MiB of its body (the issue's attack)
_ATTACK = r"""
import json, socket, struct, sys
address = sys.argv[1]
out = {}
for name in ("engine.json", "engine.credentials"):
    try:
        open(sys.argv[2] + "/" + name).read(1)
        out[name] = "read"
    except OSError as e:
        out[name] = type(e).__name__
try:
    if address.startswith("/"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(address)
    else:
        host, _, port = address.rpartition(":")
        s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(struct.pack("<iiii", 47_000_000, 1, 0, 2013) + b"\0" * (1 << 20))
    out["connect"] = "connected"
    s.close()
except OSError as e:
    out["connect"] = type(e).__name__
print(json.dumps(out))
"""


#: the attacker's interpreter: one `nobody` can run (this venv's may live under /root); stdlib only
ATTACKER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def _as_nobody(*args: str) -> dict[str, str]:
    cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", ATTACKER_PYTHON, "-I", "-c"]
    done = subprocess.run([*cmd, _ATTACK, *args], capture_output=True, text=True, timeout=CAP_S, check=True)
    result: dict[str, str] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_another_local_user_cannot_reach_the_engine_and_tenants_are_unaffected(data: Path) -> None:
    lease = engine_client.lease(data, 300)
    lease.release()
    tenant: MongoClient[dict[str, object]] = MongoClient(lease.uri, serverSelectionTimeoutMS=5000)
    try:
        tenant.e.orders.insert_one({"userId": "acme", "n": 1})
        attack = _as_nobody(lease.state.address, str(data))
        # the kernel refuses the connection: not one byte of the 47 MB message reached mongoeco
        assert attack["connect"] == "PermissionError", attack
        assert attack["engine.json"] == attack["engine.credentials"] == "PermissionError", attack
        assert tenant.e.orders.count_documents({"userId": "acme"}) == 1
        state = engine_client.status(data)
        assert state is not None and state.pid == lease.state.pid  # the engine never noticed
    finally:
        tenant.close()


def _restart_elsewhere(data: Path) -> None:
    """Another process starts the engine (as `mongogate engine start` would), and returns once it serves."""
    run = [sys.executable, "-m", "mongogate.engine", "run", "--detach", "--data-dir", str(data)]
    subprocess.run(run, capture_output=True, text=True, timeout=CAP_S, check=True)


@pytest.mark.anyio
async def test_a_running_process_finds_the_engine_again_after_stop_and_a_restart_by_another(
    data: Path,
) -> None:
    """`mongogate engine stop`, then any process starts the engine: the very first call of the
    running process succeeds, within its own server-selection budget (timeout_ms = 5000), with
    no restart of that process and no retry loop in the test."""
    db = Database(DatabaseSettings(name="back", timeout_ms=5000), data)
    await db.open()
    try:
        await db.memory["notes"].insert_one({"_id": 1})
        first = db.engine_state
        assert first is not None
        assert engine_client.stop(data)  # what `mongogate engine stop` does
        assert engine_client.status(data) is None
        _restart_elsewhere(data)
        again = engine_client.status(data)
        assert again is not None and again.pid != first.pid
        assert await db.memory["notes"].count_documents({}) == 1
        assert await db.query["notes"].count_documents({}) == 1
    finally:
        await db.close()


@pytest.mark.anyio
async def test_a_running_server_answers_again_once_the_engine_is_back(data: Path) -> None:
    """The same through a whole MCP server (its lifespan holds the Database): after `engine stop`
    and a restart by another process, its next tool call succeeds; the server is not restarted."""
    settings = load_settings(
        None,
        database={"name": "srv", "timeout_ms": 5000},
        server={"data_dir": str(data)},
        auth={"mode": "none", "tenant": "acme"},
    )
    async with Client(build_server(settings)) as c:
        made = await c.call_tool("create_session", {})
        assert not made.is_error, made.content
        assert engine_client.stop(data)
        _restart_elsewhere(data)
        listed = await c.call_tool("list_sessions", {})
        assert not listed.is_error, listed.content
        assert [s["session_id"] for s in (listed.structured_content or {})["sessions"]] == [
            (made.structured_content or {})["session_id"]
        ]
