"""Issue 19.1: every response is bounded, not only query results.

The caps are set small (`limits.max_response_bytes` = 256 KiB, messages of at most 32 KiB, states
of at most 64 KiB) so that a few hundred kilobytes show what 89 MB showed in the issue: each
result stays within the cap as JSON, says what it left out, and paging gets the rest exactly once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.demo import FIND_ORDERS, ORDERS_INDEX
from mongogate.engine.embedded import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings
from tests.helpers import failure, ok

pytestmark = pytest.mark.anyio


def json_size(value: object) -> int:
    """What a client receives, measured here independently of the code under test."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


CAP = 256 * 1024
SMALL = {
    "memory": {"max_message_bytes": 32 * 1024, "max_state_bytes": 64 * 1024},
    "limits": {"max_response_bytes": CAP},
}


async def test_load_context_and_begin_turn_stay_within_the_byte_cap(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path, **SMALL))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        for i in range(7):  # 14 messages of 30 KB: about 420 KB
            start = await ok(c, "begin_turn", session_id=sid, turn_id=f"t{i}", text=f"{i}" + "q" * 30_000)
            assert json_size(start) <= CAP
            await ok(
                c, "end_turn", session_id=sid, turn_id=f"t{i}", lease_id=start["lease_id"], reply="a" * 30_000
            )
        ctx = await ok(c, "load_context", session_id=sid, limit=50)
        last = await ok(c, "begin_turn", session_id=sid, turn_id="t7", text="short")
    assert json_size(ctx) <= CAP and json_size(last) <= CAP
    assert ctx["size_capped"] is True and ctx["truncated"] is True
    seqs = [m["seq"] for m in ctx["messages"]]
    assert ctx["messages"][0]["role"] == "user" and ctx["messages"][-1]["turn_id"] == "t6"
    assert seqs == sorted(seqs) and 4 <= len(seqs) < 14  # the newest whole turns that fit
    assert last["size_capped"] is True and last["messages"][-1]["content"] == "short"


async def test_run_events_pages_within_the_cap_and_sees_every_event_once(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path, **SMALL))) as c:
        lease = (await ok(c, "acquire_run", run_id="r1"))["lease_id"]
        for v in range(1, 11):  # 10 checkpoints of 60 KB
            await ok(
                c,
                "save_checkpoint",
                run_id="r1",
                lease_id=lease,
                version=v,
                state={"blob": f"{v:02d}" * 30_000},
            )
        seen: list[int] = []
        after: int | None = None
        pages = 0
        while pages < 20:  # bounded
            args: dict[str, Any] = {"run_id": "r1", "limit": 500, "include_state": True}
            if after is not None:
                args["after_seq"] = after
            page = await ok(c, "run_events", **args)
            pages += 1
            assert json_size(page) <= CAP
            assert all(e["state"] == {"blob": f"{e['version']:02d}" * 30_000} for e in page["events"])
            seen += [e["seq"] for e in page["events"]]
            if not page["more"]:
                break
            assert page["truncated"] is True  # cut by bytes, not by limit
            after = page["events"][-1]["seq"]
    assert seen == list(range(1, 11)) and pages > 1


async def test_load_checkpoint_leaves_out_a_state_larger_than_the_cap(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A state saved under larger limits, read by a server whose cap is smaller."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path))) as big:
        lease = (await ok(big, "acquire_run", run_id="r1"))["lease_id"]
        await ok(
            big, "save_checkpoint", run_id="r1", lease_id=lease, version=1, state={"blob": "s" * 300_000}
        )
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path, **SMALL))) as small:
        cp = await ok(small, "load_checkpoint", run_id="r1")
    assert json_size(cp) <= CAP
    assert cp["state"] is None and cp["truncated"] is True and cp["version"] == 1
    assert cp["state_bytes"] == json_size({"blob": "s" * 300_000})


