"""search_messages as the tools run it (`memory.MessageSearch`), for tests that search a store
directly: one searcher per store (its indexes kept between calls, as a server's are), on its own
index budget, by terms alone unless given an embedder."""

from __future__ import annotations

import weakref
from typing import Any

from mongogate.config import MessageSearchSettings
from mongogate.indexing import IndexBudget
from mongogate.memory.message_fill import TextEmbedder
from mongogate.memory.repository import SessionRepository
from mongogate.memory.search import Hits, MessageSearch

#: the floor a server uses by default (`memory.long_term.min_score`)
FLOOR = 0.125
_searchers: weakref.WeakKeyDictionary[SessionRepository, MessageSearch] = weakref.WeakKeyDictionary()


def searcher(
    store: SessionRepository,
    embedder: TextEmbedder | None = None,
    *,
    min_score: float = FLOOR,
    budget_bytes: int = 256 * 1024 * 1024,
    background: bool = False,
    **settings: Any,
) -> MessageSearch:
    """A new searcher of `store` (kept as the one `search_messages` uses for it)."""
    found = MessageSearch(
        store,
        IndexBudget(budget_bytes),
        embedder,
        MessageSearchSettings(**settings),
        min_score=min_score,
        background=background,
    )
    _searchers[store] = found
    return found


async def search_messages(store: SessionRepository, tenant: str, query: object, **kw: Any) -> Hits:
    """One search through the store's searcher (a term-only one made at first use); the scope is
    the tenant's own unless `owner` says whose it is."""
    found = _searchers.get(store) or searcher(store)
    return await found.search(tenant, query, **{"owner": tenant, **kw})
