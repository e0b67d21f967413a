"""Issue 8.2: end_turn racing a new begin_turn at the instant the lease expires: 200 trials in
`make soak`, 20 (the same test) in `make test`.

Two stores on two connections stand in for two servers; the ManualClock is moved to the exact
expiry instant, and both calls are then in flight at once, so which one the engine applies
first is up to the engine. Whatever the order, the invariants must hold:
- a turn is answered at most once, and whoever is told `answered: false` is the one whose
  reply is stored;
- once another lease owns the session, nothing of the old owner lands (a stale reply never
  lands after the next turn's user message).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.errors import LeaseLost
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import TurnEnd, Turns, TurnStart
from tests.helpers import stress

# 200 races (make soak) on one busy core need more than the suite's 120 s per-test cap.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]


@stress(20, 200)
async def test_expiry_race_no_violation(engine_uri: str, db_name: str, trials: int) -> None:
    clock = ManualClock()
    settings = MemorySettings()
    a_client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine_uri, tz_aware=True)
    b_client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine_uri, tz_aware=True)
    outcomes: Counter[str] = Counter()
    try:
        for i in range(trials):
            if i == 0:
                a = Turns(MemoryStore(a_client[db_name], settings, clock))
                b = Turns(MemoryStore(b_client[db_name], settings, clock))
                store = a.store
                await store.ensure_indexes()
                sid = await store.create_session("acme")
            same_turn = i % 2 == 0
            t1, text1 = f"t{i}", f"question {i}"
            t2, text2 = (t1, text1) if same_turn else (f"u{i}", f"next {i}")
            start = await a.begin_turn("acme", sid, t1, text1, lease_ms=1000)
            assert start.lease_id
            clock.advance(ms=1000)  # the exact expiry instant: free for b, still owned by a
            ended: TurnEnd | LeaseLost | None = None
            begun: TurnStart | None = None

            async def end(
                a: Turns = a, sid: str = sid, t1: str = t1, lid: str = start.lease_id, i: int = i
            ) -> None:
                nonlocal ended
                try:
                    ended = await a.end_turn("acme", sid, t1, lid, f"stale-or-not {i}")
                except LeaseLost as e:
                    ended = e

            async def begin(b: Turns = b, sid: str = sid, t2: str = t2, text2: str = text2) -> None:
                nonlocal begun
                begun = await b.begin_turn("acme", sid, t2, text2, lease_ms=1000)

            async with anyio.create_task_group() as tg:
                tg.start_soon(end)
                tg.start_soon(begin)
            assert begun is not None and ended is not None
            a_won = isinstance(ended, TurnEnd)
            outcomes["old owner first" if a_won else "new owner first"] += 1
            if same_turn and a_won:
                # b came after the commit: it must be told the stored answer, not asked again
                assert begun.answered and begun.answer == f"stale-or-not {i}" and begun.lease_id is None
            else:
                assert not begun.answered and begun.lease_id
                done = await b.end_turn("acme", sid, t2, begun.lease_id, f"fresh {i}")
                assert done.status == "inserted"
            docs = {
                d["key"]: d
                async for d in store.messages.find({"session_id": sid, "turn_id": {"$in": [t1, t2]}})
            }
            if same_turn:
                expected = f"stale-or-not {i}" if a_won else f"fresh {i}"
                assert docs[f"{t1}:assistant"]["content"] == expected
            else:
                if a_won:
                    assert docs[f"{t1}:assistant"]["seq"] < docs[f"{t2}:user"]["seq"]
                else:
                    assert f"{t1}:assistant" not in docs  # nothing of the stale owner landed
                assert docs[f"{t2}:assistant"]["content"] == f"fresh {i}"
            clock.advance(timedelta(seconds=5).total_seconds())
            # never answered twice; then keep the collection small (the engine's insert cost grows with it)
            assert sum(1 for k in docs if k.endswith(":assistant")) == (1 if same_turn else 1 + a_won)
            await store.messages.delete_many({"session_id": sid})
    finally:
        await a_client.close()
        await b_client.close()
    print(f"expiry race, one process: {trials} trials, {dict(outcomes)}")
