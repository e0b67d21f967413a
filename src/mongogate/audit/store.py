"""The ``audit_events`` collection: its documents, indexes, and reading it (``mongogate audit``).

One collection shared by every server of a deployment, written through the read-write
connection (never the query user). An event is stored as it is written to the file, except:
``_id`` is the event's own id (a retried insert is a duplicate, not a second event), ``ts`` is a
BSON date (the TTL index needs one), and ``filter``/``offending`` are JSON text (a model's
filter is full of ``$`` keys, which not every MongoDB accepts as field names).

``--follow`` polls by time, re-reading a window (``FOLLOW_OVERLAP_S``) behind the newest event
seen and skipping ids already printed: events reach the collection late (the writer's queue,
another server's clock), and a plain "newer than the last one" would lose those. Change
streams need a replica set, which the embedded engine is not; polling works on both.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from mongogate.audit.query import AuditQuery, parse_ts
from mongogate.clock import as_utc, iso_z

COLLECTION = "audit_events"
TTL_INDEX = "ts_ttl"
#: top-level fields held as JSON text in MongoDB (their keys are the model's, `$` and `.` included)
JSON_FIELDS = ("filter", "offending")
#: how far behind the newest event seen --follow looks again, for events that arrive late
FOLLOW_OVERLAP_S = 60.0
#: (name, keys): one per filter of `mongogate audit`, newest first within it
INDEXES: tuple[tuple[str, list[tuple[str, int]]], ...] = (
    ("tenant_ts", [("tenant", ASCENDING), ("ts", DESCENDING)]),
    ("tool_ts", [("tool", ASCENDING), ("ts", DESCENDING)]),
    ("reason_ts", [("reason", ASCENDING), ("ts", DESCENDING)]),
    ("instance_ts", [("instance", ASCENDING), ("ts", DESCENDING)]),
    ("principal_ts", [("principal", ASCENDING), ("ts", DESCENDING)]),
)


def to_doc(event: dict[str, Any], event_id: str) -> dict[str, Any]:
    doc = dict(event)
    doc["_id"] = event_id
    ts = parse_ts(doc.get("ts"))
    doc["ts"] = ts if ts is not None else datetime.now(UTC)
    for key in JSON_FIELDS:
        if key in doc:
            doc[key] = json.dumps(doc[key], ensure_ascii=True, separators=(",", ":"), default=str)
    return doc


def from_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """The event as the file holds it (``_id`` dropped, ``ts`` ISO text, JSON fields parsed)."""
    event = {k: v for k, v in doc.items() if k != "_id"}
    ts = parse_ts(event.get("ts"))
    if ts is not None:
        event["ts"] = iso_z(ts)
    for key in JSON_FIELDS:
        if isinstance(event.get(key), str):
            with contextlib.suppress(ValueError):
                event[key] = json.loads(event[key])
    return event


def ensure_indexes(coll: Collection[Any], retention_days: int | None) -> None:
    """The CLI's filter indexes and the TTL on ``ts`` (changed in place when the setting changes)."""
    for name, keys in INDEXES:
        coll.create_index(keys, name=name)
    ttl = None if retention_days is None else retention_days * 86400
    try:
        if ttl is None:
            coll.create_index([("ts", ASCENDING)], name=TTL_INDEX)
        else:
            coll.create_index([("ts", ASCENDING)], name=TTL_INDEX, expireAfterSeconds=ttl)
    except OperationFailure as e:
        if e.code not in (85, 86):  # IndexOptionsConflict / IndexKeySpecsConflict: a new retention
            raise
        coll.drop_index(TTL_INDEX)
        ensure_indexes(coll, retention_days)


def read_events_db(coll: Collection[Any], query: AuditQuery | None = None) -> Iterator[dict[str, Any]]:
    """Events ``query`` matches (all by default), oldest first (by time, then id)."""
    for doc in coll.find(
        (query or AuditQuery()).mongo_filter(), sort=[("ts", ASCENDING), ("_id", ASCENDING)]
    ):
        yield from_doc(doc)


def follow_db(
    coll: Collection[Any],
    query: AuditQuery | None = None,
    *,
    from_start: bool = True,
    poll_s: float = 1.0,
    stop: Callable[[], bool] | None = None,
    overlap_s: float = FOLLOW_OVERLAP_S,
) -> Iterator[dict[str, Any]]:
    """Matching events already there (if ``from_start``), then new ones as they arrive; each once."""
    query = query or AuditQuery()
    seen: dict[Any, datetime] = {}
    if not from_start:
        newest = coll.find_one({}, sort=[("ts", DESCENDING)])
        start = newest["ts"] if newest else datetime.now(UTC) - timedelta(seconds=overlap_s)
        for doc in coll.find({"ts": {"$gte": as_utc(start) - timedelta(seconds=overlap_s)}}, {"ts": 1}):
            seen[doc["_id"]] = as_utc(doc["ts"])
    while stop is None or not stop():
        low = max(seen.values()) - timedelta(seconds=overlap_s) if seen else None
        fresh = False
        q = query.mongo_filter(since=low)
        for doc in coll.find(q, sort=[("ts", ASCENDING), ("_id", ASCENDING)]):
            if doc["_id"] in seen:
                continue
            seen[doc["_id"]] = as_utc(doc["ts"])
            fresh = True
            yield from_doc(doc)
        if seen:  # forget what fell out of the window
            floor = max(seen.values()) - timedelta(seconds=2 * overlap_s)
            seen = {k: v for k, v in seen.items() if v >= floor}
        if not fresh:
            time.sleep(poll_s)
