"""MongogateSession against the Agents SDK's Session protocol, with concurrent add_items."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

pytest.importorskip("agents.memory", reason="needs the extra: pip install 'mongogate[openai-agents]'")

from agents.memory import Session, SessionSettings

from mongogate.memory.store import MemoryStore
from mongogate.openai_agents import MongogateSession, session_doc_id
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


def _item(writer: str, batch: int, i: int) -> Any:
    return {"role": "user", "content": f"{writer}.{batch}.{i}"}


async def test_the_session_protocol_in_order(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    async with MongogateSession("chat-1", tenant="acme", config=settings, max_items=3) as s:
        assert isinstance(s, Session)
        assert await s.get_items() == []
        assert await s.pop_item() is None
        call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
        items: list[Any] = [_item("a", 0, 0), call, {"role": "assistant", "content": "ok"}, _item("a", 0, 1)]
        await s.add_items(items)
        assert await s.get_items(2) == items[2:]
        assert await s.get_items() == items[1:]  # bounded: max_items=3
        assert await s.pop_item() == items[3]
        assert await s.get_items(10) == items[:3]
        s.session_settings = SessionSettings(limit=1)
        assert await s.get_items() == [items[2]]
        async with MongogateSession("chat-1", tenant="globex", config=settings) as other:
            assert await other.get_items() == []  # another tenant's session looks like none
            assert await other.pop_item() is None
            await other.clear_session()
        await s.clear_session()
        assert await s.get_items(10) == []
        await s.add_items([_item("b", 0, 0)])
        assert await s.get_items(10) == [_item("b", 0, 0)]


async def test_concurrent_add_items_keep_each_call_together_and_in_order(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    writers, batches, size = 4, 3, 3
    sessions = [
        MongogateSession("race", tenant="acme", config=settings, max_items=200) for _ in range(writers)
    ]
    start = threading.Barrier(writers)

    def writer(w: int) -> None:  # one thread and one event loop per writer, all released at once
        async def go() -> None:
            start.wait()
            await asyncio.gather(
                *(sessions[w].add_items([_item(f"w{w}", b, i) for i in range(size)]) for b in range(batches))
            )

        asyncio.run(go())

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        got = [str(dict(it)["content"]) for it in await sessions[0].get_items()]
    finally:
        for s in sessions:
            s.close()
    assert sorted(got) == sorted(
        f"w{w}.{b}.{i}" for w in range(writers) for b in range(batches) for i in range(size)
    )
    for k in range(0, len(got), size):  # every add_items call is one contiguous block, in its own order
        block = got[k : k + size]
        prefix = block[0].rsplit(".", 1)[0]
        assert block == [f"{prefix}.{i}" for i in range(size)], got


async def test_the_session_is_one_mongogate_sessions_lists(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: AsyncMongoClient[dict[str, object]]
) -> None:
    """`list_sessions` read `created_at` from every session: one made by add_items had none (KeyError)."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    async with MongogateSession("chat-listed", tenant="acme", config=settings) as s:
        await s.add_items([_item("a", 0, 0), _item("a", 0, 1)])
    page = await MemoryStore(mongo[db_name], settings.memory).list_sessions("acme")
    assert [(x.title, x.last_seq) for x in page.sessions] == [("chat-listed", 2)]
    assert page.sessions[0].session_id == session_doc_id("acme", "chat-listed")
    assert (await MemoryStore(mongo[db_name], settings.memory).list_sessions("globex")).sessions == []
