"""Fencing: a writer that lost the session lands nothing; a no-op begin_turn fences nobody.

Defects found by a red-team pass of the turn protocol (D1-D7), each with the test that failed.
Time is a ManualClock; interleavings are forced with the store's fault hook and events.
"""

from __future__ import annotations

import contextlib
import random
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
    """Stands in for the process dying at a fault point."""


async def history(store: MemoryStore, sid: str) -> list[tuple[str, str]]:
    return [
        (d["turn_id"], d["role"]) async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])
    ]


async def test_d1_begin_turn_that_lost_its_lease_writes_nothing(
    turns: Turns, store: MemoryStore, clock: ManualClock, engine_uri: str, db_name: str
) -> None:
    """Between taking the lease and storing the user message, the lease expires and another
    server's turn takes the session: the old begin_turn's user message keeps the seq its take gave
    it (before the new turn's), and nothing of it lands inside the new turn: its lease is fenced."""
    sid = await store.create_session("acme")
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as other_client:
        other = Turns(MemoryStore(other_client[db_name], MemorySettings(), clock))
        taken: dict[str, str] = {}
        paused, resume = anyio.Event(), anyio.Event()

        def fault(at: str) -> None:
            if at == "begin_turn.after_lease":
                paused.set()

        async def x() -> None:
            start = await turns.begin_turn("acme", sid, "a", "question a", lease_ms=100)
            assert start.lease_id
            taken["a"] = start.lease_id

        real_insert = store.insert_turn

        async def slow_insert(*args: Any, **kwargs: Any) -> Any:
            await resume.wait()
            return await real_insert(*args, **kwargs)

        store.fault = fault
        store.insert_turn = slow_insert  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            tg.start_soon(x)
            await paused.wait()
            clock.advance(1)  # X's 100 ms lease is gone; another server's turn takes the session
            b = await other.begin_turn("acme", sid, "b", "question b")
            assert b.lease_id
            taken["b"] = b.lease_id
            resume.set()
        await other.end_turn("acme", sid, "b", taken["b"], "answer b")
    with pytest.raises(LeaseLost):
        await turns.end_turn("acme", sid, "a", taken["a"], "answer a")
    assert await history(store, sid) == [("a", "user"), ("b", "user"), ("b", "assistant")]


async def test_d2_a_fenced_owner_appends_nothing(
    turns: Turns, store: MemoryStore, clock: ManualClock
) -> None:
    sid = await store.create_session("acme")
    x = await turns.begin_turn("acme", sid, "a", "question a", lease_ms=100)
    assert x.lease_id
    clock.advance(1)
    y = await turns.begin_turn("acme", sid, "b", "question b")
    assert y.lease_id
    with pytest.raises(LeaseLost):  # with its lease id: fenced
        await store.append("acme", sid, "a", "tool", "result", "c1", lease_id=x.lease_id)
    with pytest.raises(LeaseBusy):  # without: another turn holds the session
        await store.append("acme", sid, "a", "assistant", "call", "c1")
    with pytest.raises(LeaseBusy):
        await store.append("acme", sid, "a", "assistant", "final a")
    await store.append("acme", sid, "b", "tool", "b's result", "c1")  # the leased turn's own work
    await turns.end_turn("acme", sid, "b", y.lease_id, "answer b")
    assert await history(store, sid) == [("a", "user"), ("b", "user"), ("b", "tool"), ("b", "assistant")]


async def test_d2_an_attempt_fenced_by_a_retry_cannot_write_with_its_lease(
    turns: Turns, store: MemoryStore
) -> None:
    sid = await store.create_session("acme")
    first = await turns.begin_turn("acme", sid, "a", "q")
    second = await turns.begin_turn("acme", sid, "a", "q")  # the retry takes over
    with pytest.raises(LeaseLost):
        await store.append("acme", sid, "a", "tool", "stale result", "c1", lease_id=first.lease_id)
    await store.append("acme", sid, "a", "tool", "fresh result", "c1", lease_id=second.lease_id)


