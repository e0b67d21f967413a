"""Completion of memory ids by prefix (MCP `completion/complete` for `mongogate://memories/{id}`).

Answered from the scope's in-process index (`inprocess/cache.py`), kept fresh by the revision
protocol like a recall's: one revision read by `_id` (or none, with the engine's write signal),
then a bisection of the ids the index keeps in order. Why not a prefix query in the database: the
scope's index is already kept for recall, and on the embedded engine only a read by `_id` is known
to stay flat as a collection grows (docs/prompts-and-resources.md "Completions"); the index is read
whole only where a first recall would read it (and reports its progress then).
"""

from __future__ import annotations

from typing import Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongogate.clock import Clock
from mongogate.errors import StorageError
from mongogate.recall.coherence import Coherence
from mongogate.recall.embedding import Embedder
from mongogate.recall.inprocess.cache import IndexCache
from mongogate.recall.model import MemoryScope
from mongogate.values import Doc

__all__ = ["memory_ids"]


class Source(Protocol):
    """What completion reads of the store (`RecallRepository`)."""

    memories: AsyncCollection[Doc]
    coherence: Coherence
    index: IndexCache
    embedder: Embedder
    clock: Clock


async def memory_ids(store: Source, scope: MemoryScope, prefix: str, limit: int) -> tuple[list[str], bool]:
    """The scope's live memory ids starting with `prefix`, in order, at most `limit`, and whether
    more exist."""
    now = store.clock.now()
    model = store.embedder
    try:
        fresh = await store.index.fresh(
            store.memories, store.coherence, scope, model.model, model.dimensions, now
        )
    except PyMongoError as e:
        raise StorageError("could not read the memories to complete") from e
    return fresh.index.ids_from(prefix, limit, now)
