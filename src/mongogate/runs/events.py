"""Reading a run's event log a page at a time, within the response byte cap."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongogate.config import MemorySettings
from mongogate.errors import StorageError
from mongogate.runs import documents as rd
from mongogate.runs.model import (
    EventPage,
    RunEvent,
    check_after_seq,
    check_limit,
    event_shape,
    run_key,
    run_not_found,
)
from mongogate.values import ByteBudget, Doc, reply_batch, wire_bytes


class RunCollections(Protocol):
    """What reading events needs of `Runs` (`runs/service.py` calls in here: a shape, not an import)."""

    @property
    def db(self) -> AsyncDatabase[Doc]: ...
    @property
    def runs(self) -> AsyncCollection[Doc]: ...
    @property
    def events(self) -> AsyncCollection[Doc]: ...
    @property
    def settings(self) -> MemorySettings: ...


async def read_events(
    runs: RunCollections,
    tenant: str,
    rid: str,
    after_seq: object = None,
    limit: object = None,
    *,
    include_state: bool = False,
    max_bytes: int | None = None,
) -> EventPage:
    """Events in seq order after `after_seq`; `more` says another page exists.

    With `max_bytes`, the page ends at the response byte cap (`truncated`, and `more`: page
    on with the last seq returned), read in replies no larger than the cap. The first event
    always fits (`memory.max_state_bytes` is checked as JSON when saved and the cap holds
    it); one stored before the limits were lowered comes without its state (`truncated`).
    """
    n = check_limit(limit)
    after = check_after_seq(after_seq)
    query: Doc = {rd.TENANT: tenant, rd.RUN_ID: rid}
    if after is not None:
        query[rd.SEQ] = {"$gt": after}
    projection: Doc = {rd.SEQ: 1, rd.VERSION: 1, rd.STATUS: 1, rd.AT: 1, rd.ID: 0}
    if include_state:
        projection[rd.STATE] = 1
    budget = ByteBudget(max_bytes) if max_bytes is not None else None
    largest = runs.settings.max_state_bytes + 256 if include_state else 256
    batch = reply_batch(largest, n + 1, wire_bytes(runs.db))
    events: list[RunEvent] = []
    more = truncated = False
    try:
        cursor = runs.events.find(
            query, projection, sort=[(rd.SEQ, ASCENDING)], limit=n + 1, batch_size=batch
        )
        try:
            async for d in cursor:
                if len(events) == n:
                    more = True
                    break
                event = RunEvent.from_doc(d)
                if budget is not None and not budget.take(event_shape(event)):
                    if events:  # the page ends here; the next one starts with this event
                        more = truncated = True
                        break
                    event = replace(event, state=None)  # alone too large: without its state
                    truncated = True
                events.append(event)
        finally:
            await cursor.close()
        if not events:
            match = {rd.ID: run_key(tenant, rid), rd.TENANT: tenant}
            if await runs.runs.find_one(match, {rd.ID: 1}) is None:
                raise run_not_found(rid)
    except PyMongoError as e:
        raise StorageError(f"could not read the events of run {rid!r}") from e
    return EventPage(events=events, more=more, truncated=truncated)
