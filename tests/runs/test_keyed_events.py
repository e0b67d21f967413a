"""Issue 27.2: run events are unique by a derived `_id` (tenant, run, seq), runs are created by an
insert, and a checkpoint save is one update by `_id` alone; a database of the previous version
(ObjectId event ids, the unique index) keeps its index while its events remain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.errors import LeaseLost
from mongogate.runs import Runs, SaveResult
from mongogate.runs.service import LEGACY_EVENTS_UNIQUE, event_id
from mongogate.values import Doc

pytestmark = pytest.mark.anyio

Client = AsyncMongoClient[dict[str, Any]]


class Filters(monitoring.CommandListener):
    """The filter (or query) of every update and findAndModify sent."""

    def __init__(self) -> None:
        self.filters: list[Doc] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        cmd = event.command
        if event.command_name == "findAndModify":
            self.filters.append(dict(cmd["query"]))
        elif event.command_name == "update":
            self.filters.extend(dict(u["q"]) for u in cmd["updates"])

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def runs(mongo: Client, db_name: str) -> AsyncIterator[Runs]:
    r = Runs(mongo[db_name], MemorySettings(lease_ms=60_000), clock=ManualClock())
    await r.ensure_indexes()
    yield r


async def unique_indexes(r: Runs) -> list[str]:
    info = await r.events.index_information()
    return sorted(n for n, i in info.items() if i.get("unique") and n != "_id_")


async def test_events_are_keyed_and_every_write_is_by_id_alone(engine_uri: str, db_name: str) -> None:
    listener = Filters()
    async with Client(engine_uri, tz_aware=True, event_listeners=[listener]) as c:
        r = Runs(c[db_name], MemorySettings(lease_ms=60_000), clock=ManualClock())
        await r.ensure_indexes()
        assert await unique_indexes(r) == [] and r.legacy_events is False
        listener.filters.clear()
        lease = await r.acquire("acme", "job")
        assert lease.created
        assert await r.save_checkpoint("acme", "job", lease.lease_id, 1, {"a": 1}) == SaveResult(
            True, False, 1, 1
        )
        assert await r.save_checkpoint("acme", "job", lease.lease_id, 2, {"a": 2}) == SaveResult(
            True, False, 2, 2
        )
        # a retry after a lost acknowledgement, a stale version: nothing applied, no new event
        retry = await r.save_checkpoint("acme", "job", lease.lease_id, 2, {"a": 2})
        assert not retry.applied and not retry.stale
        stale = await r.save_checkpoint("acme", "job", lease.lease_id, 1, {"a": 1})
        assert stale.stale
        await r.save_checkpoint("acme", "job", lease.lease_id, 3, {"a": 3}, status="completed")
        await r.heartbeat("acme", "job", lease.lease_id)
        await r.release("acme", "job", lease.lease_id)
        with pytest.raises(LeaseLost):
            await r.save_checkpoint("acme", "job", lease.lease_id, 4, {"a": 4})
        again = await r.acquire("acme", "job")
        assert not again.created
        writes = [f for f in listener.filters if "expire_at" not in str(f) and "run_id" not in f]
        assert writes and all(list(f) == ["_id"] for f in writes), writes
        ids = [d["_id"] async for d in r.events.find({}, {"_id": 1}).sort("seq", 1)]
        assert (
            ids
            == [event_id("acme", "job", n) for n in (1, 2, 3)]
            == ["acme:job:1", "acme:job:2", "acme:job:3"]
        )
        page = await r.run_events("acme", "job")
        assert [(e.seq, e.version, e.status) for e in page.events] == [
            (1, 1, "running"),
            (2, 2, "running"),
            (3, 3, "completed"),
        ]


async def test_a_previous_version_database_keeps_its_event_index_while_its_events_remain(runs: Runs) -> None:
    lease = await runs.acquire("acme", "job")
    await runs.save_checkpoint("acme", "job", lease.lease_id, 1, {"a": 1})
    # As the previous version left it: ObjectId event ids and the unique (tenant, run_id, seq) index.
    old = [{k: v for k, v in d.items() if k != "_id"} async for d in runs.events.find({})]
    await runs.events.drop()
    await runs.events.insert_many(old)
    keys = [("tenant", 1), ("run_id", 1), ("seq", 1)]
    await runs.events.create_index(keys, unique=True, name=LEGACY_EVENTS_UNIQUE)

    await runs.ensure_indexes()
    assert await unique_indexes(runs) == [LEGACY_EVENTS_UNIQUE] and runs.legacy_events is True
    # A new acquire repairs the last event: it finds the old one (no second copy).
    await runs.release("acme", "job", lease.lease_id)
    lease = await runs.acquire("acme", "job")
    assert await runs.events.count_documents({}) == 1
    await runs.save_checkpoint("acme", "job", lease.lease_id, 2, {"a": 2})  # a derived id beside it
    assert [e.seq for e in (await runs.run_events("acme", "job")).events] == [1, 2]
    assert await runs.events.count_documents({}) == 2

    await runs.events.delete_many({"seq": 1})  # the previous version's events expire
    await runs.ensure_indexes()
    info = await runs.events.index_information()
    assert await unique_indexes(runs) == [] and runs.legacy_events is False
    assert info["run_seq"]["key"] == keys
