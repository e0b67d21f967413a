"""Managing a running fleet through the database: pause, resume, run now, remove, prune.

Every action is one write to the schedule document, so every worker sees it at its next scan,
and none races a claim: a claim matches the `next_run_at` its worker read, and every action
here changes `next_run_at` (pause parks it at null, resume and run-now set it), so a claim
that read the old value matches nothing. A tick already claimed keeps running and reports
its outcome; no new one is claimed while paused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongogate.clock import iso_z
from mongogate.errors import InvalidInput, NotFound, StorageError
from mongogate.scheduler import documents as sd
from mongogate.scheduler.documents import SCHEDULE_COLLECTION
from mongogate.scheduler.fleet import Fleet, last_seen_with, read_fleet
from mongogate.scheduler.slots import live_and_expired
from mongogate.values import Doc

#: documents one `prune` deletes at most (run it again for more)
PRUNE_MAX = 100_000


@dataclass(frozen=True)
class Pruned:
    removed: list[str]
    #: orphans left alone because a claimed tick of theirs is still in flight
    busy: list[str]


class Schedules:
    """The operator's side of the schedule (`mongogate schedule ...`)."""

    def __init__(self, db: AsyncDatabase[Doc], worker_ttl_s: float) -> None:
        self.db = db
        self.coll: AsyncCollection[Doc] = db[SCHEDULE_COLLECTION]
        self.worker_ttl_s = worker_ttl_s

    async def _update(self, key: str, filt: Doc, update: Doc, what: str) -> Doc:
        try:
            doc = await self.coll.find_one_and_update(
                {sd.ID: key, **filt}, update, return_document=ReturnDocument.AFTER
            )
        except PyMongoError as e:
            raise StorageError(f"could not {what} agent {key!r}: {e}") from e
        if doc is None:
            await self._must_exist(key, what)
        return doc or {}

    async def _must_exist(self, key: str, what: str) -> None:
        try:
            found = await self.coll.count_documents({sd.ID: key}, limit=1)
        except PyMongoError as e:
            raise StorageError(f"could not {what} agent {key!r}: {e}") from e
        if not found:
            raise NotFound(
                f"no schedule for agent {key!r} in this database "
                "(`mongogate schedule list` shows the agents that have one)"
            )

    async def pause(self, key: str, now: datetime, by: str) -> bool:
        """Stop claiming new ticks (an in-flight one finishes). False if it was already paused."""
        doc = await self._update(
            key,
            {sd.PAUSED: {"$ne": True}},
            {"$set": {sd.PAUSED: True, sd.PAUSED_AT: now, sd.PAUSED_BY: by, sd.NEXT_RUN_AT: None}},
            "pause",
        )
        return bool(doc)

    async def resume(self, key: str, now: datetime) -> bool:
        """Claim again from the slot it stopped at: missed slots follow the agent's misfire rules
        (coalesced into one run, or skipped past the misfire grace). False if it was not paused."""
        try:
            current = await self.coll.find_one({sd.ID: key}, {sd.DUE_AT: 1, sd.PAUSED: 1, sd.ORPHANED_AT: 1})
        except PyMongoError as e:
            raise StorageError(f"could not resume agent {key!r}: {e}") from e
        if current is None:
            await self._must_exist(key, "resume")
            return False
        if not current.get(sd.PAUSED):
            return False
        # an orphan stays parked (nothing would run it); a one-off that is done stays done
        nxt = None if current.get(sd.ORPHANED_AT) is not None else current.get(sd.DUE_AT)
        doc = await self._update(
            key,
            {sd.PAUSED: True, sd.DUE_AT: current.get(sd.DUE_AT)},
            {
                "$set": {sd.NEXT_RUN_AT: nxt, sd.PAUSED: False, sd.RESUMED_AT: now},
                "$unset": {sd.PAUSED_AT: "", sd.PAUSED_BY: ""},
            },
            "resume",
        )
        return bool(doc)

    async def run_now(self, key: str, now: datetime, by: str) -> None:
        """One extra tick as soon as a worker sees it (paused or not); the agent's own slots stay."""
        fleet = await read_fleet(self.db, now, self.worker_ttl_s)
        if fleet.is_orphan(key):
            await self._must_exist(key, "trigger")
            raise InvalidInput(
                f"agent {key!r} is orphaned (no worker registers it): nothing would run it; "
                "`mongogate schedule prune` removes it"
            )
        request: sd.RunNowDoc = {"at": now, "by": by}
        doc = await self._update(
            key, {sd.ORPHANED_AT: None}, {"$set": {sd.NEXT_RUN_AT: now, sd.RUN_NOW: request}}, "trigger"
        )
        if not doc:
            raise InvalidInput(
                f"agent {key!r} is orphaned (no worker registers it): nothing would run it; "
                "`mongogate schedule prune` removes it"
            )

    async def remove(self, key: str, now: datetime, force: bool = False) -> None:
        """Delete one schedule document. An agent a live worker still registers would get a fresh
        one at that worker's next start, so that needs `force` (pause it to stop it instead)."""
        fleet = await read_fleet(self.db, now, self.worker_ttl_s)
        if key in fleet.registered and fleet.live_workers and not force:
            seen = await last_seen_with(self.db, key)
            ago = (
                f"{max((now - seen).total_seconds(), 0.0):.0f} s ago ({iso_z(seen, 'seconds')})"
                if seen
                else "recently"
            )
            raise InvalidInput(
                f"agent {key!r} is registered by a worker last seen {ago}: a worker counts as running "
                f"until it is not seen for scheduler.worker_ttl_s ({self.worker_ttl_s:g} s), and it would "
                "re-create the schedule at its next start. Pause it (`mongogate schedule pause`), or "
                "remove it from the code first; --force removes the document anyway"
            )
        try:
            res = await self.coll.delete_one({sd.ID: key})
        except PyMongoError as e:
            raise StorageError(f"could not remove agent {key!r}: {e}") from e
        if res.deleted_count == 0:
            raise NotFound(f"no schedule for agent {key!r} in this database")

    async def prune(self, now: datetime, dry_run: bool = False) -> Pruned:
        """Remove the schedule documents of agents no worker registers (orphans); one whose claimed
        tick is still in flight is left for a later prune."""
        fleet = await read_fleet(self.db, now, self.worker_ttl_s)
        try:
            parked, unparked, busy = await self._orphans(fleet, now)
            if unparked and not dry_run:  # a worker may have started since: read the fleet again
                again = await read_fleet(self.db, now, self.worker_ttl_s)
                unparked = [k for k in unparked if again.is_orphan(k)]
            if not dry_run:
                parked, unparked = await self._delete_orphans(parked, unparked)
        except PyMongoError as e:
            raise StorageError(f"could not prune the schedule: {e}") from e
        return Pruned(sorted(parked + unparked), sorted(busy))

    async def _orphans(self, fleet: Fleet, now: datetime) -> tuple[list[str], list[str], list[str]]:
        """The orphans' ids (at most `PRUNE_MAX`): parked (orphaned_at set by a worker's loop),
        unparked (orphans by the fleet documents alone), and busy (a claimed tick in flight)."""
        parked: list[str] = []
        unparked: list[str] = []
        busy: list[str] = []
        async for d in self.coll.find({}, {sd.AGENT_KEY: 1, sd.OPEN: 1, sd.ORPHANED_AT: 1}):
            was_parked = d.get(sd.ORPHANED_AT) is not None
            if not (was_parked or fleet.is_orphan(sd.agent_key(d))):
                continue
            live, _ = live_and_expired(d, now)
            (busy if live else parked if was_parked else unparked).append(str(d[sd.ID]))
            if len(parked) + len(unparked) >= PRUNE_MAX:
                break
        return parked, unparked, busy

    async def _delete_orphans(self, parked: list[str], unparked: list[str]) -> tuple[list[str], list[str]]:
        """Delete the orphans not claimed or registered since they were read; returns those deleted.

        A worker that registers an agent again un-parks it (unsets orphaned_at): a parked document
        is deleted only while still parked, never after that worker read it."""
        for ids, still in ((parked, {"$ne": None}), (unparked, None)):
            for i in range(0, len(ids), 1000):
                await self.coll.delete_many(
                    {sd.ID: {"$in": ids[i : i + 1000]}, sd.OPEN: {"$in": [None, {}]}, sd.ORPHANED_AT: still}
                )
        # the report says what was deleted: a document claimed or registered since it was read stays
        candidates = parked + unparked
        left: set[str] = set()
        for i in range(0, len(candidates), 1000):
            batch = {sd.ID: {"$in": candidates[i : i + 1000]}}
            left |= {str(d[sd.ID]) async for d in self.coll.find(batch, {sd.ID: 1})}
        return [k for k in parked if k not in left], [k for k in unparked if k not in left]
