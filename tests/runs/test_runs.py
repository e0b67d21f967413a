"""Checkpoints: a monotonic version guard, lease ownership, and a gap-free, duplicate-free event log.

Lease expiry is driven by a ManualClock: no test waits on, or races, real time.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.errors import InvalidInput, LeaseBusy, LeaseLost, NotFound
from mongogate.runs import Runs, SaveResult

pytestmark = pytest.mark.anyio

Client = AsyncMongoClient[dict[str, Any]]


class Crash(Exception):
    """The worker dies here: the write reached the database, the acknowledgement never came back."""


def settings(**kw: Any) -> MemorySettings:
    return MemorySettings(**{"max_state_bytes": 2048, "lease_ms": 60_000, **kw})


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def runs(mongo: Client, db_name: str, clock: ManualClock) -> AsyncIterator[Runs]:
    r = Runs(mongo[db_name], settings(), clock=clock)
    await r.ensure_indexes()
    yield r


async def seqs(r: Runs, run_id: str, tenant: str = "acme") -> list[int]:
    page = await r.run_events(tenant, run_id, limit=500)
    return [e.seq for e in page.events]


async def test_first_acquire_creates_the_run_at_version_zero(runs: Runs) -> None:
    lease = await runs.acquire("acme", "r1")
    assert lease.created and lease.version == 0 and lease.status == "running"
    cp = await runs.load_checkpoint("acme", "r1")
    assert cp.version == 0 and cp.state is None and cp.lease_expires_at == lease.lease_expires_at
    await runs.release("acme", "r1", lease.lease_id)
    again = await runs.acquire("acme", "r1")
    assert not again.created and again.lease_id != lease.lease_id


async def test_stale_writers_are_refused_while_a_newer_state_stands(runs: Runs) -> None:
    lease = (await runs.acquire("acme", "r1")).lease_id
    assert await runs.save_checkpoint("acme", "r1", lease, 1, {"step": 1}) == SaveResult(True, False, 1, 1)
    assert await runs.save_checkpoint("acme", "r1", lease, 5, {"step": 5}) == SaveResult(True, False, 5, 2)
    # a lower version (a delayed write, even by the owner) is stale
    lower = await runs.save_checkpoint("acme", "r1", lease, 4, {"step": 4})
    assert lower == SaveResult(applied=False, stale=True, version=5, seq=None)
    # this lease's own retry of the version it wrote: not applied again, not stale either
    again = await runs.save_checkpoint("acme", "r1", lease, 5, {"step": 5})
    assert again == SaveResult(applied=False, stale=False, version=5, seq=2)
    cp = await runs.load_checkpoint("acme", "r1")
    assert (cp.version, cp.state) == (5, {"step": 5})
    assert await seqs(runs, "r1") == [1, 2]


async def test_an_equal_version_from_a_new_owner_is_stale(runs: Runs, clock: ManualClock) -> None:
    first = await runs.acquire("acme", "r1", lease_ms=100)
    await runs.save_checkpoint("acme", "r1", first.lease_id, 3, {"by": "first"})
    clock.advance(ms=100)  # expired exactly now
    second = (await runs.acquire("acme", "r1")).lease_id
    res = await runs.save_checkpoint("acme", "r1", second, 3, {"by": "second"})
    assert res.stale and not res.applied and res.version == 3
    assert (await runs.load_checkpoint("acme", "r1")).state == {"by": "first"}


async def test_a_writer_that_lost_its_lease_gets_lease_lost_and_writes_nothing(
    runs: Runs, clock: ManualClock
) -> None:
    old = await runs.acquire("acme", "r1", lease_ms=500)
    await runs.save_checkpoint("acme", "r1", old.lease_id, 1, {"v": 1})
    clock.advance(ms=499)
    with pytest.raises(LeaseBusy) as busy:
        await runs.acquire("acme", "r1")
    assert "run 'r1' is busy" in str(busy.value) and busy.value.ms_left == 1
    clock.advance(ms=1)
    new = (await runs.acquire("acme", "r1")).lease_id
    # even a *higher* version is refused: the old owner must stop
    with pytest.raises(LeaseLost, match="no longer owns run 'r1'"):
        await runs.save_checkpoint("acme", "r1", old.lease_id, 9, {"v": 9})
    with pytest.raises(LeaseLost):
        await runs.heartbeat("acme", "r1", old.lease_id)
    assert await runs.release("acme", "r1", old.lease_id) is False
    cp = await runs.load_checkpoint("acme", "r1")
    assert (cp.version, cp.state) == (1, {"v": 1})
    assert (await runs.save_checkpoint("acme", "r1", new, 2, {"v": 2})).applied


async def test_a_run_resumed_after_a_crash_continues_from_the_last_applied_version(
    runs: Runs, clock: ManualClock
) -> None:
    worker_a = await runs.acquire("acme", "job", lease_ms=1000)
    await runs.save_checkpoint("acme", "job", worker_a.lease_id, 1, {"done": ["a"]})
    await runs.save_checkpoint("acme", "job", worker_a.lease_id, 2, {"done": ["a", "b"]})

    def crash(point: str) -> None:
        raise Crash(point)

    runs.fault = crash
    with pytest.raises(Crash):  # version 3 is written; the worker dies before hearing so
        await runs.save_checkpoint("acme", "job", worker_a.lease_id, 3, {"done": ["a", "b", "c"]})
    runs.fault = None
    with pytest.raises(LeaseBusy) as busy:  # nobody resumes while the dead worker's lease still runs
        await runs.acquire("acme", "job")
    assert busy.value.ms_left == 1000
    clock.advance(ms=1000)

    worker_b = await runs.acquire("acme", "job")
    assert worker_b.version == 3
    cp = await runs.load_checkpoint("acme", "job")
    assert (cp.version, cp.state) == (3, {"done": ["a", "b", "c"]})
    # the event the dead worker never appended was repaired from the run document
    page = await runs.run_events("acme", "job", include_state=True)
    assert [(e.seq, e.version) for e in page.events] == [(1, 1), (2, 2), (3, 3)]
    assert page.events[-1].state == {"done": ["a", "b", "c"]}
    res = await runs.save_checkpoint("acme", "job", worker_b.lease_id, 4, {"done": ["a", "b", "c", "d"]})
    assert res == SaveResult(True, False, 4, 4)
    # the zombie wakes up and retries: refused, the resumed run stands
    with pytest.raises(LeaseLost):
        await runs.save_checkpoint("acme", "job", worker_a.lease_id, 3, {"done": ["a", "b", "c"]})
    assert await seqs(runs, "job") == [1, 2, 3, 4]
    assert (await runs.load_checkpoint("acme", "job")).version == 4


async def test_event_seqs_have_no_duplicates_under_concurrent_writers(engine_uri: str, db_name: str) -> None:
    clients: list[Client] = [AsyncMongoClient(engine_uri, tz_aware=True) for _ in range(4)]
    try:
        handles = [Runs(c[db_name], settings()) for c in clients]
        await handles[0].ensure_indexes()
        owner = (await handles[0].acquire("acme", "race")).lease_id
        versions = list(range(1, 25))
        random.Random(7).shuffle(versions)
        results: list[tuple[int, SaveResult]] = []
        lost: list[int] = []

        async def write(i: int, version: int) -> None:
            r = handles[i % len(handles)]
            results.append((version, await r.save_checkpoint("acme", "race", owner, version, {"v": version})))

        async def intrude(i: int) -> None:
            try:
                await handles[i % len(handles)].save_checkpoint("acme", "race", f"intruder{i}", 99, {"v": -1})
            except LeaseLost:
                lost.append(i)

        async with anyio.create_task_group() as tg:
            for i, v in enumerate(versions):
                tg.start_soon(write, i, v)
            for i in range(4):
                tg.start_soon(intrude, i)

        assert sorted(lost) == [0, 1, 2, 3]
        applied = sorted((r.seq, v) for v, r in results if r.applied)
        assert applied and all(r.stale for _, r in results if not r.applied)
        page = await handles[0].run_events("acme", "race", limit=100)
        events = [(e.seq, e.version) for e in page.events]
        assert events == applied  # one event per applied checkpoint, same seq
        assert [s for s, _ in events] == list(range(1, len(events) + 1))  # no duplicates, no gaps
        assert [v for _, v in events] == sorted(v for _, v in events)  # seq order is version order
        assert (await handles[0].load_checkpoint("acme", "race")).version == 24
    finally:
        for c in clients:
            await c.close()


async def test_other_tenants_runs_look_missing(runs: Runs) -> None:
    lease = (await runs.acquire("acme", "r1")).lease_id
    await runs.save_checkpoint("acme", "r1", lease, 1, {"secret": True})
    with pytest.raises(NotFound) as theirs:
        await runs.load_checkpoint("evil", "r1")
    with pytest.raises(NotFound) as missing:
        await runs.load_checkpoint("acme", "nope")
    assert str(theirs.value).replace("r1", "X") == str(missing.value).replace("nope", "X")
    with pytest.raises(NotFound):
        await runs.run_events("evil", "r1")
    with pytest.raises(NotFound):
        await runs.save_checkpoint("evil", "r1", lease, 2, {})
    # the same run id in another tenant is another run altogether
    other = await runs.acquire("evil", "r1")
    assert other.created and other.version == 0
    assert (await runs.load_checkpoint("acme", "r1")).state == {"secret": True}


async def test_state_size_status_and_version_are_checked_before_writing(runs: Runs) -> None:
    lease = (await runs.acquire("acme", "r1")).lease_id
    with pytest.raises(InvalidInput, match=r"bytes as BSON; the maximum is 2048 \(memory.max_state_bytes\)"):
        await runs.save_checkpoint("acme", "r1", lease, 1, {"blob": "x" * 3000})
    with pytest.raises(InvalidInput, match="status must be one of running, paused, completed, failed"):
        await runs.save_checkpoint("acme", "r1", lease, 1, {}, "done")
    for bad in (0, -1, True, "2", 2**63):
        with pytest.raises(InvalidInput, match="version must be an integer"):
            await runs.save_checkpoint("acme", "r1", lease, bad, {})
    with pytest.raises(InvalidInput, match="must be non-empty strings that do not start with '\\$'"):
        await runs.save_checkpoint("acme", "r1", lease, 1, {"a": [{"$where": "1"}]})
    with pytest.raises(InvalidInput, match="cannot be stored"):
        await runs.save_checkpoint("acme", "r1", lease, 1, {"big": 2**70})
    with pytest.raises(InvalidInput, match="may not contain ':'"):
        await runs.acquire("acme", "a:b")
    with pytest.raises(InvalidInput, match="lease_ms"):
        await runs.acquire("acme", "r2", lease_ms=10)
    assert (await runs.load_checkpoint("acme", "r1")).version == 0
    assert await seqs(runs, "r1") == []


async def test_heartbeat_and_release(runs: Runs, clock: ManualClock) -> None:
    lease = await runs.acquire("acme", "r1", lease_ms=400)
    for i in range(1, 4):  # kept alive past the first expiry
        clock.advance(ms=399)
        until = await runs.heartbeat("acme", "r1", lease.lease_id, 400)
        assert until == lease.lease_expires_at + timedelta(milliseconds=399 * i)
    with pytest.raises(LeaseBusy):
        await runs.acquire("acme", "r1")
    assert await runs.release("acme", "r1", "someone-else") is False
    assert await runs.release("acme", "r1", lease.lease_id) is True
    assert (await runs.load_checkpoint("acme", "r1")).lease_expires_at is None
    await runs.acquire("acme", "r1")  # free at once after release
    with pytest.raises(NotFound):
        await runs.release("acme", "missing", lease.lease_id)


async def test_completed_runs_expire_with_their_events(mongo: Client, db_name: str) -> None:
    r = Runs(mongo[db_name], settings(completed_run_ttl_s=3600))
    await r.ensure_indexes()
    ttl = {name: ix.get("expireAfterSeconds") for name, ix in (await r.runs.index_information()).items()}
    assert ttl.get("expire_at_ttl") == 0
    lease = (await r.acquire("acme", "r1")).lease_id
    await r.save_checkpoint("acme", "r1", lease, 1, {"n": 1}, "running")
    doc = await r.runs.find_one({"run_id": "r1"})
    assert doc is not None and doc["expire_at"] is None
    await r.save_checkpoint("acme", "r1", lease, 2, {"n": 2}, "completed")
    doc = await r.runs.find_one({"run_id": "r1"})
    assert doc is not None and doc["status"] == "completed"
    delay = (doc["expire_at"] - doc["updated_at"]).total_seconds()
    assert delay == 3600
    assert {e["expire_at"] for e in await r.events.find({"run_id": "r1"}).to_list()} == {doc["expire_at"]}
    # reopened (e.g. a retry after completion): nothing expires any more
    await r.save_checkpoint("acme", "r1", lease, 3, {"n": 3}, "running")
    assert {e["expire_at"] for e in await r.events.find({"run_id": "r1"}).to_list()} == {None}


async def test_no_ttl_index_unless_configured(runs: Runs) -> None:
    assert "expire_at_ttl" not in await runs.runs.index_information()
    lease = (await runs.acquire("acme", "r1")).lease_id
    await runs.save_checkpoint("acme", "r1", lease, 1, {}, "completed")
    doc = await runs.runs.find_one({"run_id": "r1"})
    assert doc is not None and doc["expire_at"] is None and doc["status"] == "completed"


async def test_run_events_pages_in_seq_order(runs: Runs) -> None:
    lease = (await runs.acquire("acme", "r1")).lease_id
    for v in range(1, 6):
        await runs.save_checkpoint("acme", "r1", lease, v * 10, {"v": v}, "paused" if v == 3 else "running")
    page = await runs.run_events("acme", "r1", limit=2)
    assert [e.seq for e in page.events] == [1, 2] and page.more and page.events[0].state is None
    page = await runs.run_events("acme", "r1", after_seq=2, limit=2, include_state=True)
    assert [(e.seq, e.version, e.status, e.state) for e in page.events] == [
        (3, 30, "paused", {"v": 3}),
        (4, 40, "running", {"v": 4}),
    ]
    page = await runs.run_events("acme", "r1", after_seq=4)
    assert [e.seq for e in page.events] == [5] and not page.more
    assert (await runs.run_events("acme", "r1", after_seq=5)).events == []
    with pytest.raises(InvalidInput, match="limit must be an integer from 1 to 500"):
        await runs.run_events("acme", "r1", limit=0)
    for bad in (2**63, -1, True, "3"):  # beyond int64 the server could not even compare it
        with pytest.raises(InvalidInput, match="after_seq must be an integer from 0 to 9223372036854775807"):
            await runs.run_events("acme", "r1", after_seq=bad)
    assert (await runs.run_events("acme", "r1", after_seq=2**63 - 1)).events == []
