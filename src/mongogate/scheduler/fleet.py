"""Which agents the fleet registers: one small document per worker, so orphans can be told apart.

A worker writes ``{_id: worker_id, agents: [keys], started_at, seen_at}`` before it creates any
schedule document, and refreshes `seen_at` while it runs. An agent is *registered* when a worker
seen within `scheduler.worker_ttl_s` lists it; when no worker is alive (the fleet is stopped),
the last fleet that ran counts (workers seen within `worker_ttl_s` of the newest one), so a
stopped fleet does not turn every agent into an orphan. A schedule document of an agent nobody
registers is an *orphan*: the loop parks it (it is never claimed again) and `mongogate schedule
prune` removes it. This collection stays as small as the number of workers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pymongo import DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import StorageError
from mongogate.values import Doc

WORKERS_COLLECTION = "agent_workers"
#: worker documents not seen for this long are deleted when a worker starts
FORGET_AFTER = timedelta(days=7)
#: worker documents read to decide what is registered (the newest first)
MAX_WORKERS_READ = 1000


@dataclass(frozen=True)
class Fleet:
    """What the worker documents say: the registered agent keys, and whether any worker is alive."""

    registered: frozenset[str]
    live_workers: int
    #: False when no worker has ever registered in this database: nothing can be called an orphan
    known: bool
    #: ticks claimed per second by the live workers (each as measured at its last heartbeat)
    run_per_s: float = 0.0
    #: the live workers that run the claim loop, each with when it was last seen (what the
    #: claim partition splits agents over)
    claimers: tuple[tuple[str, datetime], ...] = ()

    def is_orphan(self, key: str) -> bool:
        return self.known and key not in self.registered


def workers(db: AsyncDatabase[Doc]) -> AsyncCollection[Doc]:
    return db[WORKERS_COLLECTION]


async def announce(db: AsyncDatabase[Doc], worker_id: str, keys: Iterable[str], now: datetime) -> None:
    """Record this worker and its agents (before their schedule documents exist); forget old workers."""
    coll = workers(db)
    try:
        await coll.delete_many({"seen_at": {"$lt": now - FORGET_AFTER}})
        await coll.update_one(
            {"_id": worker_id},
            {"$set": {"agents": sorted(keys), "started_at": now, "seen_at": now}},
            upsert=True,
        )
    except PyMongoError as e:
        raise StorageError(f"could not record worker {worker_id!r}: {e}") from e


async def heartbeat(
    db: AsyncDatabase[Doc], worker_id: str, now: datetime, ticks_per_s: float | None = None
) -> None:
    """Refresh `seen_at` (and the rate this worker claimed ticks at since its last heartbeat), by `_id`."""
    sets: Doc = {"seen_at": now}
    if ticks_per_s is not None:
        sets["ticks_per_s"] = round(ticks_per_s, 3)
    try:
        await workers(db).update_one({"_id": worker_id}, {"$set": sets})
    except PyMongoError as e:
        raise StorageError(f"could not refresh worker {worker_id!r}: {e}") from e


async def leave(db: AsyncDatabase[Doc], worker_id: str) -> None:
    """A stopping worker stops claiming: the others take its share of the agents at their next pass."""
    try:
        await workers(db).update_one({"_id": worker_id}, {"$unset": {"ticks_per_s": ""}})
    except PyMongoError as e:
        raise StorageError(f"could not record worker {worker_id!r}: {e}") from e


async def read_fleet(db: AsyncDatabase[Doc], now: datetime, ttl_s: float) -> Fleet:
    ttl = timedelta(seconds=ttl_s)
    try:
        docs = (
            await workers(db)
            .find(
                {},
                {"agents": 1, "seen_at": 1, "ticks_per_s": 1},
                sort=[("seen_at", DESCENDING)],
                limit=MAX_WORKERS_READ,
            )
            .to_list()
        )
    except PyMongoError as e:
        raise StorageError(f"could not read the workers: {e}") from e
    seen = [(as_utc(d["seen_at"]), d) for d in docs if isinstance(d.get("seen_at"), datetime)]
    if not seen:
        return Fleet(frozenset(), 0, known=False)
    live = [d for at, d in seen if at >= now - ttl]
    newest = seen[0][0]
    counted = live or [d for at, d in seen if at >= newest - ttl]
    keys = frozenset(k for d in counted for k in d.get("agents") or () if isinstance(k, str))
    rate = sum(float(d.get("ticks_per_s") or 0.0) for d in live)
    # a worker that runs the claim loop heartbeats a rate; one that only registered does not
    claimers = tuple((str(d["_id"]), at) for at, d in seen if at >= now - ttl and "ticks_per_s" in d)
    return Fleet(keys, len(live), known=True, run_per_s=rate, claimers=claimers)


async def last_seen_with(db: AsyncDatabase[Doc], key: str) -> datetime | None:
    """When a worker that registers agent `key` was last seen (None: no worker lists it)."""
    try:
        doc = await workers(db).find_one({"agents": key}, {"seen_at": 1}, sort=[("seen_at", DESCENDING)])
    except PyMongoError as e:
        raise StorageError(f"could not read the workers: {e}") from e
    seen = doc.get("seen_at") if doc else None
    return as_utc(seen) if isinstance(seen, datetime) else None
