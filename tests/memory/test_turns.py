"""Turns and the session lease: one owner at a time, answered at most once, never locked out.

Time is a ManualClock: leases expire when a test moves the clock, never by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.errors import Conflict, InvalidInput, LeaseBusy, LeaseLost, NotFound
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns

pytestmark = pytest.mark.anyio


class Crash(BaseException):
    """Stands in for the process dying: raised between a write and its acknowledgement."""


def crash_at(point: str) -> Callable[[str], None]:
    def fault(at: str) -> None:
        if at == point:
            raise Crash(at)

    return fault


async def answers(store: MemoryStore, sid: str) -> list[str]:
    return [
        d["content"] async for d in store.messages.find({"session_id": sid, "key": {"$regex": ":assistant$"}})
    ]


async def test_two_turns_at_once_both_land_through_the_lease(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    first_in = anyio.Event()
    busy = 0

    async def turn(t: str) -> None:
        nonlocal busy
        for _ in range(1000):  # bounded: the other turn ends after one round trip or two
            try:
                start = await turns.begin_turn("acme", sid, t, f"question {t}")
                break
            except LeaseBusy:
                busy += 1
                await first_in.wait()
                await anyio.sleep(0)
        else:  # pragma: no cover
            pytest.fail("never got the lease")
        first_in.set()
        assert start.lease_id is not None
        await turns.end_turn("acme", sid, t, start.lease_id, f"answer {t}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "a")
        tg.start_soon(turn, "b")
    msgs = (await store.load_context("acme", sid)).messages
    assert sorted(m.content for m in msgs) == ["answer a", "answer b", "question a", "question b"]
    ids = [m.turn_id for m in msgs]
    assert ids[0] == ids[1] and ids[2] == ids[3]  # turns never interleave


@pytest.mark.parametrize("point", ["answer.after_commit", "answer.after_write", "end_turn.after_reply_write"])
async def test_crash_inside_end_turn_then_replay_returns_the_stored_answer(
    turns: Turns, store: MemoryStore, point: str
) -> None:
    """Killed between the commit and the acknowledgement: the retry gets the answer, asks no model."""
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "what is 6*7?")
    assert start.lease_id and not start.answered
    store.fault = crash_at(point)
    with pytest.raises(Crash):
        await turns.end_turn("acme", sid, "t1", start.lease_id, "42")
    store.fault = None
    replay = await turns.begin_turn("acme", sid, "t1", "what is 6*7?")  # no clock movement needed
    assert replay.answered and replay.answer == "42" and replay.lease_id is None
    assert await answers(store, sid) == ["42"]
    again = await turns.end_turn("acme", sid, "t1", start.lease_id, "42")  # the lost ack, retried
    assert again.status == "duplicate"
    nxt = await turns.begin_turn("acme", sid, "t2", "thanks")
    assert nxt.lease_id is not None and not nxt.answered
    assert await store.messages.count_documents({"session_id": sid}) == 3


async def test_end_turn_retried_after_crash_before_write_lands_once(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "hi")
    assert start.lease_id
    store.fault = crash_at("answer.after_commit")
    with pytest.raises(Crash):
        await turns.end_turn("acme", sid, "t1", start.lease_id, "hello")
    store.fault = None
    again = await turns.end_turn("acme", sid, "t1", start.lease_id, "hello")
    assert again.status in ("inserted", "duplicate")
    assert await answers(store, sid) == ["hello"]
    with pytest.raises(Conflict):  # the same lease may not swap its answer afterwards
        await turns.end_turn("acme", sid, "t1", start.lease_id, "goodbye")


async def test_lost_begin_turn_reply_is_taken_over_at_once(
    turns: Turns, store: MemoryStore, clock: ManualClock
) -> None:
    """Issue 8.1: the server died after taking the lease; the retry does not wait for expiry."""
    sid = await store.create_session("acme")
    store.fault = crash_at("begin_turn.after_lease")
    with pytest.raises(Crash):
        await turns.begin_turn("acme", sid, "t1", "hello?")
    store.fault = None
    # Without takeover this is lease_busy for the whole lease; the clock does not move at all.
    retry = await turns.begin_turn("acme", sid, "t1", "hello?")
    assert retry.lease_id and not retry.answered
    assert [m.content for m in retry.messages] == ["hello?"]
    # a different turn, or the same turn id with other text, does not get in
    with pytest.raises(LeaseBusy):
        await turns.begin_turn("acme", sid, "t2", "me first")
    with pytest.raises(LeaseBusy):
        await turns.begin_turn("acme", sid, "t1", "other text")
    done = await turns.end_turn("acme", sid, "t1", retry.lease_id, "hi!")
    assert done.status == "inserted"


async def test_takeover_fences_the_earlier_attempt(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    first = await turns.begin_turn("acme", sid, "t1", "q")
    second = await turns.begin_turn("acme", sid, "t1", "q")  # the client retried: a lost reply
    assert first.lease_id and second.lease_id and first.lease_id != second.lease_id
    with pytest.raises(LeaseLost, match="nothing was written"):
        await turns.end_turn("acme", sid, "t1", first.lease_id, "from the first attempt")
    await turns.end_turn("acme", sid, "t1", second.lease_id, "from the second attempt")
    assert await answers(store, sid) == ["from the second attempt"]


async def test_renewed_lease_outlives_its_first_expiry(
    turns: Turns, store: MemoryStore, clock: ManualClock
) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "long question", lease_ms=30_000)
    assert start.lease_id
    clock.advance(20)
    renewed = await turns.renew_turn("acme", sid, "t1", start.lease_id)
    assert renewed.lease_expires_at == (clock.now() + timedelta(seconds=30)).isoformat()
    clock.advance(20)  # 40 s after begin: past the first expiry, inside the renewed one
    with pytest.raises(LeaseBusy):
        await turns.begin_turn("acme", sid, "t2", "me next")
    clock.advance(11)  # now past the renewed expiry too: another turn takes the session
    other = await turns.begin_turn("acme", sid, "t2", "me next")
    with pytest.raises(LeaseLost):
        await turns.renew_turn("acme", sid, "t1", start.lease_id)
    with pytest.raises(LeaseLost):
        await turns.end_turn("acme", sid, "t1", start.lease_id, "too late")
    assert other.lease_id and await answers(store, sid) == []


async def test_answer_of_a_leased_turn_only_through_end_turn(turns: Turns, store: MemoryStore) -> None:
    """Issue 8.6: another caller cannot inject the leased turn's answer with append."""
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "q")
    assert start.lease_id
    with pytest.raises(Conflict, match="only end_turn with that lease"):
        await store.append("acme", sid, "t1", "assistant", "injected")
    # tool calls inside the turn are fine
    await store.append("acme", sid, "t1", "assistant", "calling", "c1")
    done = await turns.end_turn("acme", sid, "t1", start.lease_id, "the real answer")
    assert done.status == "inserted"
    replay = await turns.begin_turn("acme", sid, "t1", "q")
    assert replay.answer == "the real answer"
    assert await answers(store, sid) == ["the real answer"]  # and the call request is stored too