async def test_list_sessions_pages_within_the_cap(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path, **SMALL))) as c:
        made = {
            (await ok(c, "create_session", title=f"{i:02d}" + "\x01" * 1000))["session_id"] for i in range(60)
        }
        seen: list[str] = []
        cursor: str | None = None
        truncated = []
        for _ in range(10):  # bounded
            page = await ok(c, "list_sessions", limit=100, **({"cursor": cursor} if cursor else {}))
            assert json_size(page) <= CAP
            seen += [s["session_id"] for s in page["sessions"]]
            truncated.append(page["truncated"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
    assert sorted(seen) == sorted(made) and len(seen) == 60
    assert truncated[0] is True and truncated[-1] is False


async def test_sizes_are_checked_before_writing(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """A state within its BSON size but larger as JSON (each control character is 6 bytes) is refused,
    so what load_checkpoint returns always fits; an oversized message is refused as before."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path, **SMALL))) as c:
        lease = (await ok(c, "acquire_run", run_id="r1"))["lease_id"]
        state = await failure(
            c, "save_checkpoint", run_id="r1", lease_id=lease, version=1, state={"s": "\x01" * 20_000}
        )
        sid = (await ok(c, "create_session"))["session_id"]
        text = await failure(c, "begin_turn", session_id=sid, turn_id="t1", text="x" * (32 * 1024 + 1))
        cp = await ok(c, "load_checkpoint", run_id="r1")
        ctx = await ok(c, "load_context", session_id=sid)
    assert (
        state.startswith("[invalid_input] ") and "as JSON" in state and "memory.max_state_bytes" in state
    ), state
    assert text.startswith("[invalid_input] ") and "memory.max_message_bytes" in text, text
    assert cp["version"] == 0 and ctx["messages"] == []


# ------------------------------------------------------------------ the wire limit


WIRE_LIMIT = 2_000_000


@pytest.fixture
def small_wire_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real engine, advertising a 2 MB message limit instead of 48 MB (its `maxMessageSizeBytes`,
    which the driver enforces on every reply): a few megabytes then show what 48 MB showed."""
    from mongoeco.wire import proxy
    from mongoeco.wire.surface import WireSurface

    monkeypatch.setattr(
        proxy, "WireSurface", functools.partial(WireSurface, max_message_size_bytes=WIRE_LIMIT)
    )
    engine = EmbeddedEngine(tmp_path / "wire")
    uri = engine.start()
    try:
        yield uri
    finally:
        engine.stop()


async def test_load_context_over_the_wire_limit_is_read_in_bounded_replies(
    small_wire_engine: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(small_wire_engine, db_name, tmp_path, memory={"max_message_bytes": 512 * 1024})
    async with Client(build_server(settings)) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        for i in range(3):  # 6 messages of 500 KB: one 3 MB reply, over the 2 MB limit
            start = await ok(c, "begin_turn", session_id=sid, turn_id=f"t{i}", text="q" * 500_000)
            await ok(
                c,
                "end_turn",
                session_id=sid,
                turn_id=f"t{i}",
                lease_id=start["lease_id"],
                reply="a" * 500_000,
            )
        ctx = await ok(c, "load_context", session_id=sid, limit=50)
    assert len(ctx["messages"]) == 6 and ctx["truncated"] is False and ctx["size_capped"] is False


async def test_a_reply_over_the_wire_limit_is_a_final_error_naming_it(
    small_wire_engine: str, db_name: str, tmp_path: Path
) -> None:
    from pymongo import AsyncMongoClient

    async with AsyncMongoClient[dict[str, Any]](small_wire_engine) as m:
        await m[db_name]["orders"].create_index(ORDERS_INDEX)
        await m[db_name]["orders"].insert_many(
            [
                {"userId": "acme", "number": f"{i}" + "n" * 500_000, "status": "paid", "total": i}
                for i in range(6)
            ]
        )
    settings = make_settings(small_wire_engine, db_name, tmp_path)
    async with Client(build_server(settings, ToolRegistry([FIND_ORDERS]))) as c:
        texts = [await failure(c, "find_orders", filter={"status": "paid"}) for _ in range(2)]
    for text in texts:
        assert text.startswith("[storage_error] ") and "(retryable)" not in text, text
        assert f"{WIRE_LIMIT} bytes" in text and "maxMessageSizeBytes" in text, text


async def test_an_answered_begin_turn_counts_its_answer_within_the_cap(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """The replay of an answered turn returns the answer besides the window: both fit the cap,
    even for an answer whose JSON is 6 times its bytes (control characters)."""
    async with Client(build_server(make_settings(engine_uri, db_name, tmp_path, **SMALL))) as c:
        sid = (await ok(c, "create_session"))["session_id"]
        for i in range(4):
            start = await ok(c, "begin_turn", session_id=sid, turn_id=f"t{i}", text="q" * 30_000)
            reply = "\x01" * 30_000
            await ok(c, "end_turn", session_id=sid, turn_id=f"t{i}", lease_id=start["lease_id"], reply=reply)
        replay = await ok(c, "begin_turn", session_id=sid, turn_id="t3", text="q" * 30_000)
    assert replay["answered"] is True and replay["answer"] == "\x01" * 30_000
    assert json_size(replay) <= CAP, json_size(replay)
    assert replay["size_capped"] is True and replay["truncated"] is True
