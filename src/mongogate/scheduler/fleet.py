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
from mongogate.scheduler import documents as sd
from mongogate.scheduler.documents import WORKERS_COLLECTION, WorkerDoc
from mongogate.values import Doc

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


@dataclass(frozen=True)
class Seen:
    """A worker document as read: who, when last seen, its agents, its claim rate (None: it only
    registered, or stopped claiming)."""

    worker_id: str
    seen_at: datetime
    agents: tuple[str, ...]
    ticks_per_s: float | None

    @classmethod
    def from_doc(cls, d: Doc) -> Seen | None:
        """None for a document without a `seen_at` date."""
        at = d.get(sd.SEEN_AT)
        if not isinstance(at, datetime):
            return None
        rate = d.get(sd.TICKS_PER_S)
        agents = tuple(k for k in d.get(sd.AGENTS) or () if isinstance(k, str))
        return cls(str(d[sd.ID]), as_utc(at), agents, None if sd.TICKS_PER_S not in d else float(rate or 0.0))


def workers(db: AsyncDatabase[Doc]) -> AsyncCollection[Doc]:
    return db[WORKERS_COLLECTION]


async def announce(db: AsyncDatabase[Doc], worker_id: str, keys: Iterable[str], now: datetime) -> None:
    """Record this worker and its agents (before their schedule documents exist); forget old workers."""
    coll = workers(db)
    try:
        await coll.delete_many({sd.SEEN_AT: {"$lt": now - FORGET_AFTER}})
        doc: WorkerDoc = {"agents": sorted(keys), "started_at": now, "seen_at": now}
        await coll.update_one({sd.ID: worker_id}, {"$set": doc}, upsert=True)
    except PyMongoError as e:
        raise StorageError(f"could not record worker {worker_id!r}: {e}") from e


async def heartbeat(
    db: AsyncDatabase[Doc], worker_id: str, now: datetime, ticks_per_s: float | None = None
) -> None:
    """Refresh `seen_at` (and the rate this worker claimed ticks at since its last heartbeat), by `_id`."""
    sets: Doc = {sd.SEEN_AT: now}
    if ticks_per_s is not None:
        sets[sd.TICKS_PER_S] = round(ticks_per_s, 3)
    try:
        await workers(db).update_one({sd.ID: worker_id}, {"$set": sets})
    except PyMongoError as e:
        raise StorageError(f"could not refresh worker {worker_id!r}: {e}") from e


async def leave(db: AsyncDatabase[Doc], worker_id: str) -> None:
    """A stopping worker stops claiming: the others take its share of the agents at their next pass."""
    try:
        await workers(db).update_one({sd.ID: worker_id}, {"$unset": {sd.TICKS_PER_S: ""}})
    except PyMongoError as e:
        raise StorageError(f"could not record worker {worker_id!r}: {e}") from e


async def read_fleet(db: AsyncDatabase[Doc], now: datetime, ttl_s: float) -> Fleet:
    ttl = timedelta(seconds=ttl_s)
    seen = [w for d in await _worker_docs(db) if (w := Seen.from_doc(d)) is not None]
    if not seen:
        return Fleet(frozenset(), 0, known=False)
    live = [w for w in seen if w.seen_at >= now - ttl]
    newest = seen[0].seen_at
    counted = live or [w for w in seen if w.seen_at >= newest - ttl]
    keys = frozenset(k for w in counted for k in w.agents)
    rate = sum(w.ticks_per_s or 0.0 for w in live)
    # a worker that runs the claim loop heartbeats a rate; one that only registered does not
    claimers = tuple((w.worker_id, w.seen_at) for w in live if w.ticks_per_s is not None)
    return Fleet(keys, len(live), known=True, run_per_s=rate, claimers=claimers)


async def _worker_docs(db: AsyncDatabase[Doc]) -> list[Doc]:
    """The workers' documents, the most recently seen first (at most `MAX_WORKERS_READ`)."""
    try:
        return (
            await workers(db)
            .find(
                {},
                {sd.AGENTS: 1, sd.SEEN_AT: 1, sd.TICKS_PER_S: 1},
                sort=[(sd.SEEN_AT, DESCENDING)],
                limit=MAX_WORKERS_READ,
            )
            .to_list()
        )
    except PyMongoError as e:
        raise StorageError(f"could not read the workers: {e}") from e


async def last_seen_with(db: AsyncDatabase[Doc], key: str) -> datetime | None:
    """When a worker that registers agent `key` was last seen (None: no worker lists it)."""
    try:
        doc = await workers(db).find_one({sd.AGENTS: key}, {sd.SEEN_AT: 1}, sort=[(sd.SEEN_AT, DESCENDING)])
    except PyMongoError as e:
        raise StorageError(f"could not read the workers: {e}") from e
    seen = doc.get(sd.SEEN_AT) if doc else None
    return as_utc(seen) if isinstance(seen, datetime) else None