async def test_d3_conflicting_begin_turn_leaves_the_expired_owner_alone(
    turns: Turns, store: MemoryStore, clock: ManualClock
) -> None:
    sid = await store.create_session("acme")
    x = await turns.begin_turn("acme", sid, "a", "question a", lease_ms=100)
    assert x.lease_id
    clock.advance(1)
    with pytest.raises(Conflict):
        await turns.begin_turn("acme", sid, "a", "other text")  # writes nothing...
    end = await turns.end_turn("acme", sid, "a", x.lease_id, "answer a")  # ...and fences nobody
    assert end.status == "inserted"


async def test_d3_late_retry_of_an_answered_turn_leaves_the_expired_owner_alone(
    turns: Turns, store: MemoryStore, clock: ManualClock
) -> None:
    sid = await store.create_session("acme")
    a = await turns.begin_turn("acme", sid, "a", "qa")
    assert a.lease_id
    await turns.end_turn("acme", sid, "a", a.lease_id, "answer a")
    c = await turns.begin_turn("acme", sid, "c", "qc", lease_ms=100)
    assert c.lease_id
    clock.advance(1)
    replay = await turns.begin_turn("acme", sid, "a", "qa")
    assert replay.answered and replay.lease_id is None
    assert (await turns.end_turn("acme", sid, "c", c.lease_id, "answer c")).status == "inserted"


async def test_d5_an_unsettled_answer_is_found_while_another_turn_holds_the_lease(
    turns: Turns, store: MemoryStore
) -> None:
    sid = await store.create_session("acme")
    a = await turns.begin_turn("acme", sid, "a", "qa")
    assert a.lease_id

    def crash(at: str) -> None:
        if at == "answer.after_commit":
            raise Crash(at)

    store.fault = crash
    with pytest.raises(Crash):
        await turns.end_turn("acme", sid, "a", a.lease_id, "answer a")
    store.fault = None
    # turn b's process took the lease and died before settling anything
    until = store.clock.now() + timedelta(seconds=30)
    await store.sessions.update_one(
        {"_id": sid}, {"$set": {"locked_by": "dead", "locked_until": until, "lease_turn": "b"}}
    )
    replay = await turns.begin_turn("acme", sid, "a", "qa")
    assert replay.answered and replay.answer == "answer a"


async def test_a_leased_append_still_writes_an_answer_parked_after_its_take(
    turns: Turns, store: MemoryStore, clock: ManualClock
) -> None:
    """Issue 38.3: a leased append drops only the parked answers its lease vouches for (parked
    before its take). One parked later (a plain final answer of another turn, committed while the
    lease had expired, whose writer died before its insert) is written with the append."""
    sid = await store.create_session("acme")
    a = await turns.begin_turn("acme", sid, "a", "qa")
    assert a.lease_id
    await turns.end_turn("acme", sid, "a", a.lease_id, "answer a")  # parked, and stored
    b = await turns.begin_turn("acme", sid, "b", "qb", lease_ms=100)
    assert b.lease_id
    clock.advance(1)

    def crash(at: str) -> None:
        if at == "answer.after_commit":
            raise Crash(at)

    store.fault = crash
    with pytest.raises(Crash):
        await store.append("acme", sid, "x", "assistant", "answer x")
    store.fault = None
    r = await store.append("acme", sid, "b", "tool", "b's result", "c1", lease_id=b.lease_id)
    assert r.status == "inserted"
    assert await history(store, sid) == [
        ("a", "user"),
        ("a", "assistant"),
        ("b", "user"),
        ("x", "assistant"),
        ("b", "tool"),
    ]
    session = await store.sessions.find_one({"_id": sid})
    assert session is not None and not session.get("pending")


async def test_d6_the_first_end_turn_says_inserted_even_if_a_reader_settled_it(
    turns: Turns, store: MemoryStore
) -> None:
    sid = await store.create_session("acme")
    x = await turns.begin_turn("acme", sid, "a", "qa")
    assert x.lease_id
    paused, resume = anyio.Event(), anyio.Event()
    real = store.insert_message

    async def slow(doc: Any) -> Any:
        if doc["role"] == "assistant" and not paused.is_set():
            paused.set()
            await resume.wait()
        return await real(doc)

    store.insert_message = slow  # type: ignore[method-assign]
    out: dict[str, Any] = {}

    async def ender() -> None:
        assert x.lease_id
        out["end"] = await turns.end_turn("acme", sid, "a", x.lease_id, "answer a")

    async with anyio.create_task_group() as tg:
        tg.start_soon(ender)
        await paused.wait()  # committed on the session, not yet inserted
        assert (await turns.begin_turn("acme", sid, "a", "qa")).answered
        resume.set()
    assert out["end"].status == "inserted"


