"""Red team of the long-term memory store: races with forget, unbounded history, TTL edges. Real
engine, real model; races are real threads held at the store's failpoint, not sleeps."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LongTermSettings, MemorySettings
from mongogate.errors import NotFound
from mongogate.memory.search import ensure_search_index
from mongogate.memory.store import MemoryStore
from mongogate.recall import history as history_module
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope, Remembered
from mongogate.recall.store import LongTermMemory
from tests.memory.searching import search_messages

pytestmark = pytest.mark.anyio
ACME = MemoryScope("acme")


def remember_held_after_read(
    engine_uri: str, db_name: str, read: threading.Event, go: threading.Event, **call: Any
) -> Remembered:
    """One `remember` in its own thread, loop and client, stopped after its first read until `go`."""

    def fault(point: str) -> None:
        if point == "remember.after_read" and not read.is_set():
            read.set()
            assert go.wait(timeout=60)

    async def one() -> Remembered:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            ltm = LongTermMemory(client[db_name], LongTermSettings(), LocalEmbedder())
            ltm.fault = fault
            return await ltm.remember(ACME, **call)
        finally:
            await client.close()

    return anyio.run(one)


async def test_a_forget_between_an_updates_read_and_write_leaves_no_forgotten_text(
    ltm: LongTermMemory, engine_uri: str, db_name: str
) -> None:
    """Broke before the fix: the update wrote the forgotten text into memory_versions (history
    first) and then found no memory to update, so the text the caller forgot stayed stored forever
    under an id no tool can reach."""
    old = await ltm.remember(ACME, "The safe combination is 31-7-22.", key="safe")
    read, go = threading.Event(), threading.Event()
    result: list[Remembered] = []

    def racer() -> None:
        result.append(
            remember_held_after_read(engine_uri, db_name, read, go, text="The safe is now empty.", key="safe")
        )

    t = threading.Thread(target=racer)
    t.start()
    try:
        assert await anyio.to_thread.run_sync(read.wait, 60)
        assert await ltm.forget(ACME, namespace="default", key="safe") is True
    finally:
        go.set()
        await anyio.to_thread.run_sync(t.join, 60)
    # a memory's id is its identity (recall/ids.py): the key made again is version 1 of the same id
    assert result and (result[0].status, result[0].version) == ("created", 1) and result[0].id == old.id
    assert await ltm.versions.count_documents({"memory_id": old.id}) == 0
    assert await ltm.versions.count_documents({"text": {"$regex": "31-7-22"}}) == 0
    assert [v.text for v in (await ltm.history(ACME, result[0].id)).versions] == ["The safe is now empty."]


async def test_the_history_of_one_key_is_bounded(
    ltm: LongTermMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broke before the fix: every update kept its old text forever, uncounted by the quota and
    beyond what memory_history returns: one key rewritten in a loop filled the database."""
    monkeypatch.setattr(history_module, "MAX_HISTORY", 3)
    for i in range(7):
        mid = (await ltm.remember(ACME, f"version {i + 1}", key="k")).id
    assert await ltm.versions.count_documents({"memory_id": mid}) == 3
    h = await ltm.history(ACME, mid)
    assert [v.version for v in h.versions] == [4, 5, 6, 7] and h.truncated == 3
    assert [v.text for v in h.versions] == [f"version {i}" for i in (4, 5, 6, 7)]


async def test_a_memory_is_gone_at_the_exact_millisecond_it_expires(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    """Held: one millisecond before its TTL a memory is there for every tool, at the TTL it is absent
    for every tool (before the TTL monitor runs), and remembering its key again starts over."""
    a = await ltm.remember(ACME, "door code 4471", key="door", ttl_days=1)
    await ltm.remember(ACME, "door code 5582", key="door", ttl_days=1)
    clock.advance(ms=86_400_000 - 1)
    assert [m.id for m in (await ltm.recall(ACME, "4471 5582 door code")).memories] == [a.id]
    assert [v.version for v in (await ltm.history(ACME, a.id)).versions] == [1, 2]
    clock.advance(ms=1)
    assert (await ltm.recall(ACME, "door code")).memories == []
    assert (await ltm.list(ACME)).memories == []
    with pytest.raises(NotFound):
        await ltm.history(ACME, a.id)
    again = await ltm.remember(ACME, "door code 5582", key="door")
    # the same key made again: version 1 under the same (derived) id, none of the old history
    assert (again.status, again.version) == ("created", 1) and again.id == a.id
    assert await ltm.versions.count_documents({"memory_id": a.id}) == 0
    assert [v.text for v in (await ltm.history(ACME, a.id)).versions] == ["door code 5582"]


async def test_a_ttl_at_the_largest_allowed_value_is_stored(ltm: LongTermMemory, clock: ManualClock) -> None:
    """Held: max_ttl_days (100 years) does not overflow the date, and is still there a day before."""
    a = await ltm.remember(ACME, "a century-long fact", ttl_days=36_500)
    doc = await ltm.memories.find_one({"_id": a.id})
    assert doc is not None and doc["expires_at"] - clock.now() == timedelta(days=36_500)
    clock.advance(36_499 * 86_400)
    assert [m.id for m in (await ltm.list(ACME)).memories] == [a.id]


async def test_search_messages_never_finds_the_messages_of_a_deleted_session(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    """Broke before the fix: delete_session erases the session, then its messages; a delete stopped
    in between (or a message landing after it, the documented window) left messages that no session
    tool reads, and search_messages returned them: a deleted conversation could still be found."""
    store = MemoryStore(mongo[db_name], MemorySettings(), clock)
    await store.ensure_indexes()
    await ensure_search_index(store)
    gone, kept = await store.create_session("acme"), await store.create_session("acme")
    await store.append("acme", gone, "t", "user", "my card PIN is 4417")
    await store.append("acme", kept, "t", "user", "the PIN 4417 of the office door")

    def killed(point: str) -> None:
        if point == "delete_session.after_session":
            raise RuntimeError("server killed between the session and its messages")

    store.fault = killed
    with pytest.raises(RuntimeError):
        await store.delete_session("acme", gone)
    store.fault = None
    assert [h.session_id for h in (await search_messages(store, "acme", "4417")).messages] == [kept]
    with pytest.raises(NotFound):
        await search_messages(store, "acme", "4417", session_id=gone)
