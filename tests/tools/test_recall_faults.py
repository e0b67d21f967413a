"""`remember` under faults, as a client meets them: the server process dies (exit 137) after the
write and before the reply; the client retries the same call on a fresh server (real stdio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import ok
from tests.tools.test_turn_faults import stdio

pytestmark = pytest.mark.anyio


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    return {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
    }


async def killed_after_write(env: dict[str, str], args: dict[str, Any]) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the connection dies with the server
        async with Client(stdio(env, crash_at="remember.after_write")) as c:
            await c.call_tool("remember", args)


@pytest.mark.parametrize("key", [None, "parking"])
async def test_retry_after_a_kill_between_write_and_reply_leaves_one_memory(
    env: dict[str, str], key: str | None
) -> None:
    args: dict[str, Any] = {"text": "The car is parked on level 3, spot 41.", "namespace": "user/car"}
    if key:
        args["key"] = key
    await killed_after_write(env, args)
    async with Client(stdio(env)) as c:
        retry = await ok(c, "remember", **args)
        assert retry["status"] == "unchanged" and retry["version"] == 1  # the lost write had landed
        listed = await ok(c, "list_memories")
        assert [m["id"] for m in listed["memories"]] == [retry["id"]]
        found = await ok(c, "recall", query="where did I park?")
        assert [m["id"] for m in found["memories"]] == [retry["id"]]


async def test_retried_update_after_a_kill_is_one_new_version(env: dict[str, str]) -> None:
    async with Client(stdio(env)) as c:
        first = await ok(c, "remember", text="Standup is at 9:30.", key="standup")
    await killed_after_write(env, {"text": "Standup moved to 10:00.", "key": "standup"})
    async with Client(stdio(env)) as c:
        retry = await ok(c, "remember", text="Standup moved to 10:00.", key="standup")
        assert (retry["id"], retry["status"], retry["version"]) == (first["id"], "unchanged", 2)
        h = await ok(c, "memory_history", id=first["id"])
        assert [(v["version"], v["text"]) for v in h["versions"]] == [
            (1, "Standup is at 9:30."),
            (2, "Standup moved to 10:00."),
        ]


async def test_serve_reads_no_test_switch_from_the_environment(env: dict[str, str]) -> None:
    """Test hooks are arguments (tests/fault_harness.py): the old `mongogate serve` read
    MONGOGATE_TEST_CRASH_AT from its environment and died (exit 137) after the write."""
    args = {"text": "The car is parked on level 3, spot 41."}
    async with Client(stdio(env, MONGOGATE_TEST_CRASH_AT="remember.after_write")) as c:
        first = await ok(c, "remember", **args)
        assert first["status"] == "created"
