"""The keyset page cursor of `list_sessions` and `list_memories`: the last row's sort key.

A cursor is `[updated_ms, id]` as compact JSON, base64url without padding: opaque to the caller,
and always combined with the caller's tenant (and owner) by the reader, so a forged one can only
page through the caller's own rows. Here, below `memory` and `recall`, because neither may import
the other (pyproject's import-linter layers).
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime, timedelta

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput
from mongogate.values import Doc, is_storable

__all__ = ["MAX_CURSOR_CHARS", "after", "decode_cursor", "encode_cursor", "newest_first"]

#: the longest cursor accepted: one for an id of 100 characters outside the BMP (12 JSON characters
#: each, as `\\uXXXX\\uXXXX`), base64 taking 4 per 3, plus the time, fits (the larger of the two
#: limits the cursors had: 2,048 for sessions, 512 for memories, which refused no cursor it wrote)
MAX_CURSOR_CHARS = 2048
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def newest_first(field: str) -> list[tuple[str, int]]:
    """The order a keyset page reads in: `field` descending, then `_id` descending (the index's)."""
    return [(field, -1), ("_id", -1)]


def after(field: str, at: datetime, row_id: str) -> Doc:
    """The rows after (`at`, `row_id`) in `newest_first(field)` order: what a cursor continues with."""
    return {"$or": [{field: {"$lt": at}}, {field: at, "_id": {"$lt": row_id}}]}


def encode_cursor(at: datetime, row_id: str) -> str:
    """The cursor that continues after the row (`at`, `row_id`)."""
    raw = json.dumps([(as_utc(at) - _EPOCH) // _MS, row_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: object, tool: str) -> tuple[datetime, str]:
    """(time, id) of a cursor `tool` returned; anything else is `InvalidInput` naming `tool`:
    not a string, empty, longer than `MAX_CURSOR_CHARS`, not base64url JSON `[int, str]`, a time
    outside datetime's range, or an id BSON cannot hold (a JSON escape can decode to a lone
    surrogate)."""
    bad = InvalidInput(
        f"cursor is not one {tool} returned; pass next_cursor from the previous page, or omit it"
    )
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR_CHARS:
        raise bad
    try:
        ms, row_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error):
        raise bad from None
    if isinstance(ms, bool) or not isinstance(ms, int) or not isinstance(row_id, str):
        raise bad
    if not is_storable(row_id):
        raise bad
    try:
        return _EPOCH + ms * _MS, row_id
    except OverflowError:
        raise bad from None
