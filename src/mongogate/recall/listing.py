"""`list_memories`: the caller's memories, newest change first, a page at a time, through the
(scope, updated_at, _id) index; each marked with what it was stated to replace and what replaces
it now (`recall/supersession.py` `marked`), filtered by when what it says happened
(`occurred_after` <= occurred_at < `occurred_before`). Replaced memories are listed too: a
listing shows everything stored. Moved from `store.py` (issue 39: room for supersession there).
"""

from __future__ import annotations

from pymongo.errors import PyMongoError

from mongogate.errors import StorageError
from mongogate.keyset import after, decode_cursor, encode_cursor, newest_first
from mongogate.recall import documents as rd
from mongogate.recall.model import MemoryPage, MemoryScope
from mongogate.recall.pages import ITEM_FIELDS, cap_items
from mongogate.recall.repository import RecallRepository
from mongogate.recall.scope_filter import RecallFilter
from mongogate.values import check_int

#: memories per list_memories page
PAGE_DEFAULT = 20
PAGE_MAX = 100


async def list_page(
    store: RecallRepository,
    scope: MemoryScope,
    *,
    namespace: object = None,
    limit: object = None,
    cursor: object = None,
    occurred_after: object = None,
    occurred_before: object = None,
) -> MemoryPage:
    """Newest first (last written), through the (scope, updated_at, _id) index."""
    from mongogate.recall.supersession import marked  # a call's, never a start's

    n = check_int(limit, "limit", 1, PAGE_MAX, default=PAGE_DEFAULT, hint="memories per page")
    filt = RecallFilter.of(
        scope, store.clock.now(), namespace, occurred_after=occurred_after, occurred_before=occurred_before
    )
    query = filt.mongo()
    if cursor is not None:
        at, last = decode_cursor(cursor, "list_memories")
        query = {"$and": [query, after(rd.UPDATED_AT, at, last)]}
    try:
        found = store.memories.find(query, ITEM_FIELDS, sort=newest_first(rd.UPDATED_AT), limit=n + 1)
        docs = [d async for d in found]
        items = await marked(store, scope, docs[:n])
    except PyMongoError as e:
        raise StorageError("could not list the memories") from e
    items, truncated = cap_items(items, store.settings.max_response_bytes)
    more = (len(docs) > n or truncated) and items
    nxt = encode_cursor(items[-1].updated_at, items[-1].id) if more else None
    return MemoryPage(items, nxt, truncated)
