"""Issue 27.2: messages and summaries are unique by a derived `_id` (session and key), not by a
compound unique index (which makes every insert on the embedded engine compare the whole
collection), and a database of the previous version (ObjectId `_id`s, the unique index) keeps its
guarantees: the old index stays while its documents do, and is dropped once they are gone."""

from __future__ import annotations

import pytest

from mongogate.errors import Conflict
from mongogate.memory.store import LEGACY_UNIQUE, MemoryStore
from mongogate.memory.turns import Turns
from mongogate.values import Doc

pytestmark = pytest.mark.anyio


async def unique_indexes(store: MemoryStore, name: str) -> list[str]:
    info = await store.db[name].index_information()
    return sorted(n for n, i in info.items() if i.get("unique") and n != "_id_")


async def test_messages_and_summaries_are_keyed_by_session_and_key(store: MemoryStore, turns: Turns) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "question")
    assert start.lease_id
    await turns.end_turn("acme", sid, "t1", start.lease_id, "answer")
    await store.append("acme", sid, "t2", "user", "hi")
    await store.append("acme", sid, "t2", "tool", "42", "c1")
    await store.append("acme", sid, "t2", "assistant", "it is 42")
    await store.compact_context("acme", sid, 2, "asked and answered")
    ids = sorted([(d["_id"], d["key"]) async for d in store.messages.find({}, {"key": 1})])
    assert ids == sorted((f"{sid}:{key}", key) for _, key in ids)
    assert len(ids) == 5
    summary = await store.db["summaries"].find_one({"session_id": sid})
    assert summary is not None and summary["_id"] == f"{sid}:summary:2"
    # no unique index but `_id`: inserts stay flat on the embedded engine
    assert await unique_indexes(store, "messages") == []
    assert await unique_indexes(store, "summaries") == []
    assert store.legacy_messages is False and store.legacy_summaries is False
    # a retried key is still refused by the _id: one copy, the stored seq
    again = await store.append("acme", sid, "t2", "tool", "42", "c1")
    assert again.status == "duplicate" and await store.messages.count_documents({"session_id": sid}) == 5
    with pytest.raises(Conflict):
        await store.append("acme", sid, "t2", "tool", "43", "c1")


async def as_previous_version(store: MemoryStore, name: str) -> None:
    """Rewrite a collection as the previous version left it: ObjectId `_id`s and the unique index."""
    coll = store.db[name]
    docs: list[Doc] = [d async for d in coll.find({})]
    await coll.delete_many({})
    await coll.insert_many([{k: v for k, v in d.items() if k != "_id"} for d in docs])
    await coll.create_index([("session_id", 1), ("key", 1)], unique=True, name=LEGACY_UNIQUE)


async def test_a_previous_version_database_keeps_its_index_while_its_documents_remain(
    store: MemoryStore, turns: Turns
) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "question")
    assert start.lease_id
    await turns.end_turn("acme", sid, "t1", start.lease_id, "answer")
    await store.compact_context("acme", sid, 2, "asked and answered")
    await as_previous_version(store, "messages")
    await as_previous_version(store, "summaries")

    await store.ensure_indexes()  # what the new version does at start
    assert await unique_indexes(store, "messages") == [LEGACY_UNIQUE]
    assert await unique_indexes(store, "summaries") == [LEGACY_UNIQUE]
    assert store.legacy_messages is True and store.legacy_summaries is True

    # Keys stored by the previous version are still deduplicated, and found by key.
    user = await store.append("acme", sid, "t1", "user", "question")
    assert user.status == "duplicate" and user.seq == 1
    with pytest.raises(Conflict):
        await store.append("acme", sid, "t1", "user", "another question")
    found = await store.find_message("acme", sid, "t1:assistant")
    assert found is not None and found["content"] == "answer"
    assert await store.find_message("globex", sid, "t1:assistant") is None
    replay = await turns.begin_turn("acme", sid, "t1", "question")  # a replayed turn: the stored answer
    assert replay.answered and replay.answer == "answer" and replay.lease_id is None
    again = await store.compact_context("acme", sid, 2, "asked and answered")
    assert again.status == "duplicate"
    with pytest.raises(Conflict):
        await store.compact_context("acme", sid, 2, "other text")
    # New messages take derived ids beside the old ones; all in one window.
    nxt = await turns.begin_turn("acme", sid, "t2", "next")
    assert nxt.lease_id and [m.key for m in nxt.messages] == ["t2:user"]  # after the summary
    whole = await store.load_context("acme", sid, include_summarized=True)
    assert [m.key for m in whole.messages] == ["t1:user", "t1:assistant", "t2:user"]
    assert await store.messages.count_documents({"session_id": sid}) == 3
    assert await store.messages.find_one({"_id": f"{sid}:t2:user"}) is not None

    # Once the previous version's documents are gone (retention, delete_session), the index goes.
    await store.delete_session("acme", sid)
    await store.ensure_indexes()
    assert await unique_indexes(store, "messages") == []
    assert await unique_indexes(store, "summaries") == []
    assert store.legacy_messages is False and store.legacy_summaries is False
