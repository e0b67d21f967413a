"""What a read of long-term memory returns: items from documents, the byte cap, the page cursor.

The cursor is the last row's sort key (updated_at, id), written and read by `keyset.py` (shared
with list_sessions). It is always combined with the caller's scope, so a forged one can only page
through the caller's own memories. The byte cap keeps the first item always (`values.within`).
"""

from __future__ import annotations

from datetime import datetime

from mongogate.recall.model import Link, MemoryItem, Similar, Source, Version
from mongogate.values import Doc, items_budget, within

#: what a memory document shows as an item (never its vector)
ITEM_FIELDS = {"embedding": 0, "text_hash": 0, "ns_path": 0, "keyed": 0}


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
        "occurred_at": iso_or_none(item.occurred_at),
        "source": source_json(item.source),
        "supersedes": links_json(item.supersedes),
        "superseded_by": links_json(item.superseded_by),
    }


def iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def links_json(links: tuple[Link, ...]) -> list[Doc]:
    return [{"id": k.id, "at": k.at.isoformat()} for k in links]


def source_json(source: Source | None) -> Doc | None:
    return None if source is None else {"session_id": source.session_id, "seq": source.seq}


def similar_json(similar: Similar | None) -> Doc | None:
    return None if similar is None else {"id": similar.id, "score": similar.score}


def version_json(version: Version) -> Doc:
    return {
        "version": version.version,
        "text": version.text,
        "author": version.author,
        "updated_at": version.updated_at.isoformat(),
        "occurred_at": iso_or_none(version.occurred_at),
        "source": source_json(version.source),
    }


def shown_json(item: MemoryItem) -> Doc:
    """An item with the evidence the recall tool adds to it (`similarity`, and `matched_terms`:
    as long as the question when the memory holds all its words, and a newer very similar
    memory): what the byte cap measures."""
    return {
        **item_json(item),
        "similarity": item.similarity,
        "matched_terms": item.matched_terms,
        "newer_similar": similar_json(item.newer_similar),
    }


def cap_items(items: list[MemoryItem], max_bytes: int) -> tuple[list[MemoryItem], int]:
    """The leading items that fit in a reply of `max_bytes`, and how many were left out."""
    kept = within(items_budget(max_bytes), items, shown_json)
    return kept, len(items) - len(kept)


def newest_within(versions: list[Version], max_bytes: int) -> list[Version]:
    """The newest versions (kept oldest first) that fit in a reply of `max_bytes`; the current one always."""
    return within(items_budget(max_bytes), versions[::-1], version_json)[::-1]


def live(now: datetime) -> Doc:
    """Not yet expired: the TTL monitor erases late (every minute or so), reads never show them.

    Null or missing (no TTL), or a future date. The one clause `{$not: {$type: "date", $lte: now}}`
    matches the same documents and was measured as no faster on the embedded engine (within noise,
    either way, over three runs; benchmarks/RESULTS.md, "recall liveness filter"); without its
    `$type` it would hide every memory without a TTL there (mongoeco's `$lte` on a date matches null)."""
    return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}


def item_of(doc: Doc, score: float | None = None) -> MemoryItem:
    """`MemoryItem.from_doc` (the name recall's readers call)."""
    return MemoryItem.from_doc(doc, score)
