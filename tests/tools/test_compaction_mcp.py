"""compact_context and summary + window through MCP: the SDK's real client, in-process and over HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pymongo import AsyncMongoClient

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio

Mongo = AsyncMongoClient[dict[str, object]]


async def seed_turns(
    mongo: Mongo, db_name: str, sid: str, turns: int, size: int = 100, tenant: str = "acme"
) -> None:
    """`turns` finished turns (a user message and its answer, `size` bytes each), written in one
    insert_many: what `turns` rounds of begin_turn and end_turn would leave, without their cost."""
    db = mongo[db_name]
    now = datetime.now(UTC)
    docs: list[dict[str, object]] = []
    for i in range(1, turns + 1):
        for role, seq in (("user", 2 * i - 1), ("assistant", 2 * i)):
            docs.append(
                {
                    "session_id": sid,
                    "tenant": tenant,
                    "key": f"t{i}:{role}",
                    "seq": seq,
                    "turn_id": f"t{i}",
                    "role": role,
                    "call_id": None,
                    "content": f"{role} {i} ".ljust(size, "x"),
                    "created_at": now,
                }
            )
    await db["messages"].insert_many(docs)
    await db["sessions"].update_one({"_id": sid}, {"$set": {"next_seq": 2 * turns}})


async def session_with(c: Client, mongo: Mongo, db_name: str, turns: int, size: int = 100) -> str:
    sid = str((await ok(c, "create_session", title="long"))["session_id"])
    await seed_turns(mongo, db_name, sid, turns, size)
    return sid


def size_of(result: dict[str, Any]) -> int:
    return len(json.dumps(result, separators=(",", ":")).encode())


async def retried_conflicting_superseded(c: Client, sid: str, mongo: Mongo, db_name: str) -> None:
    first = await ok(c, "compact_context", session_id=sid, through_seq=10, summary="turns 1-5")
    assert first == {"status": "inserted", "key": "summary:10", "through_seq": 10}
    again = await ok(c, "compact_context", session_id=sid, through_seq=10, summary="turns 1-5")
    assert again["status"] == "duplicate"
    clash = await failure(c, "compact_context", session_id=sid, through_seq=10, summary="other text")
    assert clash.startswith("[conflict]")
    ctx = await ok(c, "load_context", session_id=sid)
    assert ctx["summary"]["text"] == "turns 1-5" and ctx["summary"]["through_seq"] == 10
    assert ctx["summary"]["created_at"]
    assert [m["seq"] for m in ctx["messages"]][:1] == [11] and ctx["truncated"] is False
    newer = await ok(c, "compact_context", session_id=sid, through_seq=16, summary="turns 1-8")
    assert newer["status"] == "inserted"
    older = await ok(c, "compact_context", session_id=sid, through_seq=4, summary="turns 1-2")
    assert older["status"] == "inserted"  # stored, but the newest through_seq still wins
    ctx = await ok(c, "load_context", session_id=sid)
    assert ctx["summary"]["through_seq"] == 16 and ctx["messages"][0]["seq"] == 17
    raw = await ok(c, "load_context", session_id=sid, include_summarized=True)
    assert raw["messages"][0]["seq"] == 1 and raw["summary"]["through_seq"] == 16
    kept = await mongo[db_name]["summaries"].count_documents({"session_id": sid})
    assert kept == 3  # nothing deleted


async def test_compaction_retried_conflicting_superseded(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = await session_with(c, mongo, db_name, 10)
        await retried_conflicting_superseded(c, sid, mongo, db_name)


async def test_compaction_over_real_http(engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as c,
        ):
            sid = await session_with(c, mongo, db_name, 10)
            await retried_conflicting_superseded(c, sid, mongo, db_name)
            start = await ok(c, "begin_turn", session_id=sid, turn_id="t11", text="next")
            assert start["summary"]["through_seq"] == 16
            assert start["messages"][0]["seq"] == 17


async def test_through_seq_must_end_a_turn_and_exist(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = await session_with(c, mongo, db_name, 3)
        mid_turn = await failure(c, "compact_context", session_id=sid, through_seq=3, summary="s")
        assert mid_turn.startswith("[invalid_input]") and "turn boundary" in mid_turn
        beyond = await failure(c, "compact_context", session_id=sid, through_seq=8, summary="s")
        assert beyond.startswith("[invalid_input]") and "beyond the newest" in beyond
        empty = await failure(c, "compact_context", session_id=sid, through_seq=2, summary=" ")
        assert empty.startswith("[invalid_input]")
        big = "x" * (256 * 1024 + 1)
        too_big = await failure(c, "compact_context", session_id=sid, through_seq=2, summary=big)
        assert too_big.startswith("[invalid_input]") and "max_message_bytes" in too_big
        # an unanswered turn followed by another turn's user message is a boundary too
        start = await ok(c, "begin_turn", session_id=sid, turn_id="t4", text="hi")
        assert start["messages"][-1]["seq"] == 7
        inside = await ok(
            c, "compact_context", session_id=sid, through_seq=6, summary="s", lease_id=start["lease_id"]
        )
        assert inside["status"] == "inserted"


async def test_a_lost_lease_lands_no_summary(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c:
        sid = await session_with(c, mongo, db_name, 5)
        a = await ok(c, "begin_turn", session_id=sid, turn_id="t6", text="go")
        busy = await failure(c, "compact_context", session_id=sid, through_seq=10, summary="s")
        assert busy.startswith("[lease_busy] (retryable)")  # a live turn: only its lease may compact
        b = await ok(c, "begin_turn", session_id=sid, turn_id="t6", text="go")  # a retry takes over
        assert a["lease_id"] != b["lease_id"]
        stale = await failure(
            c, "compact_context", session_id=sid, through_seq=10, summary="stale", lease_id=a["lease_id"]
        )
        assert stale.startswith("[lease_lost]")
        assert (await ok(c, "load_context", session_id=sid))["summary"] is None  # never landed
        mine = await ok(
            c, "compact_context", session_id=sid, through_seq=10, summary="fresh", lease_id=b["lease_id"]
        )
        assert mine["status"] == "inserted"
        await ok(c, "end_turn", session_id=sid, turn_id="t6", lease_id=b["lease_id"], reply="done")
        # the lease is released now; a retry of the same compaction whose reply was lost is a duplicate
        retry = await ok(
            c, "compact_context", session_id=sid, through_seq=10, summary="fresh", lease_id=b["lease_id"]
        )
        assert retry["status"] == "duplicate"
        other = await failure(
            c, "compact_context", session_id=sid, through_seq=12, summary="x", lease_id=b["lease_id"]
        )
        assert other.startswith("[lease_lost]")


async def test_another_tenant_cannot_compact_or_read(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    other = make_settings(engine_uri, db_name, tmp_path, auth={"mode": "none", "tenant": "other"})
    async with (
        Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as c,
        Client(build_server(other)) as o,
    ):
        sid = await session_with(c, mongo, db_name, 3)
        await ok(c, "compact_context", session_id=sid, through_seq=4, summary="acme's")
        theirs = await failure(o, "compact_context", session_id=sid, through_seq=6, summary="intruder")
        assert theirs.startswith("[not_found]")
        assert (await failure(o, "load_context", session_id=sid)).startswith("[not_found]")
        ctx = await ok(c, "load_context", session_id=sid)
        assert ctx["summary"]["text"] == "acme's"
        assert await mongo[db_name]["summaries"].count_documents({"tenant": "other"}) == 0
        await ok(c, "delete_session", session_id=sid)
        assert await mongo[db_name]["summaries"].count_documents({"session_id": sid}) == 0


async def test_a_500_turn_session_answers_in_the_bytes_of_a_short_one(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    async with Client(build_server(settings)) as c:
        sid = await session_with(c, mongo, db_name, 500)
        raw = await ok(c, "load_context", session_id=sid)
        assert raw["summary"] is None and len(raw["messages"]) == 40 and raw["truncated"] is True
        assert raw["messages"][0]["role"] == "user" and raw["messages"][-1]["seq"] == 1000
        assert raw["compaction_advised"] is True  # unsummarised turns fell out of the window
        assert raw["unsummarized_bytes"] == 40 * 100
        await ok(c, "compact_context", session_id=sid, through_seq=1000, summary="the story so far " * 50)
        start = await ok(c, "begin_turn", session_id=sid, turn_id="t501", text="and now?")
        assert set(start) >= {"summary", "messages", "truncated", "unsummarized_bytes", "compaction_advised"}
        assert start["summary"]["through_seq"] == 1000
        assert [m["seq"] for m in start["messages"]] == [1001] and start["truncated"] is False
        assert start["unsummarized_bytes"] == len("and now?") and start["compaction_advised"] is False
        await ok(c, "end_turn", session_id=sid, turn_id="t501", lease_id=start["lease_id"], reply="this")
        ctx = await ok(c, "load_context", session_id=sid)
        assert [m["content"] for m in ctx["messages"]] == ["and now?", "this"]
        # the same summary over a 3-turn session answers in the same bytes
        short = await session_with(c, mongo, db_name, 500 - 497)
        await ok(c, "compact_context", session_id=short, through_seq=6, summary="the story so far " * 50)
        s = await ok(c, "begin_turn", session_id=short, turn_id="t4", text="and now?")
        assert abs(size_of(s) - size_of(start)) < 200
        raw = await ok(c, "load_context", session_id=sid, include_summarized=True)
        assert len(raw["messages"]) == 40 and raw["truncated"] is True


async def test_summary_and_window_stay_within_the_response_cap(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    cap = settings.limits.max_response_bytes
    async with Client(build_server(settings)) as c:
        sid = await session_with(c, mongo, db_name, 60, size=200 * 1024)
        await ok(c, "compact_context", session_id=sid, through_seq=20, summary="s" * (200 * 1024))
        ctx = await ok(c, "load_context", session_id=sid, limit=40)
        assert ctx["summary"]["through_seq"] == 20 and ctx["size_capped"] is True
        assert size_of(ctx) <= cap and ctx["messages"][-1]["seq"] == 120
        assert all(m["seq"] > 20 for m in ctx["messages"])
        start = await ok(c, "begin_turn", session_id=sid, turn_id="t61", text="more")
        assert size_of(start) <= cap and start["summary"]["through_seq"] == 20


async def test_compaction_advised_at_the_threshold(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, memory={"compact_after_bytes": 100})
    async with Client(build_server(settings)) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        t1 = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="q" * 40)
        assert t1["summary"] is None and t1["truncated"] is False
        assert t1["unsummarized_bytes"] == 40 and t1["compaction_advised"] is False
        await ok(c, "end_turn", session_id=sid, turn_id="t1", lease_id=t1["lease_id"], reply="a" * 60)
        at = await ok(c, "load_context", session_id=sid)
        assert at["unsummarized_bytes"] == 100 and at["compaction_advised"] is False  # at, not over
        t2 = await ok(c, "begin_turn", session_id=sid, turn_id="t2", text="é")  # two bytes in UTF-8
        assert t2["unsummarized_bytes"] == 102 and t2["compaction_advised"] is True
        await ok(
            c, "compact_context", session_id=sid, through_seq=2, summary="q and a", lease_id=t2["lease_id"]
        )
        after = await ok(c, "load_context", session_id=sid)
        assert after["unsummarized_bytes"] == 2 and after["compaction_advised"] is False
