"""The long-term memory tools over real stdio: the subject of a stdio server comes from its launch
configuration (`auth.subject`), and a raw client's NaN reaches the tool and is `[invalid_input]`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from tests.helpers import INITIALIZE, failure, ok, send, stdio_serve
from tests.tools.test_turn_faults import stdio


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    return {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
    }


@pytest.mark.anyio
async def test_stdio_subject_scope_comes_from_the_launch_configuration(env: dict[str, str]) -> None:
    subject = env | {"MONGOGATE_MEMORY__LONG_TERM__SCOPE": "subject"}
    async with Client(stdio(subject, MONGOGATE_AUTH__SUBJECT="alice")) as alice:
        mine = await ok(alice, "remember", text="Alice parks in bay 12.", key="parking")
    async with Client(stdio(subject, MONGOGATE_AUTH__SUBJECT="bob")) as bob:
        assert (await ok(bob, "recall", query="bay 12"))["memories"] == []
        assert (await failure(bob, "memory_history", id=mine["id"])).startswith("[not_found]")
        assert (await ok(bob, "forget", namespace="default", key="parking")) == {"deleted": False}
    async with Client(stdio(env)) as tenant_wide:  # scope "tenant": the subjects' memories are not its
        assert (await ok(tenant_wide, "list_memories"))["memories"] == []
    async with Client(stdio(subject, MONGOGATE_AUTH__SUBJECT="alice")) as alice:
        assert [m["id"] for m in (await ok(alice, "recall", query="where does Alice park?"))["memories"]] == [
            mine["id"]
        ]


def test_nan_from_a_raw_client_is_invalid_input_naming_the_path(env: dict[str, str]) -> None:
    proc = stdio_serve(env | {"PATH": os.environ.get("PATH", "")}, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for m in INITIALIZE:
            send(proc, m)
            if "id" in m:
                json.loads(proc.stdout.readline())
        raw = '{"text": "x", "metadata": {"deep": {"s": NaN}, "t": Infinity}}'  # not JSON, but sent
        call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remember","arguments":%s}}'
        proc.stdin.write(call % raw + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        listed = (
            '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_memories","arguments":{}}}'
        )
        proc.stdin.write(listed + "\n")
        proc.stdin.flush()
        after = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    result = reply["result"]
    assert result["isError"] is True
    # refused by the argument bounds (tools/bounds.py), which name the first non-finite number they meet
    text = result["content"][0]["text"]
    assert text.startswith("[invalid_input] argument metadata.") and "is not a finite number" in text, text
    assert "metadata.t" in text or "metadata.deep.s" in text, text
    assert after["result"]["structuredContent"]["memories"] == []  # nothing written
