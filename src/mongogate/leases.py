"""A lease on one document: taken with one conditional update, released only by its owner.

Shared by sessions (turns, `memory/`) and runs (checkpoints, `runs/`), so it sits below both.
The document carries `locked_by` (the lease id) and `locked_until` (expiry). Free means unset
or expired. Every function takes `now` from the caller's clock, so expiry is decided by one
injectable notion of time.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import as_utc
from mongogate.values import Doc, check_int


def new_lease_id() -> str:
    return uuid.uuid4().hex


def free_conditions(now: datetime) -> list[Doc]:
    """`$or` terms that mean "nobody holds the lease now": never taken or released, or expired."""
    return [{"locked_until": None}, {"locked_until": {"$lte": now}}]


async def acquire(
    coll: AsyncCollection[Doc], match: Doc, lease_id: str, ttl_ms: int, now: datetime
) -> Doc | None:
    """Take the lease if free or expired; the updated document, or None if busy or missing."""
    return await coll.find_one_and_update(
        {"$and": [match, {"$or": free_conditions(now)}]},
        {"$set": {"locked_by": lease_id, "locked_until": now + timedelta(milliseconds=ttl_ms)}},
        return_document=ReturnDocument.AFTER,
    )


async def extend(
    coll: AsyncCollection[Doc], match: Doc, lease_id: str, ttl_ms: int, now: datetime
) -> Doc | None:
    """Heartbeat: push expiry out, only while this lease still owns the document."""
    return await coll.find_one_and_update(
        {**match, "locked_by": lease_id},
        {"$set": {"locked_until": now + timedelta(milliseconds=ttl_ms)}},
        return_document=ReturnDocument.AFTER,
    )


async def release(coll: AsyncCollection[Doc], match: Doc, lease_id: str) -> bool:
    """Release only if this lease still owns it; a stale owner cannot free the new owner's lease."""
    res = await coll.update_one(
        {**match, "locked_by": lease_id}, {"$set": {"locked_by": None, "locked_until": None}}
    )
    return res.modified_count == 1


def remaining_ms(doc: Doc, now: datetime) -> tuple[datetime, int]:
    until = as_utc(doc["locked_until"])
    left = int((until - now).total_seconds() * 1000)
    return until, max(left, 0)


def check_lease_ms(value: object, default: int, cap: int) -> int:
    """A requested lease length, or the default; out of range is the caller's error."""
    return check_int(value, "lease_ms", 100, cap, default=default, hint="milliseconds")
