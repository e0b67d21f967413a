"""Resumable runs: one checkpoint document per run, guarded by a lease and a monotonic version.

A stale or delayed writer can never roll a run backward: the checkpoint update matches only
while the writer's lease owns the run and the stored version is lower. Each applied checkpoint
takes its event number from that same update and appends one event to `run_events`, whose
`_id` is (tenant, run_id, seq) (`event_id`), which makes the log append-only and gap-free per
writer. Every write is addressed by `_id` alone, its conditions inside an update pipeline, and
"create if absent" is an insert that treats a duplicate key as "already there": both stay flat in
the collection's size on the embedded engine (docs/decisions/turn-write-path.md). Every expiry
decision reads the injected clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta

import bson
from bson.errors import InvalidDocument
from pymongo import ASCENDING, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate import leases
from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.config import MemorySettings
from mongogate.errors import InvalidInput, LeaseBusy, LeaseLost, StorageError
from mongogate.indexes import IndexModel, ensure_indexes, held_indexes
from mongogate.keyed import keyed_id, retire_unique_once
from mongogate.memory import check_id
from mongogate.migrations import RUN_EVENT_IDS, Migrations
from mongogate.runs import documents as rd
from mongogate.runs.documents import RunDoc, RunEventDoc
from mongogate.runs.events import read_events
from mongogate.runs.model import (
    Checkpoint,
    EventPage,
    RunLease,
    SaveResult,
    check_state_keys,
    check_status,
    check_version,
    run_key,
    run_not_found,
)
from mongogate.values import ByteBudget, Doc, json_size

#: the previous version's unique (tenant, run_id, seq) index of `run_events`
LEGACY_EVENTS_UNIQUE = "run_seq_unique"
#: what a checkpoint save returns: whether it applied (`save_nonce`), and the seq and status
SAVE_FIELDS = {rd.NEXT_SEQ: 1, rd.SAVE_NONCE: 1, rd.STATUS_BEFORE: 1}


def event_id(tenant: str, rid: str, seq: int) -> str:
    """An event's `_id`: `<tenant>:<run_id>:<seq>` (run ids hold no ':', a seq is a number)."""
    return keyed_id(run_key(tenant, rid), seq)


def save_update(tenant: str, lid: str, ver: int, values: Doc, now: datetime, nonce: str) -> list[Doc]:
    """A checkpoint save as one pipeline update by `_id`: while `lid` owns the run and the stored
    version is lower, set `version`, `values` (state, status, expire_at), who wrote it and when,
    and take the next event seq; `status_before` keeps the status it replaced, `save_nonce` says
    whether this call's save is the one in the returned document. Otherwise nothing changes."""
    ok = {
        "$and": [
            leases.same(rd.TENANT, tenant),
            leases.same(rd.LOCKED_BY, lid),
            {"$lt": [{"$ifNull": [f"${rd.VERSION}", 0]}, ver]},
        ]
    }
    lit = leases.literal
    fields = {
        rd.VERSION: lit(ver),
        **{k: lit(v) for k, v in values.items()},
        rd.STATUS_BEFORE: leases.field_or_null(rd.STATUS),
        rd.UPDATED_AT: lit(now),
        rd.WRITTEN_BY: lit(lid),
        rd.NEXT_SEQ: {"$add": [{"$ifNull": [f"${rd.NEXT_SEQ}", 0]}, 1]},
        rd.SAVE_NONCE: lit(nonce),
    }
    return [leases.keep_unless(ok, fields)]


