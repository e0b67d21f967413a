"""The shape of the conditional updates by `_id` (`leases.keep_unless`, `leases.same`): what they
do to a document on the engine, and that a fenced turn's writes state each lease test once (the
engine prepares and evaluates an update pipeline node by node: docs/decisions/turn-write-path.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pymongo import AsyncMongoClient, ReturnDocument, monitoring

from mongogate.errors import NotFound
from mongogate.leases import keep_unless, literal, same
from mongogate.memory.turns import Turns
from tests.memory.test_store import Commands, listened_store

pytestmark = pytest.mark.anyio


async def test_keep_unless_changes_the_named_fields_only_when_ok(engine_uri: str, db_name: str) -> None:
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as c:
        coll = c[db_name]["shape"]
        original = {"_id": "s1", "tenant": "acme", "n": 1, "nested": {"a": [1, 2]}, "nothing": None}
        await coll.insert_one(original)

        async def apply(ok: Any, fields: dict[str, Any]) -> dict[str, Any] | None:
            return await coll.find_one_and_update(
                {"_id": "s1"}, [keep_unless(ok, fields)], return_document=ReturnDocument.AFTER
            )

        # Refused: the document as it was, a missing field still missing (the per-field `$cond`
        # shape set it to null on the embedded engine).
        refused = await apply(same("tenant", "other"), {"n": literal(5), "added": literal("x")})
        assert refused == original
        # Missing and null both count as None; a value is never equal to a missing field.
        assert await apply(same("absent", "x"), {"n": literal(6)}) == original
        assert (await apply(same("absent", None), {"n": literal(2)}) or {})["n"] == 2
        assert (await apply(same("nothing", None), {"n": literal(3)}) or {})["n"] == 3
        # Applied: the named fields set (from the document as it was, `$$ROOT` and field paths
        # reading the old values), every other field kept, no extra field left behind.
        done = await apply(
            same("tenant", "acme"),
            {"n": {"$add": ["$n", 10]}, "added": literal("$not-a-path"), "was": "$nested"},
        )
        assert done == {**original, "n": 13, "added": "$not-a-path", "was": {"a": [1, 2]}}


class Updates(Commands):
    """The update of every findAndModify on `sessions`."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[Any] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        super().started(event)
        if event.command_name == "findAndModify" and event.command["findAndModify"] == "sessions":
            self.updates.append(event.command["update"])


async def test_a_fenced_turn_states_each_lease_test_once(engine_uri: str, db_name: str) -> None:
    """The take and the commit send their lease condition once, not once per field they set: the
    old shape (`{$cond: [ok, new, "$field"]}` per field) sent the take's eight times and cost the
    engine 8.0 ms per take against 3.6 ms."""
    listener = Updates()
    async with listened_store(engine_uri, db_name, listener) as store:
        turns = Turns(store)
        sid = await store.create_session("acme")
        start = await turns.begin_turn("acme", sid, "t1", "q1")
        assert start.lease_id
        await turns.end_turn("acme", sid, "t1", start.lease_id, "a1")
    take, commit = (json.dumps(u, default=str) for u in listener.updates)
    assert take.count('"$tenant"') == 1 and take.count('"$answered_turn"') == 1, take
    assert commit.count('"$tenant"') == 1 and commit.count('"$locked_by"') == 1, commit


class Finds(Commands):
    """The filter and projection of every find on `messages`."""

    def __init__(self) -> None:
        super().__init__()
        self.finds: list[tuple[Any, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        super().started(event)
        if event.command_name == "find" and event.command["find"] == "messages":
            self.finds.append((event.command["filter"], event.command.get("projection")))


async def test_the_window_of_a_turn_is_read_by_session_alone(engine_uri: str, db_name: str) -> None:
    """begin_turn has just read the session as the caller's (the take), so its window is read by
    session alone; load_context, without that read, keeps the tenant in the filter. Neither
    projects (on the engine a projection costs more than the fields it leaves out), and another
    tenant still sees neither the session nor its messages."""
    listener = Finds()
    async with listened_store(engine_uri, db_name, listener) as store:
        turns = Turns(store)
        sid = await store.create_session("acme")
        start = await turns.begin_turn("acme", sid, "t1", "q1")
        assert start.lease_id and [m.content for m in start.messages] == ["q1"]
        await turns.end_turn("acme", sid, "t1", start.lease_id, "a1")
        ctx = await store.load_context("acme", sid)
        assert [m.content for m in ctx.messages] == ["q1", "a1"]
        with pytest.raises(NotFound):
            await turns.begin_turn("other", sid, "t2", "q2")
        with pytest.raises(NotFound):
            await store.load_context("other", sid)
    turn_find, context_find = [f for f in listener.finds if "session_id" in f[0]][:2]
    assert turn_find == ({"session_id": sid}, None)
    assert context_find == ({"session_id": sid, "tenant": "acme"}, None)