async def test_d7_renew_with_the_wrong_turn_is_invalid_input(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    b = await turns.begin_turn("acme", sid, "a", "qa")
    assert b.lease_id
    with pytest.raises(InvalidInput):
        await turns.end_turn("acme", sid, "zz", b.lease_id, "x")
    with pytest.raises(InvalidInput):
        await turns.renew_turn("acme", sid, "zz", b.lease_id)


async def _yield_some(rnd: random.Random, most: int) -> None:
    """Let the other writers run: 0 to ``most`` turns of the event loop."""
    for _ in range(rnd.randint(0, most)):
        await anyio.sleep(0)


@pytest.mark.parametrize("seed", range(12))
async def test_one_answer_per_turn_under_mixed_writers(
    turns: Turns, store: MemoryStore, clock: ManualClock, seed: int
) -> None:
    """Random interleavings of begin/renew/end attempts and plain appends of the final answer:
    at most one answer, and every acknowledgement carries the stored text."""
    rnd = random.Random(seed)
    sid = await store.create_session("acme")
    acks: list[tuple[str, str, str]] = []

    async def attempt(i: int) -> None:
        await _yield_some(rnd, 3)
        try:
            b = await turns.begin_turn("acme", sid, "a", "qa", lease_ms=rnd.choice([100, 30_000]))
        except (LeaseBusy, LeaseLost):  # busy, or fenced by a concurrent retry of the same turn
            return
        if b.answered:
            acks.append((f"b{i}", "answered", b.answer or ""))
            return
        assert b.lease_id
        await _yield_some(rnd, 3)
        if rnd.random() < 0.3:
            clock.advance(1)
        if rnd.random() < 0.3:
            with contextlib.suppress(LeaseLost):
                await turns.renew_turn("acme", sid, "a", b.lease_id)
        if rnd.random() < 0.5:  # a tool result under the lease (issue 38.3: it drops parked copies)
            with contextlib.suppress(LeaseLost):
                await store.append("acme", sid, "a", "tool", f"result {i}", f"c{i}", lease_id=b.lease_id)
        try:
            e = await turns.end_turn("acme", sid, "a", b.lease_id, f"reply {i}")
            acks.append((f"e{i}", e.status, f"reply {i}"))
        except LeaseLost:
            pass

    async def plain(i: int) -> None:
        await _yield_some(rnd, 5)
        try:
            r = await store.append("acme", sid, "a", "assistant", f"plain {i}")
            acks.append((f"p{i}", r.status, f"plain {i}"))
        except (Conflict, LeaseBusy):
            pass

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(attempt, i)
        for i in range(3):
            tg.start_soon(plain, i)
    stored = [d async for d in store.messages.find({"session_id": sid, "key": "a:assistant"})]
    assert len(stored) <= 1
    seqs = [d["seq"] async for d in store.messages.find({"session_id": sid})]
    assert len(seqs) == len(set(seqs))
    for who, status, text in acks:
        assert stored and text == stored[0]["content"], (who, status, text, acks)
    session = await store.sessions.find_one({"_id": sid})
    # A fenced commit leaves its answer parked until the next one drops it: only ever a stored copy.
    assert session is not None
    for parked in session.get("pending") or []:
        assert stored and (parked["seq"], parked["content"]) == (stored[0]["seq"], stored[0]["content"])


async def test_tenant_isolation_even_with_a_valid_lease(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    b = await turns.begin_turn("acme", sid, "a", "qa")
    assert b.lease_id
    for call in (
        turns.renew_turn("globex", sid, "a", b.lease_id),
        turns.end_turn("globex", sid, "a", b.lease_id, "x"),
        turns.begin_turn("globex", sid, "a", "qa"),
        store.append("globex", sid, "a", "tool", "x", "c", lease_id=b.lease_id),
        store.append("globex", sid, "a", "assistant", "x"),
        store.load_context("globex", sid),
    ):
        with pytest.raises(NotFound):
            await call
