"""Issue 27.1: a fenced turn is at most 5 round trips (begin_turn 3, end_turn 2), counted per tool
with a command listener, and the paths around it (a lost-reply retry, a replay, a heartbeat)."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.config import MemorySettings
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from tests.memory.test_store import Commands

pytestmark = pytest.mark.anyio


async def test_a_fenced_turn_is_five_round_trips(engine_uri: str, db_name: str) -> None:
    listener = Commands()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True, event_listeners=[listener]) as c:
        store = MemoryStore(c[db_name], MemorySettings())
        await store.ensure_indexes()
        turns = Turns(store)
        sid = await store.create_session("acme")
        for turn in ("t1", "t2", "t3"):  # the second and third find the previous answer parked
            listener.names.clear()
            start = await turns.begin_turn("acme", sid, turn, f"question {turn}")
            assert start.lease_id and listener.names == ["findAndModify", "insert", "find"], turn
            listener.names.clear()
            end = await turns.end_turn("acme", sid, turn, start.lease_id, f"answer {turn}")
            assert end.status == "inserted" and listener.names == ["findAndModify", "insert"], turn

        parked = await store.sessions.find_one({"_id": sid})  # each commit drops the answers before it
        assert parked is not None and [p["key"] for p in parked["pending"]] == ["t3:assistant"]

        # A lost begin_turn reply: the retry takes the lease over, same three round trips.
        first = await turns.begin_turn("acme", sid, "t4", "question t4")
        listener.names.clear()
        retry = await turns.begin_turn("acme", sid, "t4", "question t4")
        assert retry.lease_id and retry.lease_id != first.lease_id
        assert listener.names == ["findAndModify", "insert", "find"]
        listener.names.clear()  # a heartbeat is one update
        await turns.renew_turn("acme", sid, "t4", retry.lease_id)
        assert listener.names == ["findAndModify"]
        await turns.end_turn("acme", sid, "t4", retry.lease_id, "answer t4")

        # A replay of the answered turn: the stored answer, no lease taken.
        listener.names.clear()
        again = await turns.begin_turn("acme", sid, "t4", "question t4")
        assert again.answered and again.answer == "answer t4" and again.lease_id is None
        assert listener.names == ["findAndModify", "find"]

        # A lost end_turn reply: the retry says duplicate, the same seq.
        listener.names.clear()
        dup = await turns.end_turn("acme", sid, "t4", retry.lease_id, "answer t4")
        assert dup.status == "duplicate" and len(listener.names) <= 5  # settles the parked copy too
        session = await store.sessions.find_one({"_id": sid})
        keys = [d["key"] async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])]
    # At most the last answer stays parked on the session (each commit drops the ones before it;
    # the retried end_turn above settled it).
    assert session is not None and len(session.get("pending") or []) <= 1
    assert keys == [f"t{i}:{role}" for i in range(1, 5) for role in ("user", "assistant")]
