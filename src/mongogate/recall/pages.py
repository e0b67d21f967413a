"""What a read of long-term memory returns: items from documents, the byte cap, the page cursor.

The cursor is the last row's sort key (updated_at in ms, id) as base64url JSON. It is always
combined with the caller's scope, so a forged one can only page through the caller's own memories.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput
from mongogate.recall.model import MemoryItem, Version
from mongogate.values import ByteBudget, Doc

#: what a memory document shows as an item (never its vector)
ITEM_FIELDS = {"embedding": 0, "text_hash": 0, "ns_path": 0, "keyed": 0}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
#: what a reply's fields besides its list take at most (notice, cursor, counts, id)
ENVELOPE = 1024

T = TypeVar("T")


def budget(max_bytes: int) -> ByteBudget:
    """The byte cap of one recall, list_memories or memory_history reply (`values.ByteBudget`,
    the rule every list-returning tool spends), its other fields held back."""
    return ByteBudget(max_bytes, reserve=ENVELOPE)


def item_json(item: MemoryItem) -> Doc:
    """An item as the tools return it (recall's and list_memories' fields together): what the
    byte cap measures."""
    return {
        "id": item.id,
        "namespace": item.namespace,
        "key": item.key,
        "text": item.text,
        "metadata": item.metadata,
        "score": item.score,
        "author": item.author,
        "version": item.version,
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
    }


def version_json(version: Version) -> Doc:
    return {
        "version": version.version,
        "text": version.text,
        "author": version.author,
        "updated_at": version.updated_at.isoformat(),
    }


def within(cap: ByteBudget, items: Iterable[T], measure: Callable[[T], object]) -> list[T]:
    """The leading items `cap` takes. The first one always: a memory larger than the cap alone
    (bounded by the text and metadata limits) must not end a listing or hide from recall; the
    reply then passes the cap by that one item."""
    kept: list[T] = []
    for item in items:
        if not cap.take(measure(item)) and kept:
            break
        kept.append(item)
    return kept


def cap_items(items: list[MemoryItem], max_bytes: int) -> tuple[list[MemoryItem], int]:
    """The leading items that fit in a reply of `max_bytes`, and how many were left out."""
    kept = within(budget(max_bytes), items, item_json)
    return kept, len(items) - len(kept)


def newest_within(versions: list[Version], max_bytes: int) -> list[Version]:
    """The newest versions (kept oldest first) that fit in a reply of `max_bytes`; the current one always."""
    return within(budget(max_bytes), versions[::-1], version_json)[::-1]


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

    Null or missing (no TTL), or a future date. The one clause `{$not: {$type: "date", $lte: now}}`
    matches the same documents and was measured as no faster on the embedded engine (within noise,
    either way, over three runs; benchmarks/RESULTS.md, "recall liveness filter"); without its
    `$type` it would hide every memory without a TTL there (mongoeco's `$lte` on a date matches null)."""
    return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}


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
        author=author_of(doc),
    )


def author_of(doc: Doc) -> str | None:
    """The stored `author`; None on a document written before authors were recorded."""
    value = doc.get("author")
    return value if isinstance(value, str) else None
