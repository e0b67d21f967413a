"""The background derivation's queue (`memory/message_fill.py`) is shared by every tenant: one
tenant writing through many subjects (each its own conversation scope) must not fill it so that
every other tenant's writes are dropped."""

from __future__ import annotations

import anyio
import pytest

from mongogate.config import MessageSearchSettings
from mongogate.memory.message_fill import QUEUE_MAX, QUEUE_PER_SCOPE, MessageFill
from mongogate.memory.store import MemoryStore
from mongogate.memory_scope import SUBJECT_SEPARATOR
from tests.memory.searching import searcher

pytestmark = pytest.mark.anyio


async def test_one_tenant_of_many_subjects_never_crowds_the_others_out_of_the_queue(
    store: MemoryStore,
) -> None:
    fill = MessageFill(store, None, MessageSearchSettings())
    subjects = QUEUE_MAX // QUEUE_PER_SCOPE + 1
    for s in range(subjects):  # a full queue's worth of its subjects' messages, and more
        key = f"evil{SUBJECT_SEPARATOR}user-{s}"
        fill.want(key, [f"sess-{s}:t{i}:user" for i in range(QUEUE_PER_SCOPE)], tenant="evil")
    assert fill.stats.dropped > 0  # the hostile tenant's surplus is what is dropped
    dropped, queued = fill.stats.dropped, fill.queued()
    fill.want("acme", ["acme-session:t1:user", "acme-session:t2:user"], tenant="acme")
    assert (fill.stats.dropped, fill.queued()) == (dropped, queued + 2)  # acme's are queued
    assert fill.queued() <= QUEUE_MAX


async def test_a_tenant_of_many_subjects_gets_one_turn_in_the_background_as_any_other(
    store: MemoryStore,
) -> None:
    """The background takes tenants in turn, then their scopes: a tenant writing through many
    subjects (each its own scope) waits for one batch of theirs at most, not one per subject."""
    found = searcher(store, background=True)
    derived: list[str] = []
    written = anyio.Event()

    async def note(ids: list[str]) -> None:
        derived.append(await _session_of(store, ids[0]))
        await written.wait()  # the first batch holds the background until every write is queued

    found.fill.before_write = note
    evil = [f"evil{SUBJECT_SEPARATOR}user-{s}" for s in range(12)]
    for s, tenant in enumerate(evil):  # written before acme's: queued first
        await store.add_items(tenant, f"evil-{s}", [("user", f"spam {s}")], turn="t", new={}, name="e")
    await store.add_items("acme", "acme-1", [("user", "water the fern")], turn="t", new={}, name="a")
    written.set()
    await found.fill.settle()
    # evil-0's batch was under way when acme's message came and evil-1's was queued before it:
    # after those, acme's turn, never after evil's other ten scopes
    assert derived.index("acme-1") <= 2
    assert sorted(derived) == sorted(["acme-1", *(f"evil-{s}" for s in range(12))])  # each once
    await found.aclose()


async def _session_of(store: MemoryStore, mid: str) -> str:
    doc = await store.db["messages"].find_one({"_id": mid}, {"session_id": 1})
    assert doc is not None
    return str(doc["session_id"])
