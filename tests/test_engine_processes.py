"""Issue 9.1: many mongogate processes on one data directory, over one shared engine process.

While `serve --http` runs on the embedded engine: `check`, `worker --duration`, `worker --status`
and a second `serve --http` all succeed on the same data directory, and the first server's
exit does not stop the others' access. Real processes, real sockets.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters

from mongogate.engine import client as engine_client
from tests.helpers import EXE, ROOT, http_server, ok

pytestmark = pytest.mark.timeout(300)  # four interpreters start on one busy core

AGENTS = """
from mongogate.scheduler import AgentRegistry
agents = AgentRegistry()
@agents.agent('pinger', every=3600)
async def pinger(ctx):
    await ctx.db['pings'].insert_one({'at': ctx.scheduled_at})
"""


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )


def test_serve_check_worker_status_and_a_second_serve_share_one_data_dir(tmp_path: Path, data: Path) -> None:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[database]\nname = "shared"\n[server]\ndata_dir = "{data}"\n'
        "[scheduler]\njitter_max_s = 0\nspread = false\ntick_timeout_s = 30\nidle_sleep_s = 0.2\n"
    )
    (tmp_path / "fleet.py").write_text(AGENTS)
    env = {**os.environ, "MONGOGATE_CONFIG": str(cfg), "MONGOGATE_AUTH__TENANT": "acme"}
    env.pop("MONGOGATE_DATABASE__URI", None)

    first = contextlib.ExitStack()
    url_a = first.enter_context(http_server(env, "--demo"))
    try:
        state = engine_client.status(data)
        assert state is not None  # started on demand by the first server, in its own process

        checked = run(env, "check")
        assert checked.returncode == 0, checked.stderr
        assert f"engine: pid {state.pid} on {state.address}" in checked.stdout
        assert "credentials required" in checked.stdout and "in use" not in checked.stderr

        worked = run(
            env,
            "worker",
            "--agents",
            f"{tmp_path / 'fleet.py'}:agents",
            "--no-entry-points",
            "--duration",
            "3",
        )
        assert worked.returncode == 0, worked.stderr
        status = run(env, "worker", "--status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.splitlines()[1].split()[:2] == ["pinger", "waiting"]

        with http_server(env, "--demo") as url_b:

            async def across() -> str:
                async with Client(url_a) as a, Client(url_b) as b:
                    sid = str((await ok(a, "create_session"))["session_id"])
                    await ok(b, "append", session_id=sid, turn_id="t1", role="user", content="hi from b")
                    ctx = await ok(a, "load_context", session_id=sid)
                    assert [m["content"] for m in ctx["messages"]] == ["hi from b"]
                return sid

            sid = anyio.run(across)
            first.close()  # the first server exits: the engine and the second server carry on

            async def after() -> None:
                async with Client(url_b) as b:
                    await ok(b, "append", session_id=sid, turn_id="t2", role="user", content="after a")
                    ctx = await ok(b, "load_context", session_id=sid)
                    assert [m["content"] for m in ctx["messages"]] == ["hi from b", "after a"]
                    rows = await ok(b, "find_orders", filter={"status": "paid"}, limit=5)
                    assert rows["documents"]
                # and a stdio server beside them, as a desktop client launches it
                stdio = StdioServerParameters(
                    command=EXE[0],
                    args=[*EXE[1:], "serve"],
                    env={"MONGOGATE_CONFIG": str(cfg), "MONGOGATE_AUTH__TENANT": "acme"},
                    cwd=str(ROOT),
                )
                async with Client(stdio) as c:
                    ctx = await ok(c, "load_context", session_id=sid)
                    assert len(ctx["messages"]) == 2

            anyio.run(after)
            assert run(env, "check").returncode == 0
            assert engine_client.status(data) == state  # the same engine process all along

            base = url_b.removesuffix("/mcp")
            with httpx2.Client(timeout=60) as hc:
                assert hc.get(f"{base}/readyz").json() == {"status": "ready"}
                stopped = run(env, "engine", "stop")
                assert stopped.returncode == 0 and f"pid {state.pid}" in stopped.stdout
                r = hc.get(f"{base}/readyz")  # a stopped engine is not restarted behind your back
                assert (r.status_code, r.json()) == (503, {"status": "unavailable"})
                assert hc.get(f"{base}/healthz").json() == {"status": "ok"}
    finally:
        first.close()
