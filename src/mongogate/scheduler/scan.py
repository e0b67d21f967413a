"""The loop's read of the schedule: a bounded batch of due documents, and parking the orphans in it.

The scan asks for at most a batch of schedule documents in due order (`next_run_at`, on the
`due_scan` index, with a limit), so its cost follows the batch, not the fleet. A due document of
an agent no worker registers is an orphan and is parked (`next_run_at` null), so it leaves the
scan for good.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pymongo import ASCENDING

from mongogate.scheduler import documents as sd
from mongogate.scheduler import fleet
from mongogate.scheduler.partition import Partition
from mongogate.scheduler.store import ClaimStore
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: before any real date: the scan's lower bound, which also leaves out null (parked) documents
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Scan:
    """One bounded read: due documents (as read), the next due time, and where the next pass starts."""

    due: list[Doc]
    next_at: datetime | None
    full: bool


async def scan(
    store: ClaimStore,
    now: datetime,
    batch: int,
    after: tuple[datetime, object] | None,
    part: Partition | None = None,
) -> Scan:
    """At most `batch` documents in (next_run_at, _id) order, from just after `after` or the start.

    With `part`, the documents of the batch not due yet are read on (the batch is sent anyway) so
    that `next_at` is when this worker next has something to claim: its own agent's time, another
    worker's plus the takeover wait. A worker then wakes for its share, not for every due time."""
    filt: Doc = {sd.NEXT_RUN_AT: {"$gte": EPOCH}}
    if after is not None:
        at, key = after
        filt = {"$or": [{sd.NEXT_RUN_AT: {"$gt": at}}, {sd.NEXT_RUN_AT: at, sd.ID: {"$gt": key}}]}
    cursor = store.coll.find(
        filt, sd.CLAIM_FIELDS, sort=[(sd.NEXT_RUN_AT, ASCENDING), (sd.ID, ASCENDING)], limit=batch
    )
    due: list[Doc] = []
    n = 0
    next_at: datetime | None = None
    async with cursor:
        async for d in cursor:
            n += 1
            when = sd.next_run_at(d)
            if when is None:
                continue
            if when > now:
                if part is None:
                    return Scan(due, when, full=False)
                at = when if part.owns(sd.agent_key(d)) else when + timedelta(seconds=part.takeover_s)
                next_at = at if next_at is None else min(next_at, at)
                continue
            due.append(d)
    return Scan(due, next_at, full=n >= batch and len(due) == n)


async def park_orphans(store: ClaimStore, docs: list[Doc], now: datetime) -> int:
    """Park due documents of agents that no live worker registers (read fresh: a worker records
    its agents before it creates their documents, so a new agent is never mistaken for one)."""
    known = await fleet.read_fleet(store.db, now, store.settings.worker_ttl_s)
    parked = await store.park([d for d in docs if known.is_orphan(sd.agent_key(d))], now)
    if parked:
        log.warning(
            "worker %s: parked %d schedule document(s) of agents no worker registers "
            "(`mongogate schedule prune` removes them)",
            store.worker_id,
            parked,
        )
    return parked
