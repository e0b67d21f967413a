"""A memory's expiry moved on the version read (`set_expiries`, LangGraph's TTL refresh) and the
expired memories found (`expired_ids`, its sweep): only in the caller's scope, never over a change
made since the read, and seen by recall's in-process index through the revision it announces."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mongogate.clock import ManualClock
from mongogate.recall import MemoryScope, expired_ids, set_expiries
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

DAY = 24 * 3600.0


async def expiry(ltm: LongTermMemory, mid: str) -> object:
    doc = await ltm.memories.find_one({"_id": mid}, {"expires_at": 1})
    assert doc is not None
    return doc.get("expires_at")


async def test_a_refresh_applies_only_to_the_version_read_in_the_callers_scope(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    scope = MemoryScope("acme")
    first = await ltm.remember(scope, "the parking code is 4711", key="code", ttl_days=1)
    second = await ltm.remember(scope, "the parking code is 9000", key="code", ttl_days=2)
    assert second.id == first.id and second.version == first.version + 1
    set_by_change = await expiry(ltm, first.id)
    later = clock.now() + timedelta(days=5)

    assert await set_expiries(ltm, scope, [(first.id, first.version, later)]) == []  # changed since
    assert await set_expiries(ltm, MemoryScope("other"), [(second.id, second.version, later)]) == []
    assert await expiry(ltm, first.id) == set_by_change
    assert await set_expiries(ltm, scope, [(second.id, second.version, later)]) == [second.id]
    assert await expiry(ltm, first.id) == later


async def test_recall_sees_a_moved_expiry_and_the_sweep_finds_what_expired(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    scope = MemoryScope("acme")
    kept = await ltm.remember(scope, "the office moved to Lisbon", key="office", ttl_days=1)
    gone = await ltm.remember(scope, "the office cat is called Bruno", key="cat", ttl_days=1)
    assert {m.id for m in (await ltm.recall(scope, "office", min_score=0)).memories} == {kept.id, gone.id}
    # the in-process index holds both; a refresh of one moves its expiry there too
    await set_expiries(ltm, scope, [(kept.id, kept.version, clock.now() + timedelta(days=3))])
    clock.advance(2 * DAY)
    assert [m.id for m in (await ltm.recall(scope, "office", min_score=0)).memories] == [kept.id]
    assert await expired_ids(ltm, scope, clock.now(), 10) == [gone.id]
    assert await expired_ids(ltm, MemoryScope("other"), clock.now(), 10) == []
    clock.advance(2 * DAY)
    assert sorted(await expired_ids(ltm, scope, clock.now(), 10)) == sorted([kept.id, gone.id])
    assert len(await expired_ids(ltm, scope, clock.now(), 1)) == 1
