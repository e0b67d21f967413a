"""An erasure run: every declared part, in batches, journaled so that a run killed half way is
resumed by the next with the same totals.

Per batch: the ids of at most `BATCH` matching documents (and `BATCH_ID_BYTES` of ids) are read
(`_id` only), written to the erasure's journal document (`erasures`, `_id` a digest of the target:
no tenant's name), then deleted (or redacted) by `_id` alone (the flat write on the embedded
engine; every mongogate `_id` is derived from its tenant or random, so an id read under the
tenant's filter never names another tenant's document), then counted and folded into the
digest, the journal's batch cleared in the same update. A run stopped after the journal write
applies that batch again first and counts it once. Nothing is ever read whole: each batch, its
journal and its bulk write stay under 1 MiB, far below the wire limit.

One run at a time per target: the journal carries a lease (`leases.py`), extended with each
batch; a second run meanwhile is `LeaseBusy`. A run that fails lets the lease go (the next run
resumes at once); a killed one holds it until it expires (`LEASE`). The journal is deleted when
the erasure finishes: the receipt is the record, nothing in the database keeps the target.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
from pymongo import DeleteOne, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate import leases
from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.erasure.declare import Declared, Fault, Part, Redacted, Target
from mongogate.erasure.receipt import ZERO, CollectionReceipt, ErasureReceipt, fold
from mongogate.errors import LeaseBusy, LeaseLost, StorageError
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: the collection of unfinished erasures (one journal document each)
JOURNAL = "erasures"
#: documents per batch, and the most bytes of ids one batch holds
BATCH = 256
BATCH_ID_BYTES = 256 * 1024
#: a run's hold on its target, extended at every batch
LEASE = timedelta(minutes=2)


def journal_id(target: Target) -> str:
    """The journal's `_id`: the target hashed, so an unfinished erasure names no one."""
    raw = json.dumps(["mongogate.erase/1", target.tenant, target.subject], ensure_ascii=True)
    return hashlib.sha256(raw.encode("ascii")).hexdigest()


def _action(part: Part) -> str:
    return "redacted" if isinstance(part, Redacted) else "removed"


