"""Work items agents open (investigations): at most one active item per trigger.

The guarantee is the database's, not the agents': a partial unique index on
(tenant, agent_key, trigger_signature) covers active statuses only, so two agents that
see the same trigger at once cannot both open an item (the loser's insert fails with a
duplicate key, which means "someone else got there first"), while closed items stay as
history and never block a new one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import bson
from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.errors import InvalidInput, NotFound, StorageError
from mongogate.scheduler import documents as sd
from mongogate.scheduler.documents import INVESTIGATIONS_COLLECTION, InvestigationDoc
from mongogate.values import Doc

ACTIVE_STATUSES: tuple[str, ...] = ("open", "in_progress")
CLOSED_STATUS = "closed"
MAX_SIGNATURE = 512
MAX_TEXT = 16 * 1024
MAX_DETAILS_BYTES = 64 * 1024
#: how often `open` re-reads after losing a race to an item that was closed meanwhile
_OPEN_ATTEMPTS = 3


@dataclass(frozen=True)
class Investigation:
    id: str
    tenant: str
    agent_key: str
    trigger_signature: str
    status: str
    title: str
    details: Doc
    opened_at: datetime
    closed_at: datetime | None = None
    resolution: str | None = None

    @classmethod
    def from_doc(cls, d: Doc) -> Investigation:
        """An item from its stored document (`documents.InvestigationDoc`)."""
        return cls(
            id=d[sd.ID],
            tenant=d[sd.TENANT],
            agent_key=d[sd.AGENT_KEY],
            trigger_signature=d[sd.TRIGGER_SIGNATURE],
            status=d[sd.STATUS],
            title=d.get(sd.TITLE, ""),
            details=d.get(sd.DETAILS) or {},
            opened_at=as_utc(d[sd.OPENED_AT]),
            closed_at=as_utc(d[sd.CLOSED_AT]) if d.get(sd.CLOSED_AT) else None,
            resolution=d.get(sd.RESOLUTION),
        )


@dataclass(frozen=True)
class OpenResult:
    status: Literal["opened", "already_open"]
    investigation: Investigation


def _text(value: object, what: str, cap: int, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidInput(f"{what} must be a{'' if empty else ' non-empty'} string")
    if len(value) > cap:
        raise InvalidInput(f"{what} is {len(value)} characters long; the maximum is {cap}")
    return value


class Investigations:
    def __init__(self, db: AsyncDatabase[Doc], *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.coll: AsyncCollection[Doc] = db[INVESTIGATIONS_COLLECTION]
        self.clock = clock

    async def ensure_indexes(self) -> None:
        try:
            await self.coll.create_index(
                [(sd.TENANT, ASCENDING), (sd.AGENT_KEY, ASCENDING), (sd.TRIGGER_SIGNATURE, ASCENDING)],
                unique=True,
                partialFilterExpression={sd.STATUS: {"$in": list(ACTIVE_STATUSES)}},
                name="active_trigger_unique",
            )
            await self.coll.create_index(
                [(sd.TENANT, ASCENDING), (sd.STATUS, ASCENDING), (sd.OPENED_AT, DESCENDING)],
                name="tenant_status",
            )
        except PyMongoError as e:
            raise StorageError(f"could not create investigation indexes: {e}") from e

    def _active_match(self, tenant: str, agent_key: str, signature: str) -> Doc:
        return {
            sd.TENANT: tenant,
            sd.AGENT_KEY: agent_key,
            sd.TRIGGER_SIGNATURE: signature,
            sd.STATUS: {"$in": list(ACTIVE_STATUSES)},
        }

    async def open(
        self,
        tenant: str,
        agent_key: str,
        trigger_signature: str,
        title: str = "",
        details: Doc | None = None,
    ) -> OpenResult:
        """Open an item for this trigger, or return the active one someone already opened."""
        _text(tenant, "tenant", MAX_SIGNATURE)
        _text(agent_key, "agent_key", MAX_SIGNATURE)
        sig = _text(trigger_signature, "trigger_signature", MAX_SIGNATURE)
        _text(title, "title", MAX_TEXT, empty=True)
        if details is not None and not isinstance(details, dict):
            raise InvalidInput("details must be a dict")
        if details and len(bson.encode(details)) > MAX_DETAILS_BYTES:
            raise InvalidInput(
                f"details are larger than {MAX_DETAILS_BYTES} bytes; store a reference instead"
            )
        now = self.clock.now()
        try:
            for _ in range(_OPEN_ATTEMPTS):
                new: InvestigationDoc = {
                    "_id": uuid.uuid4().hex,
                    "tenant": tenant,
                    "agent_key": agent_key,
                    "trigger_signature": sig,
                    "status": "open",
                    "title": title,
                    "details": details or {},
                    "opened_at": now,
                    "closed_at": None,
                    "resolution": None,
                }
                doc = dict(new)
                try:
                    await self.coll.insert_one(doc)
                    return OpenResult("opened", Investigation.from_doc(doc))
                except DuplicateKeyError:
                    # Someone else got there first: theirs is the item.
                    existing = await self.coll.find_one(self._active_match(tenant, agent_key, sig))
                    if existing is not None:
                        return OpenResult("already_open", Investigation.from_doc(existing))
                    # ...and it was closed before we could read it: try again.
        except PyMongoError as e:
            raise StorageError(f"could not open the investigation: {e}") from e
        raise StorageError(f"investigation {sig!r} kept changing while it was opened; retry")

    async def set_status(self, tenant: str, investigation_id: str, status: str) -> Investigation:
        """Move an active item between active statuses (e.g. open -> in_progress)."""
        if status not in ACTIVE_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(ACTIVE_STATUSES)}; use close() to close")
        item = await self._update(tenant, investigation_id, {sd.STATUS: status})
        if item.status != status:
            raise InvalidInput(f"investigation {investigation_id!r} is closed; open a new one instead")
        return item

    async def close(self, tenant: str, investigation_id: str, resolution: str = "") -> Investigation:
        """Close an active item; from then on the same trigger may open a new one. Closing twice is fine."""
        _text(resolution, "resolution", MAX_TEXT, empty=True)
        return await self._update(
            tenant,
            investigation_id,
            {sd.STATUS: CLOSED_STATUS, sd.CLOSED_AT: self.clock.now(), sd.RESOLUTION: resolution},
        )

    async def _update(self, tenant: str, investigation_id: str, changes: Doc) -> Investigation:
        """Apply `changes` to an active item; a closed one is returned unchanged."""
        try:
            doc = await self.coll.find_one_and_update(
                {sd.ID: investigation_id, sd.TENANT: tenant, sd.STATUS: {"$in": list(ACTIVE_STATUSES)}},
                {"$set": changes},
                return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                current = await self.coll.find_one({sd.ID: investigation_id, sd.TENANT: tenant})
                if current is None:
                    raise NotFound(f"investigation {investigation_id!r} not found")
                return Investigation.from_doc(current)
        except PyMongoError as e:
            raise StorageError(f"could not update investigation {investigation_id!r}: {e}") from e
        return Investigation.from_doc(doc)

    async def active(self, tenant: str, agent_key: str, trigger_signature: str) -> Investigation | None:
        try:
            doc = await self.coll.find_one(self._active_match(tenant, agent_key, trigger_signature))
        except PyMongoError as e:
            raise StorageError(f"could not read investigations: {e}") from e
        return Investigation.from_doc(doc) if doc else None

    async def list_items(
        self, tenant: str, *, statuses: tuple[str, ...] = ACTIVE_STATUSES, limit: int = 100
    ) -> list[Investigation]:
        try:
            cursor = self.coll.find(
                {sd.TENANT: tenant, sd.STATUS: {"$in": list(statuses)}},
                sort=[(sd.OPENED_AT, DESCENDING)],
                limit=limit,
            )
            return [Investigation.from_doc(d) async for d in cursor]
        except PyMongoError as e:
            raise StorageError(f"could not list investigations: {e}") from e

    async def list_for_agent(self, agent_key: str, *, limit: int = 100) -> list[Investigation]:
        """The active items one agent opened, across tenants (an agent's own sweep), oldest first."""
        try:
            cursor = self.coll.find(
                {sd.AGENT_KEY: agent_key, sd.STATUS: {"$in": list(ACTIVE_STATUSES)}},
                sort=[(sd.OPENED_AT, 1)],
                limit=limit,
            )
            return [Investigation.from_doc(d) async for d in cursor]
        except PyMongoError as e:
            raise StorageError(f"could not list investigations: {e}") from e
