"""What a read of long-term memory returns: items from documents, the byte cap, the page cursor.

The cursor is the last row's sort key (updated_at in ms, id) as base64url JSON. It is always
combined with the caller's scope, so a forged one can only page through the caller's own memories.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime, timedelta

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput
from mongogate.recall.model import MemoryItem, Version
from mongogate.values import Doc

#: what a memory document shows as an item (never its vector)
ITEM_FIELDS = {"embedding": 0, "text_hash": 0, "ns_path": 0, "keyed": 0}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
#: a rough JSON size of an item's fixed fields (ids, dates, numbers, names)
_ITEM_OVERHEAD = 256


def json_bytes(value: object) -> int:
    """What a value weighs in the reply's JSON: a control character is six bytes there, not one."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))


def item_bytes(item: MemoryItem) -> int:
    """About what the item weighs as JSON in the tool's reply (text and metadata dominate)."""
    return json_bytes([item.text, item.metadata, item.namespace, item.key]) + _ITEM_OVERHEAD


def cap_items(items: list[MemoryItem], max_bytes: int) -> tuple[list[MemoryItem], int]:
    """The leading items that fit in `max_bytes`, and how many were left out. The first one always:
    a memory larger than the cap alone (bounded by the text and metadata limits) must not end a
    listing or hide from recall."""
    total = 0
    for i, item in enumerate(items):
        total += item_bytes(item)
        if total > max_bytes and i > 0:
            return items[:i], len(items) - i
    return items, 0


def newest_within(versions: list[Version], max_bytes: int) -> list[Version]:
    """The newest versions (kept oldest first) whose texts fit in `max_bytes`; the current one always."""
    total = 0
    for i in range(len(versions) - 1, -1, -1):
        total += json_bytes(versions[i].text) + _ITEM_OVERHEAD
        if total > max_bytes and i < len(versions) - 1:
            return versions[i + 1 :]
    return versions


def encode_cursor(at: datetime, memory_id: str) -> str:
    raw = json.dumps([(as_utc(at) - _EPOCH) // _MS, memory_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> tuple[datetime, str]:
    bad = InvalidInput(
        "cursor is not one list_memories returned; pass next_cursor from the previous page, or omit it"
    )
    if not isinstance(cursor, str) or not cursor or len(cursor) > 512:
        raise bad
    try:
        ms, mid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        at = _EPOCH + ms * _MS
    except (ValueError, TypeError, binascii.Error, OverflowError):
        raise bad from None
    if isinstance(ms, bool) or not isinstance(ms, int) or not isinstance(mid, str):
        raise bad
    try:
        mid.encode("utf-8")  # a JSON escape can decode to a lone surrogate, which BSON cannot hold
    except UnicodeEncodeError:
        raise bad from None
    return at, mid


def live(now: datetime) -> Doc:
    """Not yet expired: the TTL monitor erases late (every minute or so), reads never show them.

    "Not an expired date": matches a future `expires_at`, a null one and a missing one, as
    `$or: [{expires_at: null}, {expires_at: {$gt: now}}]` did, in one clause instead of two (the
    `$or` made every recall read several times slower on the embedded engine; benchmarks/RESULTS.md,
    "recall"). The `$type` is needed there: mongoeco's `$lte` on a date also matches null (MongoDB
    compares only values of one type), so a bare `$not: {$lte: now}` hid every memory without a TTL.
    """
    return {"expires_at": {"$not": {"$type": "date", "$lte": now}}}


def item_of(doc: Doc, score: float | None = None) -> MemoryItem:
    return MemoryItem(
        id=str(doc["_id"]),
        namespace=str(doc["namespace"]),
        key=doc.get("key"),
        text=str(doc["text"]),
        metadata=dict(doc.get("metadata") or {}),
        version=int(doc["version"]),
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
        score=score,
    )