class Sweep:
    """One run of one erasure (`run`); `clock` decides the lease, `fault` is the crash-test hook."""

    def __init__(
        self,
        db: AsyncDatabase[Doc],
        target: Target,
        *,
        clock: Clock = SYSTEM_CLOCK,
        fault: Fault | None = None,
        batch: int = BATCH,
    ) -> None:
        self.db = db
        self.target = target
        self.clock = clock
        self.fault = fault
        self.batch = max(1, batch)
        self.journal: AsyncCollection[Doc] = db[JOURNAL]
        self.key = journal_id(target)
        self.lease = leases.new_lease_id()
        self.erasure_id = ""
        self.started_at = clock.now()
        self.runs = 1
        self.counts: dict[str, dict[str, int]] = {"removed": {}, "redacted": {}}
        self.digests: dict[str, dict[str, str]] = {"removed": {}, "redacted": {}}
        self.this_run: dict[str, dict[str, int]] = {"removed": {}, "redacted": {}}
        self.pending: Doc | None = None

    def at(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    async def run(self, declared: Sequence[Declared]) -> ErasureReceipt:
        try:
            await self._claim()
            try:
                for d in declared:
                    around = d.around(self.db, self.target, self) if d.around else contextlib.nullcontext()
                    async with around:
                        for part in d.parts:
                            await self._part(part)
                receipt = self._receipt(declared)
                await self.journal.delete_one({"_id": self.key, "locked_by": self.lease})
                return receipt
            except BaseException:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await leases.release(self.journal, {"_id": self.key}, self.lease)  # resumable at once
                raise
        except PyMongoError as e:
            raise StorageError(f"could not erase the documents of {self.target.describe()}") from e

    async def beat(self) -> None:
        """The lease extended (between batches, and by an `around` doing long work)."""
        now = self.clock.now()
        if await leases.extend(self.journal, {"_id": self.key}, self.lease, _ms(LEASE), now) is None:
            raise LeaseLost(
                f"another run took over the erasure of {self.target.describe()}; this one stopped"
            )

    # -- the journal --------------------------------------------------------------------------

    async def _claim(self) -> None:
        """Take the target's journal (made if absent) and read what earlier runs did."""
        now = self.clock.now()
        fresh: Doc = {
            "_id": self.key,
            "erasure_id": uuid.uuid4().hex,
            "started_at": now,
            "runs": 0,
            "locked_by": None,
            "locked_until": None,
        }
        with contextlib.suppress(DuplicateKeyError):
            await self.journal.insert_one(fresh)
        doc = await leases.acquire(self.journal, {"_id": self.key}, self.lease, _ms(LEASE), now)
        if doc is None:
            held = await self.journal.find_one({"_id": self.key}, {"locked_until": 1})
            until = as_utc(held["locked_until"]) if held and held.get("locked_until") else now + LEASE
            raise LeaseBusy(
                f"the erasure of {self.target.describe()}",
                until,
                max(0, _ms(until - now)),
                holder="another run of it (or one killed before it finished)",
            )
        await self.journal.update_one({"_id": self.key, "locked_by": self.lease}, {"$inc": {"runs": 1}})
        self.erasure_id = str(doc.get("erasure_id") or uuid.uuid4().hex)
        self.started_at = as_utc(doc["started_at"]) if doc.get("started_at") else now
        self.runs = int(doc.get("runs") or 0) + 1
        for action in ("removed", "redacted"):
            self.counts[action] = {k: int(v) for k, v in (doc.get("counts", {}).get(action) or {}).items()}
            self.digests[action] = {k: str(v) for k, v in (doc.get("digests", {}).get(action) or {}).items()}
        pending = doc.get("pending")
        self.pending = pending if isinstance(pending, dict) else None
        if self.runs > 1:
            log.info("erase: resuming erasure %s (run %d)", self.erasure_id, self.runs)

    async def _write(self, update: Doc) -> None:
        update.setdefault("$set", {})["locked_until"] = self.clock.now() + LEASE
        done = await self.journal.update_one({"_id": self.key, "locked_by": self.lease}, update)
        if done.matched_count == 0:
            raise LeaseLost(
                f"another run took over the erasure of {self.target.describe()}; this one stopped"
            )

    # -- the batches --------------------------------------------------------------------------

    async def _part(self, part: Part) -> None:
        match = part.match(self.target)
        action, name = _action(part), part.collection
        coll = self.db[name]
        held = self.pending
        if held is not None and held.get("action") == action and held.get("collection") == name:
            self.pending = None  # a batch a stopped run journaled: applied (again) and counted once
            ids = list(held.get("ids") or [])
            await self._apply(part, coll, ids)
            await self._counted(action, name, ids)
        if match is None:
            return
        last: list[Any] = []
        while True:
            ids = await self._ids(coll, match)
            if not ids:
                return
            if ids == last:  # written, yet still matching: never loop on it
                raise StorageError(f"the documents of {name} still match after they were {action}")
            await self._write({"$set": {"pending": {"action": action, "collection": name, "ids": ids}}})
            self.at(f"erase.after_journal:{action}:{name}")
            await self._apply(part, coll, ids)
            self.at(f"erase.after_apply:{action}:{name}")
            await self._counted(action, name, ids)
            last = ids

    async def _ids(self, coll: AsyncCollection[Doc], match: Doc) -> list[Any]:
        ids: list[Any] = []
        size = 0
        cursor = coll.find(match, {"_id": 1}, limit=self.batch, batch_size=self.batch)
        try:
            async for d in cursor:
                ids.append(d["_id"])
                size += len(str(d["_id"])) + 16
                if size >= BATCH_ID_BYTES:
                    break
        finally:
            await cursor.close()
        return ids

    async def _apply(self, part: Part, coll: AsyncCollection[Doc], ids: list[Any]) -> None:
        if not ids:
            return
        if isinstance(part, Redacted):
            update = part.update(self.target, self.erasure_id)
            await coll.bulk_write([UpdateOne({"_id": i}, update) for i in ids], ordered=False)
        else:
            await coll.bulk_write([DeleteOne({"_id": i}) for i in ids], ordered=False)

    async def _counted(self, action: str, name: str, ids: list[Any]) -> None:
        n = self.counts[action].get(name, 0) + len(ids)
        digest = fold(self.digests[action].get(name, ZERO), name, ids)
        self.counts[action][name] = n
        self.digests[action][name] = digest
        self.this_run[action][name] = self.this_run[action].get(name, 0) + len(ids)
        await self._write(
            {
                "$set": {f"counts.{action}.{name}": n, f"digests.{action}.{name}": digest},
                "$unset": {"pending": ""},
            }
        )

    # -- the receipt --------------------------------------------------------------------------

    def _receipt(self, declared: Sequence[Declared]) -> ErasureReceipt:
        rows: list[CollectionReceipt] = []
        notes: list[str] = []
        said = {p.collection for d in declared for p in d.parts if p.match(self.target) is not None}
        for d in declared:
            for part in d.parts:
                action, name = _action(part), part.collection
                if part.match(self.target) is None:
                    if name not in said:  # said once, where no other part of it applies
                        said.add(name)
                        rows.append(CollectionReceipt(name, d.package, "untouched", why=part.unmatched))
                    continue
                rows.append(
                    CollectionReceipt(
                        name,
                        d.package,
                        "redacted" if action == "redacted" else "removed",
                        self.counts[action].get(name, 0),
                        self.this_run[action].get(name, 0),
                        self.digests[action].get(name, ZERO),
                    )
                )
            rows += [CollectionReceipt(k.collection, d.package, "untouched", why=k.why) for k in d.kept]
            if d.notes is not None:
                notes += d.notes(self.target)
        return ErasureReceipt(
            erasure_id=self.erasure_id,
            tenant=self.target.tenant,
            subject=self.target.subject,
            started_at=self.started_at,
            finished_at=self.clock.now(),
            runs=self.runs,
            collections=tuple(rows),
            notes=tuple(notes),
        )


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


__all__ = ["BATCH", "JOURNAL", "LEASE", "Sweep", "journal_id"]
