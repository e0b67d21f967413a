"""Turns under faults, as a client meets them: killed servers, vanished clients, a failing database.

Real processes (the CLI over stdio), the engine's failCommand failpoint, the SDK's real client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from mongogate.engine import client as engine_client
from tests import fault_harness
from tests.helpers import INITIALIZE, ok

ROOT = Path(__file__).resolve().parents[2]
EXE = [sys.executable, "-m", "mongogate.cli"]

pytestmark = pytest.mark.anyio


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    return {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
    }


def stdio(env: dict[str, str], *, crash_at: str | None = None, **extra: str) -> StdioServerParameters:
    """`mongogate serve` over stdio, ``extra`` added to its environment; with ``crash_at`` it dies
    (exit 137) at that point (tests/fault_harness.py)."""
    exe, *args = fault_harness.command(crash=crash_at)
    return StdioServerParameters(command=exe, args=[*args, "serve"], env=env | extra, cwd=str(ROOT))


async def test_server_killed_after_taking_the_lease_the_retry_takes_over(env: dict[str, str]) -> None:
    """Issue 8.1: the process dies (exit 137) after the lease update, before any reply is sent.

    On the old code the retried begin_turn was `lease_busy` for the whole lease (120 s).
    """
    async with Client(stdio(env)) as c:
        sid = (await ok(c, "create_session"))["session_id"]
    with pytest.raises(Exception):  # noqa: B017 - the connection dies with the server
        async with Client(stdio(env, crash_at="begin_turn.after_lease")) as c:
            await c.call_tool("begin_turn", {"session_id": sid, "turn_id": "t1", "text": "hello?"})
    async with Client(stdio(env)) as c:  # a fresh server, at once: no waiting for expiry
        start = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="hello?")
        assert start["answered"] is False and start["lease_id"]
        assert [m["content"] for m in start["messages"]] == ["hello?"]
        await ok(c, "end_turn", session_id=sid, turn_id="t1", lease_id=start["lease_id"], reply="hi")
        replay = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="hello?")
        assert replay["answered"] is True and replay["answer"] == "hi"


async def test_server_killed_after_a_leased_append_took_its_seq_loses_no_answer(env: dict[str, str]) -> None:
    """Issue 38.3: a leased append's update drops the previous turn's parked answer (the lease
    proves its begin_turn stored it). Here that answer's end_turn died before its insert, and the
    process dies again right after the append's update: the answer is still there, in order."""
    async with Client(stdio(env)) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        first = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="q1")
    with pytest.raises(Exception):  # noqa: B017 - the connection dies with the server
        async with Client(stdio(env, crash_at="answer.after_commit")) as c:
            await c.call_tool(
                "end_turn", {"session_id": sid, "turn_id": "t1", "lease_id": first["lease_id"], "reply": "a1"}
            )
    tool = {"session_id": sid, "turn_id": "t2", "role": "tool", "content": "r", "call_id": "c1"}
    with pytest.raises(Exception):  # noqa: B017
        async with Client(stdio(env, crash_at="append.after_seq")) as c:
            start = await ok(c, "begin_turn", session_id=sid, turn_id="t2", text="q2")
            assert [m["content"] for m in start["messages"]] == ["q1", "a1", "q2"]
            tool["lease_id"] = start["lease_id"]
            await c.call_tool("append", tool)
    async with Client(stdio(env)) as c:  # the lease is still held: the append is retried under it
        assert (await ok(c, "append", **tool))["status"] == "inserted"
        await ok(c, "end_turn", session_id=sid, turn_id="t2", lease_id=tool["lease_id"], reply="a2")
        window = await ok(c, "load_context", session_id=sid)
    assert [m["content"] for m in window["messages"]] == ["q1", "a1", "q2", "r", "a2"]


@pytest.mark.embedded_engine  # its own engine process, to check the lock file afterwards
@pytest.mark.parametrize("attempt", range(3))
def test_stdio_client_that_vanishes_is_a_quiet_normal_exit(env: dict[str, str], attempt: int) -> None:
    """Issue 8.5: the client dies with a call in flight: exit 0, no traceback, lock file not stale."""
    # the embedded engine in its own data directory, so the lock file can be checked afterwards
    own = {k: v for k, v in env.items() if not k.startswith("MONGOGATE_DATABASE__")}
    proc = subprocess.Popen(
        [*EXE, "-v", "serve"],
        env=own | {"PATH": os.environ.get("PATH", "")},
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        for m in INITIALIZE:
            proc.stdin.write(json.dumps(m) + "\n")
            proc.stdin.flush()
            if "id" in m:
                json.loads(proc.stdout.readline())
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "create_session", "arguments": {}},
        }
        proc.stdin.write(json.dumps(call) + "\n")
        proc.stdin.flush()
        proc.stdout.close()  # the client is gone: its end of both pipes closes
        proc.stdin.close()
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:  # pragma: no cover - only when the server hangs
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    proc.stderr.close()
    assert code == 0, err
    assert "Traceback" not in err and "ExceptionGroup" not in err and "BrokenPipeError" not in err
    assert err.count("client went away") == 1
    data = Path(env["MONGOGATE_SERVER__DATA_DIR"])
    assert engine_client.stop(data)  # the shared engine outlives the server that started it
    lock = data / "engine.lock"
    assert not lock.exists() or lock.read_text() == ""  # no dead pid left behind
