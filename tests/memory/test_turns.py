"""Turns and the session lease: one owner at a time, replays answered once, stale owners refused."""

from __future__ import annotations

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.config import MemorySettings
from mongogate.errors import LeaseBusy, LeaseLost, NotFound
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns

pytestmark = pytest.mark.anyio


class Crash(BaseException):
    """Stands in for the process dying: raised between a write and its acknowledgement."""


async def test_two_turns_at_once_both_land_through_the_lease(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    busy = 0

    async def turn(t: str) -> None:
        nonlocal busy
        while True:
            try:
                start = await turns.begin_turn("acme", sid, t, f"question {t}")
                break
            except LeaseBusy:
                busy += 1
                await anyio.sleep(0.02)
        assert start.lease_id is not None
        await turns.end_turn("acme", sid, t, start.lease_id, f"answer {t}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "a")
        tg.start_soon(turn, "b")
    msgs = (await store.load_context("acme", sid)).messages
    assert sorted(m.content for m in msgs) == ["answer a", "answer b", "question a", "question b"]
    # turns never interleave: each answer directly follows its question
    ids = [m.turn_id for m in msgs]
    assert ids[0] == ids[1] and ids[2] == ids[3]
    assert busy >= 1


async def test_replay_after_crash_returns_the_stored_answer(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "what is 6*7?", lease_ms=300)
    assert start.lease_id and not start.answered

    def crash(point: str) -> None:
        if point == "end_turn.after_reply_write":
            raise Crash

    store.fault = crash
    with pytest.raises(Crash):  # the reply is written, then the worker dies before the ack
        await turns.end_turn("acme", sid, "t1", start.lease_id, "42")
    store.fault = None
    before = await store.messages.count_documents({"session_id": sid})

    with pytest.raises(LeaseBusy):  # the dead worker's lease still holds the session
        await turns.begin_turn("acme", sid, "t1", "what is 6*7?")
    await anyio.sleep(0.35)
    replay = await turns.begin_turn("acme", sid, "t1", "what is 6*7?")
    assert replay.answered and replay.answer == "42" and replay.lease_id is None
    assert await store.messages.count_documents({"session_id": sid}) == before == 2
    # and the session is free again: the next turn starts at once
    nxt = await turns.begin_turn("acme", sid, "t2", "thanks")
    assert nxt.lease_id is not None and not nxt.answered


async def test_end_turn_retried_after_lost_ack_is_a_duplicate(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "hi")
    assert start.lease_id
    first = await turns.end_turn("acme", sid, "t1", start.lease_id, "hello")
    again = await turns.end_turn("acme", sid, "t1", start.lease_id, "hello")
    assert (first.status, again.status) == ("inserted", "duplicate") and first.seq == again.seq
    assert await store.messages.count_documents({"session_id": sid}) == 2


async def test_eight_racers_one_winner_then_expiry_and_stale_owner(engine_uri: str, db_name: str) -> None:
    settings = MemorySettings()
    clients = [AsyncMongoClient(engine_uri, tz_aware=True) for _ in range(8)]
    try:
        racers = [Turns(MemoryStore(c[db_name], settings)) for c in clients]  # type: ignore[arg-type]
        store = racers[0].store
        await store.ensure_indexes()
        sid = await store.create_session("acme")
        results: list[str | None] = [None] * 8
        busy: list[LeaseBusy] = []

        async def race(i: int) -> None:
            try:
                start = await racers[i].begin_turn("acme", sid, f"t{i}", f"q{i}", lease_ms=400)
                results[i] = start.lease_id
            except LeaseBusy as e:
                busy.append(e)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(race, i)
        winners = [i for i, lid in enumerate(results) if lid]
        assert len(winners) == 1 and len(busy) == 7
        assert all(0 < e.ms_left <= 400 for e in busy)
        assert "Retry after" in str(busy[0]) and busy[0].expires_at.isoformat() in str(busy[0])
        # the busy racers wrote nothing
        assert await store.messages.count_documents({"session_id": sid}) == 1

        stale = winners[0]
        stale_lease = results[stale]
        assert stale_lease
        await anyio.sleep(0.45)  # the winner stalls past its lease
        taker = (stale + 1) % 8
        new = await racers[taker].begin_turn("acme", sid, f"t{taker}", f"q{taker}", lease_ms=5000)
        assert new.lease_id and new.lease_id != stale_lease
        count = await store.messages.count_documents({"session_id": sid})

        with pytest.raises(LeaseLost, match="nothing was written"):
            await racers[stale].end_turn("acme", sid, f"t{stale}", stale_lease, "late reply")
        doc = await store.sessions.find_one({"_id": sid})
        assert doc is not None and doc["locked_by"] == new.lease_id  # the new owner keeps the lease
        assert await store.messages.count_documents({"session_id": sid}) == count

        done = await racers[taker].end_turn("acme", sid, f"t{taker}", new.lease_id, "on time")
        assert done.status == "inserted"
        doc = await store.sessions.find_one({"_id": sid})
        assert doc is not None and doc["locked_by"] is None
    finally:
        for c in clients:
            await c.close()


async def test_never_issued_lease_and_other_tenant(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await turns.begin_turn("acme", sid, "t1", "hi")
    with pytest.raises(LeaseLost):
        await turns.end_turn("acme", sid, "t1", "made-up-lease", "reply")
    with pytest.raises(NotFound):
        await turns.begin_turn("globex", sid, "t2", "hi")
    with pytest.raises(NotFound):
        await turns.end_turn("globex", sid, "t1", "made-up-lease", "reply")
    assert await store.messages.count_documents({"session_id": sid}) == 1
