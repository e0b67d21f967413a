"""A lease on one document: taken with one conditional update, released only by its owner.

Shared by sessions (turns, `memory/`) and runs (checkpoints, `runs/`), so it sits below both.
The document carries `locked_by` (the lease id) and `locked_until` (expiry). Free means unset
or expired. Every function takes `now` from the caller's clock, so expiry is decided by one
injectable notion of time.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Final

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import as_utc
from mongogate.values import Doc, check_int

#: the fields of a lease on a document: the lease id and its expiry (the domains' documents
#: modules, `memory/documents.py` and `runs/documents.py`, name them from here)
LOCKED_BY: Final = "locked_by"
LOCKED_UNTIL: Final = "locked_until"
LEASE_FIELDS = (LOCKED_BY, LOCKED_UNTIL)


def new_lease_id() -> str:
    return uuid.uuid4().hex


def free_conditions(now: datetime) -> list[Doc]:
    """`$or` terms that mean "nobody holds the lease now": never taken or released, or expired."""
    return [{LOCKED_UNTIL: None}, {LOCKED_UNTIL: {"$lte": now}}]


def literal(value: object) -> Doc:
    # Pipeline updates read "$x" strings as field paths: caller text must never be one.
    return {"$literal": value}


def field_or_null(name: str) -> Doc:
    return {"$ifNull": [f"${name}", None]}


def same(name: str, value: object) -> Doc:
    """An aggregation test: the field holds `value` (missing counts as None). Only a test against
    None needs the `$ifNull` (a missing field is not equal to null in an expression)."""
    return {"$eq": [field_or_null(name) if value is None else f"${name}", literal(value)]}


def keep_unless(ok: Doc, fields: Doc) -> Doc:
    """One update stage: each field its new value when `ok`, else the document as it is (missing
    stays missing). `ok` is written and evaluated once: `{$replaceWith: {$cond: [ok, {$mergeObjects:
    [$$ROOT, fields]}, $$ROOT]}}` (MongoDB 4.2+). The earlier shape, a `$set` of `{$cond: [ok, new,
    "$field"]}` per field, repeated `ok` in every field, and the embedded engine prepares and
    evaluates an update pipeline node by node: a lease take of eight fields cost 8.0 ms against
    3.6 ms in this shape (docs/decisions/turn-write-path.md).

    Refused (`ValueError`, a programming error): a value `$$REMOVE` (left out of the merged object,
    so MongoDB keeps the field and the embedded engine fails the update), and a name that is empty,
    holds a dot or starts with `$` (an operator, or a dotted top-level field on the engine and an
    error on MongoDB). A caller's value goes in through `literal`."""
    for name, value in fields.items():
        if not name or "." in name or name.startswith("$") or value == "$$REMOVE":
            raise ValueError(f"keep_unless: field {name!r} = {value!r} means different things on each engine")
    return {"$replaceWith": {"$cond": [ok, {"$mergeObjects": ["$$ROOT", fields]}, "$$ROOT"]}}


def free(now: datetime) -> Doc:
    """`free_conditions` as an aggregation test: never taken or released, or expired."""
    until = field_or_null(LOCKED_UNTIL)
    return {"$or": [{"$eq": [until, None]}, {"$lte": [until, literal(now)]}]}


def _by_id(match: Doc) -> tuple[Doc, list[Doc]]:
    """`match` (`_id` and equalities) as a filter on `_id` alone and the tests of the other fields.

    An update filtered by `_id` alone costs the same at 1,000 and 10,000 documents on the
    embedded engine; any second field in the filter makes it scan (docs/decisions/turn-write-path.md).
    """
    return {"_id": match["_id"]}, [same(k, v) for k, v in match.items() if k != "_id"]


def _matches(doc: Doc | None, match: Doc) -> bool:
    return doc is not None and all(doc.get(k) == v for k, v in match.items() if k != "_id")


async def acquire(
    coll: AsyncCollection[Doc], match: Doc, lease_id: str, ttl_ms: int, now: datetime
) -> Doc | None:
    """Take the lease if free or expired; the updated document, or None if busy or missing."""
    by_id, tests = _by_id(match)
    until = now + timedelta(milliseconds=ttl_ms)
    doc = await coll.find_one_and_update(
        by_id,
        [keep_unless({"$and": [*tests, free(now)]}, {LOCKED_BY: literal(lease_id), LOCKED_UNTIL: until})],
        return_document=ReturnDocument.AFTER,
    )
    return doc if _matches(doc, match) and doc is not None and doc.get(LOCKED_BY) == lease_id else None


async def extend(
    coll: AsyncCollection[Doc], match: Doc, lease_id: str, ttl_ms: int, now: datetime
) -> Doc | None:
    """Heartbeat: push expiry out, only while this lease still owns the document."""
    by_id, tests = _by_id(match)
    until = now + timedelta(milliseconds=ttl_ms)
    doc = await coll.find_one_and_update(
        by_id,
        [keep_unless({"$and": [*tests, same(LOCKED_BY, lease_id)]}, {LOCKED_UNTIL: until})],
        return_document=ReturnDocument.AFTER,
    )
    return doc if _matches(doc, match) and doc is not None and doc.get(LOCKED_BY) == lease_id else None


async def release(coll: AsyncCollection[Doc], match: Doc, lease_id: str) -> bool:
    """Release only if this lease still owns it; a stale owner cannot free the new owner's lease."""
    by_id, tests = _by_id(match)
    before = await coll.find_one_and_update(
        by_id,
        [keep_unless({"$and": [*tests, same(LOCKED_BY, lease_id)]}, {LOCKED_BY: None, LOCKED_UNTIL: None})],
        projection={k: 1 for k in match if k != "_id"} | {LOCKED_BY: 1},
        return_document=ReturnDocument.BEFORE,
    )
    return _matches(before, match) and before is not None and before.get(LOCKED_BY) == lease_id


def remaining_ms(doc: Doc, now: datetime) -> tuple[datetime, int]:
    until = as_utc(doc[LOCKED_UNTIL])
    left = int((until - now).total_seconds() * 1000)
    return until, max(left, 0)


def check_lease_ms(value: object, default: int, cap: int) -> int:
    """A requested lease length, or the default; out of range is the caller's error."""
    return check_int(value, "lease_ms", 100, cap, default=default, hint="milliseconds")
