"""MongogateSession against the Agents SDK's own `SQLiteSession`: the same calls, the same answers.

250 items with tool calls (single and parallel function calls, reasoning), added in blocks of
several sizes to both; every read, pop and clear compared. Where they differ, on purpose: a
`limit` that would start the window inside a tool call (an output whose call is cut off, which
the model API rejects) leaves the orphaned outputs out, so the window is SQLite's window
without them (`expected_window`, written here independently of the adapter).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

pytest.importorskip("agents.memory", reason="needs the extra: pip install 'mongogate[openai-agents]'")

from agents.memory import SessionSettings, SQLiteSession

from mongogate.memory import MemoryStore
from mongogate.openai_agents import MongogateSession, session_doc_id
from mongogate.values import REPLY_BYTES, reply_batch
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

OUTPUT_OF = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}


def conversation(n: int) -> list[Any]:
    """`n` items as the Agents SDK stores them: user turns, reasoning, one or two calls at once,
    their outputs, the assistant's answer (the last turn may stop anywhere: a session can)."""
    out: list[Any] = []
    turn = 0
    while len(out) < n:
        turn += 1
        out.append({"role": "user", "content": f"question {turn}"})
        if turn % 3:
            out.append({"type": "reasoning", "id": f"rs_{turn}", "summary": []})
        calls = [f"c{turn}a", f"c{turn}b"] if turn % 2 else [f"c{turn}a"]
        for c in calls:
            out.append(
                {
                    "type": "function_call",
                    "call_id": c,
                    "name": "lookup",
                    "arguments": '{"q":1}',
                    "id": f"fc_{c}",
                }
            )
        for c in calls:
            out.append({"type": "function_call_output", "call_id": c, "output": f"result of {c}"})
        out.append(
            {
                "id": f"msg_{turn}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"answer {turn}", "annotations": []}],
            }
        )
    return out[:n]


def orphaned(window: list[Any]) -> list[int]:
    """Positions of outputs whose call is not earlier in the window."""
    seen: set[tuple[str, str]] = set()
    bad = []
    for i, item in enumerate(window):
        kind = item.get("type")
        if kind in OUTPUT_OF.values():
            seen.add((kind, item["call_id"]))
        elif kind in OUTPUT_OF and (OUTPUT_OF[kind], item["call_id"]) not in seen:
            bad.append(i)
    return bad


def expected_window(sqlite_window: list[Any]) -> list[Any]:
    """The longest tail of SQLite's window that holds no orphaned output."""
    return next(sqlite_window[s:] for s in range(len(sqlite_window) + 1) if not orphaned(sqlite_window[s:]))


@pytest.fixture
def theirs() -> Iterator[SQLiteSession]:
    session = SQLiteSession("chat")
    yield session
    session.close()


async def both_add(ours: MongogateSession, theirs: SQLiteSession, items: list[Any]) -> None:
    sizes, i = [1, 7, 3, 25, 2, 50, 11], 0
    while i < len(items):
        block = items[i : i + sizes[i % len(sizes)]]
        await ours.add_items(block)
        await theirs.add_items(block)
        i += len(block)


async def test_250_items_with_tool_calls_answer_as_sqlite_session(
    engine_uri: str, db_name: str, tmp_path: Path, theirs: SQLiteSession
) -> None:
    """Before (issue 40): `get_items()` returned the latest 200 of 250, and a limit could start
    the window at an output whose call it cut off."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    items = conversation(250)
    async with MongogateSession("chat", tenant="acme", config=settings) as ours:
        await both_add(ours, theirs, items)
        assert await theirs.get_items() == items
        assert await ours.get_items() == items

        cut_inside = 0
        for limit in [*range(1, 40), 100, 199, 200, 249, 250, 251, 1000]:
            sqlite_window = await theirs.get_items(limit)
            got = await ours.get_items(limit)
            assert got == expected_window(sqlite_window), limit
            assert not orphaned(got) and len(got) <= limit
            cut_inside += got != sqlite_window
        assert cut_inside >= 5  # the conversation does cut inside tool calls at some limits
        assert await ours.get_items(0) == await theirs.get_items(0) == []
        assert await ours.get_items(-1) == await theirs.get_items(-1) == items  # SQLite: no limit

        for _ in range(3):
            assert await ours.pop_item() == await theirs.pop_item()
        assert await ours.get_items() == await theirs.get_items() == items[:-3]

        ours.session_settings = theirs.session_settings = SessionSettings(limit=5)
        assert await ours.get_items() == expected_window(await theirs.get_items())
        ours.session_settings = theirs.session_settings = SessionSettings()

        await ours.clear_session()
        await theirs.clear_session()
        assert await ours.get_items() == await theirs.get_items() == []
        assert await ours.pop_item() is await theirs.pop_item() is None
        await both_add(ours, theirs, items[:9])
        assert await ours.get_items() == await theirs.get_items() == items[:9]


async def test_max_items_still_bounds_a_read_without_a_limit(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """`max_items`, when given, caps what a read without a limit returns, by the same safe cut."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    items = conversation(12)  # ... c2a call, c2a output, answer 2, question 3, ...
    async with MongogateSession("capped", tenant="acme", config=settings, max_items=6) as s:
        await s.add_items(items)
        assert await s.get_items() == expected_window(items[-6:])
        assert await s.get_items(3) == expected_window(items[-3:])
        assert await s.get_items(100) == expected_window(items[-6:])


class Reads(monitoring.CommandListener):
    """Every `find` and `getMore` on `messages`, and the documents each reply carried."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, dict[str, Any]]] = []
        self.batches: list[int] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("find", "getMore"):
            self.commands.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") if event.command_name in ("find", "getMore") else None
        if isinstance(cursor, dict):
            self.batches.append(len(cursor.get("firstBatch") or cursor.get("nextBatch") or []))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_a_whole_session_is_read_in_replies_under_the_wire_limit(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """`get_items()` without a limit reads every item, never as one reply: each reply holds at
    most as many items as fit in half the wire limit (or `REPLY_BYTES`) at their largest."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    items = conversation(250)
    async with MongogateSession("paged", tenant="acme", config=settings) as s:
        await s.add_items(items)
    reads = Reads()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri, event_listeners=[reads])
    try:
        store = MemoryStore(client[db_name], settings.memory)
        sid = session_doc_id("acme", "paged")
        got = await store.latest_items("acme", sid, None, name="paged")
    finally:
        await client.close()
    assert got == [json.dumps(i, separators=(",", ":")) for i in items]
    largest = settings.memory.max_message_bytes + 6 * settings.memory.max_id_length + 256
    per_reply = reply_batch(largest, 10**6)
    assert per_reply == REPLY_BYTES // largest < 250
    assert [name for name, _ in reads.commands][:1] == ["find"]
    assert reads.commands[0][1]["batchSize"] == per_reply
    assert sum(reads.batches) == 250 and max(reads.batches) <= per_reply
    assert len(reads.batches) >= 250 // per_reply
