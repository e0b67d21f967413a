"""A lease on one document: taken with one conditional update, released only by its owner.

Shared by sessions (turns) and runs (checkpoints). The document carries `locked_by`
(the lease id) and `locked_until` (expiry). Free means unset or expired.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.errors import InvalidInput

Doc = dict[str, Any]


def utcnow() -> datetime:
    # BSON dates hold milliseconds; truncate so comparisons match what was stored.
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def new_lease_id() -> str:
    return uuid.uuid4().hex


def as_utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def acquire(
    coll: AsyncCollection[Doc], match: Doc, lease_id: str, ttl_ms: int, now: datetime | None = None
) -> Doc | None:
    """Take the lease if free or expired; the updated document, or None if busy or missing."""
    now = now or utcnow()
    free = {"$or": [{"locked_until": None}, {"locked_until": {"$lte": now}}]}
    return await coll.find_one_and_update(
        {"$and": [match, free]},
        {"$set": {"locked_by": lease_id, "locked_until": now + timedelta(milliseconds=ttl_ms)}},
        return_document=ReturnDocument.AFTER,
    )


async def extend(coll: AsyncCollection[Doc], match: Doc, lease_id: str, ttl_ms: int) -> Doc | None:
    """Heartbeat: push expiry out, only while this lease still owns the document."""
    return await coll.find_one_and_update(
        {**match, "locked_by": lease_id},
        {"$set": {"locked_until": utcnow() + timedelta(milliseconds=ttl_ms)}},
        return_document=ReturnDocument.AFTER,
    )


async def release(coll: AsyncCollection[Doc], match: Doc, lease_id: str) -> bool:
    """Release only if this lease still owns it; a stale owner cannot free the new owner's lease."""
    res = await coll.update_one(
        {**match, "locked_by": lease_id}, {"$set": {"locked_by": None, "locked_until": None}}
    )
    return res.modified_count == 1


def remaining_ms(doc: Doc, now: datetime | None = None) -> tuple[datetime, int]:
    until = as_utc(doc["locked_until"])
    left = int((until - (now or utcnow())).total_seconds() * 1000)
    return until, max(left, 0)


def check_lease_ms(value: object, default: int, cap: int) -> int:
    """A requested lease length, or the default; out of range is the caller's error."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= cap:
        raise InvalidInput(f"lease_ms must be an integer from 100 to {cap}; got {value!r}")
    return value