class Runs:
    def __init__(
        self, db: AsyncDatabase[Doc], settings: MemorySettings, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self.runs: AsyncCollection[Doc] = db[rd.RUNS_COLLECTION]
        self.events: AsyncCollection[Doc] = db[rd.EVENTS_COLLECTION]
        #: test seam: called at named points between a write and its acknowledgement
        self.fault: Callable[[str], None] | None = None
        #: events with ObjectId `_id`s (the previous version's) may exist; `ensure_indexes` settles it
        self.legacy_events = True

    async def ensure_indexes(self, migrations: Migrations | None = None) -> None:
        """``migrations``: as `MemoryStore.ensure_indexes`'s (mongogate/migrations.py)."""
        migrations = migrations or Migrations(self.db)
        try:
            runs = [IndexModel([(rd.TENANT, ASCENDING), (rd.STATUS, ASCENDING)], name="tenant_status")]
            events: list[IndexModel] = []
            # Uniqueness is the derived `_id` (`event_id`). The previous version's unique index
            # serves reads while its events remain; then a plain index on the same fields does.
            held = await held_indexes(self.events)
            self.legacy_events = await retire_unique_once(
                self.events, LEGACY_EVENTS_UNIQUE, held, migrations, RUN_EVENT_IDS
            )
            if not self.legacy_events:
                seq = [(rd.TENANT, ASCENDING), (rd.RUN_ID, ASCENDING), (rd.SEQ, ASCENDING)]
                events.append(IndexModel(seq, name="run_seq"))
            if self.settings.completed_run_ttl_s is not None:
                # expire_at is set only on completed runs (and their events); other values are ignored.
                for models in (runs, events):
                    models.append(
                        IndexModel([(rd.EXPIRE_AT, ASCENDING)], expireAfterSeconds=0, name="expire_at_ttl")
                    )
            await ensure_indexes(self.runs, runs)
            if events:
                await ensure_indexes(self.events, events, held)
        except PyMongoError as e:
            raise StorageError("could not create run indexes") from e

    # ------------------------------------------------------------------ checks

    def _id(self, value: object, what: str) -> str:
        return check_id(value, what, self.settings.max_id_length)

    def _lease_ms(self, lease_ms: object) -> int:
        return leases.check_lease_ms(lease_ms, self.settings.lease_ms, self.settings.max_lease_ms)

    def _state(self, state: object) -> Doc:
        if not isinstance(state, dict):
            raise InvalidInput("state must be a JSON object")
        check_state_keys(state)
        try:
            size = len(bson.encode(state))
        except (InvalidDocument, OverflowError) as e:
            raise InvalidInput(f"state cannot be stored: {e}") from e
        cap = self.settings.max_state_bytes
        if size <= cap:  # as JSON too: what load_checkpoint and run_events return must fit
            size, unit = json_size(state), "JSON"
        else:
            unit = "BSON"
        if size > cap:
            raise InvalidInput(
                f"state is {size} bytes as {unit}; the maximum is {cap} (memory.max_state_bytes), as BSON "
                "and as JSON. Keep large data elsewhere and store a reference in the state."
            )
        return state

    # ------------------------------------------------------------------ lease

    async def acquire(self, tenant: str, run_id: object, lease_ms: object = None) -> RunLease:
        """Take the run's lease, creating the run (version 0) on first use. Busy: `LeaseBusy`."""
        rid = self._id(run_id, "run_id")
        ttl = self._lease_ms(lease_ms)
        key = run_key(tenant, rid)
        match = {rd.ID: key, rd.TENANT: tenant}
        lease_id = leases.new_lease_id()
        try:
            created = await self._create(tenant, rid)
            taken = await leases.acquire(self.runs, match, lease_id, ttl, self.clock.now())
            if taken is None:
                current = await self.runs.find_one(match, {rd.LOCKED_UNTIL: 1})
                if current is None:  # pragma: no cover - only if the run expired in between
                    raise run_not_found(rid)
                until, left = leases.remaining_ms(current, self.clock.now())
                raise LeaseBusy(f"run {rid!r}", until, left, holder="another worker")
            await self._repair_last_event(taken)
        except PyMongoError as e:
            raise StorageError(f"could not take the lease of run {rid!r}") from e
        until = as_utc(taken[rd.LOCKED_UNTIL])
        return RunLease(rid, lease_id, until, int(taken[rd.VERSION]), taken[rd.STATUS], created)

    async def _create(self, tenant: str, rid: str) -> bool:
        now = self.clock.now()
        doc: RunDoc = {
            "_id": run_key(tenant, rid),
            "tenant": tenant,
            "run_id": rid,
            "version": 0,
            "status": "running",
            "state": None,
            "next_seq": 0,
            "locked_by": None,
            "locked_until": None,
            "created_at": now,
            "updated_at": None,
            "expire_at": None,
        }
        try:  # an insert, not an upsert: an upsert matching nothing scans on the embedded engine
            await self.runs.insert_one(dict(doc))
        except DuplicateKeyError:
            return False  # created before (or by a concurrent first acquire)
        return True

    async def heartbeat(
        self, tenant: str, run_id: object, lease_id: object, lease_ms: object = None
    ) -> datetime:
        """Extend the lease while it still owns the run; `LeaseLost` once it does not."""
        rid = self._id(run_id, "run_id")
        lid = self._id(lease_id, "lease_id")
        ttl = self._lease_ms(lease_ms)
        match = {rd.ID: run_key(tenant, rid), rd.TENANT: tenant}
        try:
            doc = await leases.extend(self.runs, match, lid, ttl, self.clock.now())
            if doc is None:
                await self._raise_missing_or_lost(match, rid, lid)
        except PyMongoError as e:
            raise StorageError(f"could not extend the lease of run {rid!r}") from e
        assert doc is not None
        return as_utc(doc[rd.LOCKED_UNTIL])

    async def release(self, tenant: str, run_id: object, lease_id: object) -> bool:
        """Release only if this lease owns the run; False if it no longer did (nothing changed)."""
        rid = self._id(run_id, "run_id")
        lid = self._id(lease_id, "lease_id")
        match = {rd.ID: run_key(tenant, rid), rd.TENANT: tenant}
        try:
            if await leases.release(self.runs, match, lid):
                return True
            if await self.runs.find_one(match, {rd.ID: 1}) is None:
                raise run_not_found(rid)
        except PyMongoError as e:
            raise StorageError(f"could not release run {rid!r}") from e
        return False

    async def _raise_missing_or_lost(self, match: Doc, rid: str, lid: str) -> None:
        if await self.runs.find_one(match, {rd.ID: 1}) is None:
            raise run_not_found(rid)
        raise LeaseLost(
            f"lease {lid!r} no longer owns run {rid!r} (it expired and was taken, was released, or was "
            "never issued); nothing was written. Stop working on this run; acquire_run it again and "
            "resume from load_checkpoint."
        )

    # ------------------------------------------------------------------ checkpoints

    async def save_checkpoint(
        self,
        tenant: str,
        run_id: object,
        lease_id: object,
        version: object,
        state: object,
        status: object = "running",
    ) -> SaveResult:
        """Write the run's state if this lease owns the run and `version` is newer than the stored one."""
        rid = self._id(run_id, "run_id")
        lid = self._id(lease_id, "lease_id")
        ver = check_version(version)
        st = self._state(state)
        stat = check_status(status)
        match = {rd.ID: run_key(tenant, rid), rd.TENANT: tenant}
        now = self.clock.now()
        ttl = self.settings.completed_run_ttl_s
        expire_at = now + timedelta(seconds=ttl) if stat == "completed" and ttl is not None else None
        nonce = leases.new_lease_id()
        update = save_update(
            tenant, lid, ver, {rd.STATE: st, rd.STATUS: stat, rd.EXPIRE_AT: expire_at}, now, nonce
        )
        try:  # by `_id` alone, the conditions in the pipeline; the nonce says whether it applied
            after = await self.runs.find_one_and_update(
                {rd.ID: match[rd.ID]},
                update,
                projection=SAVE_FIELDS,
                return_document=ReturnDocument.AFTER,
            )
            if after is None or after.get(rd.SAVE_NONCE) != nonce:
                return await self._not_applied(match, rid, lid, ver)
            before = after.get(rd.STATUS_BEFORE)
            seq = int(after[rd.NEXT_SEQ])
            if self.fault is not None:
                self.fault("save_checkpoint.after_run_write")
            await self._append_event(tenant, rid, seq, ver, stat, st, lid, now, expire_at)
            if expire_at is not None or before == "completed":
                # The log expires with its run, and stops expiring if the run is reopened.
                await self.events.update_many(
                    {rd.TENANT: tenant, rd.RUN_ID: rid}, {"$set": {rd.EXPIRE_AT: expire_at}}
                )
        except PyMongoError as e:
            raise StorageError(f"could not save the checkpoint of run {rid!r}") from e
        return SaveResult(applied=True, stale=False, version=ver, seq=seq)

    async def _not_applied(self, match: Doc, rid: str, lid: str, ver: int) -> SaveResult:
        doc = await self.runs.find_one(match)
        if doc is None:
            raise run_not_found(rid)
        if doc.get(rd.LOCKED_BY) != lid:
            await self._raise_missing_or_lost(match, rid, lid)
        stored = int(doc[rd.VERSION])
        if stored == ver and doc.get(rd.WRITTEN_BY) == lid:
            # This lease already wrote this version: a retry after a lost acknowledgement.
            await self._repair_last_event(doc)
            return SaveResult(applied=False, stale=False, version=stored, seq=int(doc[rd.NEXT_SEQ]))
        if stored >= ver:
            return SaveResult(applied=False, stale=True, version=stored, seq=None)
        # Unreachable while lease ids are unique: only the owner writes, and versions only grow.
        raise StorageError(f"the checkpoint of run {rid!r} changed while it was written; retry")

    async def _append_event(
        self,
        tenant: str,
        rid: str,
        seq: int,
        version: int,
        status: str,
        state: Doc | None,
        lid: str | None,
        at: datetime,
        expire_at: datetime | None,
    ) -> None:
        event: RunEventDoc = {
            "_id": event_id(tenant, rid, seq),
            "tenant": tenant,
            "run_id": rid,
            "seq": seq,
            "version": version,
            "status": status,
            "state": state,
            "lease_id": lid,
            "at": at,
            "expire_at": expire_at,
        }
        # An insert by the derived `_id`: an event, once written, is never changed; a duplicate
        # key is a repeat, or a concurrent repair that wrote the same event.
        with contextlib.suppress(DuplicateKeyError):
            await self.events.insert_one(dict(event))

    async def _repair_last_event(self, doc: Doc) -> None:
        """A writer that died between the run update and the event insert left no event: add it."""
        seq = int(doc.get(rd.NEXT_SEQ, 0))
        if seq == 0:
            return
        tenant, rid = doc[rd.TENANT], doc[rd.RUN_ID]
        if await self.events.find_one({rd.ID: event_id(tenant, rid, seq)}, {rd.ID: 1}) is not None:
            return
        legacy = {rd.TENANT: tenant, rd.RUN_ID: rid, rd.SEQ: seq}  # an ObjectId copy of the previous version
        if self.legacy_events and await self.events.find_one(legacy, {rd.ID: 1}) is not None:
            return
        full = doc if rd.STATE in doc else await self.runs.find_one({rd.ID: doc[rd.ID]})
        if full is None or int(full.get(rd.NEXT_SEQ, 0)) != seq:
            return  # moved on meanwhile; the newer writer appends its own event
        await self._append_event(
            tenant,
            rid,
            seq,
            int(full[rd.VERSION]),
            full[rd.STATUS],
            full.get(rd.STATE),
            full.get(rd.WRITTEN_BY),
            as_utc(full[rd.UPDATED_AT] or self.clock.now()),
            full.get(rd.EXPIRE_AT),
        )

    async def load_checkpoint(self, tenant: str, run_id: object, max_bytes: int | None = None) -> Checkpoint:
        """The latest applied state and version (version 0 and no state before the first save).

        A state larger than `max_bytes` as JSON (stored before the limits were lowered) is left
        out: `state` None, `truncated`, and its size in `state_bytes`."""
        rid = self._id(run_id, "run_id")
        try:
            doc = await self.runs.find_one({rd.ID: run_key(tenant, rid), rd.TENANT: tenant})
        except PyMongoError as e:
            raise StorageError(f"could not load run {rid!r}") from e
        if doc is None:
            raise run_not_found(rid)
        until: datetime | None = doc.get(rd.LOCKED_UNTIL)
        if until is not None:
            until = as_utc(until)
        held = until is not None and doc.get(rd.LOCKED_BY) is not None and until > self.clock.now()
        state = doc.get(rd.STATE)
        state_bytes = None
        if max_bytes is not None and state is not None and not ByteBudget(max_bytes).take(state):
            state, state_bytes = None, json_size(doc[rd.STATE])
        return Checkpoint(
            run_id=rid,
            version=int(doc[rd.VERSION]),
            status=doc[rd.STATUS],
            state=state,
            updated_at=as_utc(doc[rd.UPDATED_AT]) if doc.get(rd.UPDATED_AT) else None,
            lease_expires_at=until if held else None,
            truncated=state_bytes is not None,
            state_bytes=state_bytes,
        )

    async def run_events(
        self,
        tenant: str,
        run_id: object,
        after_seq: object = None,
        limit: object = None,
        *,
        include_state: bool = False,
        max_bytes: int | None = None,
    ) -> EventPage:
        """Events in seq order after `after_seq`; `more` says another page exists (`runs/events.py`)."""
        rid = self._id(run_id, "run_id")
        return await read_events(
            self, tenant, rid, after_seq, limit, include_state=include_state, max_bytes=max_bytes
        )
