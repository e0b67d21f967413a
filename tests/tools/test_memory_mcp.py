"""The memory behaviours through MCP: the SDK's real client, in-process and over Streamable HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.specs import MEMORY_TOOL_NAMES, RECALL_TOOL_NAMES, RUN_TOOL_NAMES
from tests.conftest import jwt_auth, make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio


async def whole_turn(c: Client) -> None:
    sid = (await ok(c, "create_session", title="demo"))["session_id"]
    start = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="what is 6*7?")
    assert start["answered"] is False and start["lease_id"]
    assert [m["content"] for m in start["messages"]] == ["what is 6*7?"]
    await ok(c, "append", session_id=sid, turn_id="t1", role="assistant", content="calc", call_id="c1")
    await ok(c, "append", session_id=sid, turn_id="t1", role="tool", content="42", call_id="c1")
    dup = await ok(c, "append", session_id=sid, turn_id="t1", role="tool", content="42", call_id="c1")
    assert dup["status"] == "duplicate" and dup["key"] == "t1:tool:c1"
    end = await ok(c, "end_turn", session_id=sid, turn_id="t1", lease_id=start["lease_id"], reply="42")
    assert end["status"] == "inserted"
    replay = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="what is 6*7?")
    assert replay["answered"] is True and replay["answer"] == "42" and replay["lease_id"] is None
    ctx = await ok(c, "load_context", session_id=sid, limit=3)
    # the last 3 messages would start at the call request: the window widens to the whole newest turn
    assert [m["role"] for m in ctx["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert ctx["truncated"] is False  # nothing older exists
    ctx = await ok(c, "load_context", session_id=sid)
    assert [m["role"] for m in ctx["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert ctx["truncated"] is False


async def test_whole_turn_in_process(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        await whole_turn(c)


async def test_tools_have_schemas_and_annotations(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == MEMORY_TOOL_NAMES | RUN_TOOL_NAMES | RECALL_TOOL_NAMES
    for t in tools.values():
        assert t.input_schema.get("additionalProperties") is False
        assert "tenant" not in json.dumps(t.input_schema)
        assert t.output_schema is not None
    assert tools["load_context"].annotations is not None
    assert tools["load_context"].annotations.read_only_hint is True
    assert tools["append"].annotations is not None and tools["append"].annotations.idempotent_hint is True
    assert (
        tools["begin_turn"].annotations is not None
        and tools["begin_turn"].annotations.read_only_hint is False
    )


async def test_bad_input_is_a_clear_tool_error(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"max_message_bytes": 1000})
    async with Client(build_server(settings)) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        assert "tenant" in await failure(
            c, "append", session_id=sid, turn_id="t", role="user", content="x", tenant="b"
        )
        assert "role" in await failure(c, "append", session_id=sid, turn_id="t", role="robot", content="x")
        assert "maximum is 1000" in await failure(
            c, "append", session_id=sid, turn_id="t", role="user", content="x" * 1001
        )
        assert "limit must be an integer from 1 to 200" in await failure(
            c, "load_context", session_id=sid, limit=0
        )
        assert "not found" in await failure(c, "load_context", session_id="missing")
        ctx = await ok(c, "load_context", session_id=sid)
        assert ctx["messages"] == []  # nothing was written by any refused call


async def test_tenant_isolation_through_every_memory_tool(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    a = build_server(make_settings(engine_uri, db_name, tmp_path / "a", auth={"tenant": "acme"}))
    b = build_server(make_settings(engine_uri, db_name, tmp_path / "b", auth={"tenant": "globex"}))
    async with Client(a) as ca, Client(b) as cb:
        sid = (await ok(ca, "create_session"))["session_id"]
        start = await ok(ca, "begin_turn", session_id=sid, turn_id="t1", text="acme secret")
        missing = (await failure(cb, "load_context", session_id="no-such-id")).replace("no-such-id", "X")
        attempts = [
            ("load_context", {"session_id": sid}),
            ("append", {"session_id": sid, "turn_id": "t9", "role": "user", "content": "intrusion"}),
            ("begin_turn", {"session_id": sid, "turn_id": "t9", "text": "intrusion"}),
            (
                "end_turn",
                {"session_id": sid, "turn_id": "t1", "lease_id": start["lease_id"], "reply": "hijack"},
            ),
        ]
        for tool, args in attempts:
            text = await failure(cb, tool, **args)
            assert "not found" in text, (tool, text)
            if tool == "load_context":
                assert text.replace(sid, "X") == missing  # exactly like a session that does not exist
        ctx = await ok(ca, "load_context", session_id=sid)
        assert [m["content"] for m in ctx["messages"]] == ["acme secret"]
        await ok(ca, "end_turn", session_id=sid, turn_id="t1", lease_id=start["lease_id"], reply="ok")


async def test_busy_session_is_retryable_error_with_expiry(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="a", lease_ms=60_000)
        text = await failure(c, "begin_turn", session_id=sid, turn_id="t2", text="b")
        assert "[lease_busy] (retryable)" in text and "ms from now" in text
        ctx = await ok(c, "load_context", session_id=sid)
        assert len(ctx["messages"]) == 1


async def test_two_turns_at_once_over_mcp(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = (await ok(c, "create_session"))["session_id"]

        first_done = anyio.Event()

        async def turn(t: str) -> None:
            r = await c.call_tool("begin_turn", {"session_id": sid, "turn_id": t, "text": f"q{t}"})
            if r.is_error:  # the other turn holds the lease: wait for its end_turn, then once more
                assert "[lease_busy]" in r.content[0].text  # type: ignore[union-attr]
                await first_done.wait()
                r = await c.call_tool("begin_turn", {"session_id": sid, "turn_id": t, "text": f"q{t}"})
                assert not r.is_error, r.content
            lease = r.structured_content["lease_id"]
            await ok(c, "end_turn", session_id=sid, turn_id=t, lease_id=lease, reply=f"a{t}")
            first_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, "1")
            tg.start_soon(turn, "2")
        ctx = await ok(c, "load_context", session_id=sid)
        assert sorted(m["content"] for m in ctx["messages"]) == ["a1", "a2", "q1", "q2"]


async def test_whole_turn_over_real_http(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as c,
        ):
            await whole_turn(c)
        async with httpx2.AsyncClient(timeout=60) as anon:
            r = await anon.post(http.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