async def test_end_turn_for_a_turn_never_begun_is_invalid(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "q")
    assert start.lease_id
    with pytest.raises(InvalidInput, match="was not begun under lease"):
        await turns.end_turn("acme", sid, "never-begun", start.lease_id, "answer")
    assert await answers(store, sid) == []
    await turns.end_turn("acme", sid, "t1", start.lease_id, "answer")


async def test_eight_racers_one_winner_then_expiry_and_stale_owner(
    engine_uri: str, db_name: str, clock: ManualClock
) -> None:
    settings = MemorySettings()
    clients = [AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) for _ in range(8)]
    try:
        racers = [Turns(MemoryStore(c[db_name], settings, clock)) for c in clients]
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
        assert all(e.ms_left == 400 for e in busy)  # the clock did not move
        assert "Retry after" in str(busy[0]) and busy[0].expires_at.isoformat() in str(busy[0])
        assert await store.messages.count_documents({"session_id": sid}) == 1

        stale = winners[0]
        stale_lease = results[stale]
        assert stale_lease
        clock.advance(ms=400)  # the winner stalls past its lease
        taker = (stale + 1) % 8
        new = await racers[taker].begin_turn("acme", sid, f"t{taker}", f"q{taker}", lease_ms=5000)
        assert new.lease_id and new.lease_id != stale_lease
        count = await store.messages.count_documents({"session_id": sid})

        with pytest.raises(LeaseLost, match="nothing was written"):
            await racers[stale].end_turn("acme", sid, f"t{stale}", stale_lease, "late reply")
        doc = await store.sessions.find_one({"_id": sid})
        assert doc is not None and doc["locked_by"] == new.lease_id
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
    with pytest.raises(NotFound):
        await turns.renew_turn("globex", sid, "t1", "made-up-lease")
    assert await store.messages.count_documents({"session_id": sid}) == 1
