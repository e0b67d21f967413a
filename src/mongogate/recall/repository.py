"""The long-term memory collections and what every reader and writer of them shares.

`LongTermMemory` (`store.py`) builds on it, and `history.py`, `search.py` and the rankers take it:
they need the collections, the embedder, the index and the scope filter, never the store's own
operations, so no module of `recall/` imports the one that calls it. Every write of memories is
bracketed by the scope's revision (`writing`, `changed`: `indexing/coherence.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.engine.write_signal import WriteSignal
from mongogate.errors import EmbeddingUnavailable, MongogateError
from mongogate.indexing import Coherence, IndexBudget
from mongogate.recall import documents as rd
from mongogate.recall import quota
from mongogate.recall.documents import MEMORIES, REVISIONS, VERSIONS
from mongogate.recall.embedding import Embedder
from mongogate.recall.ids import in_scope, memory_id
from mongogate.recall.inprocess.cache import IndexCache
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.recall.scope_filter import RecallFilter
from mongogate.values import Doc


class RecallRepository:
    """The `memories` and `memory_versions` collections, the embedder, and the scope filter."""

    def __init__(
        self,
        db: AsyncDatabase[Doc],
        settings: LongTermSettings,
        embedder: Embedder,
        clock: Clock = SYSTEM_CLOCK,
        *,
        limits: LimitsSettings | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.embedder = embedder
        self.clock = clock
        self.limits = limits or LimitsSettings()
        self.memories: AsyncCollection[Doc] = db[MEMORIES]
        self.versions: AsyncCollection[Doc] = db[VERSIONS]
        #: the revision protocol of the scopes' memories (one document per scope in
        #: `memory_revisions`); on the embedded engine, every writer and reader of this machine
        #: shares its write signal
        self.coherence = Coherence(db[REVISIONS], db.name, WriteSignal.of(db.client))
        self.revisions: AsyncCollection[Doc] = self.coherence.revisions
        #: this process's copies of the scopes' memories, bounded by `index_budget_mb`, each
        #: tenant by its `index_tenant_share` of it while it is full
        budget = IndexBudget(settings.index_budget_mb * 1024 * 1024, settings.index_tenant_share)
        self.index = IndexCache(budget)
        #: memories stored by the previous version under uuid ids are left (`recall/ids.py`):
        #: identity lookups fall back to a query; True until `ensure_indexes` has looked
        self.legacy = True
        #: test seam: called at named points between a write and its reply (crash tests)
        self.fault: Callable[[str], None] | None = None

    def at(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    async def embed_one(self, text: str) -> list[float]:
        vectors = await self.embedder.embed([text])
        if len(vectors) != 1 or len(vectors[0]) != self.embedder.dimensions:
            raise EmbeddingUnavailable(
                f"the embedding model {self.embedder.model!r} answered with the wrong shape; "
                "nothing was stored"
            )
        return vectors[0]

    async def changed(
        self,
        scope: MemoryScope,
        *memory_ids: str,
        held: int = 0,
        alive: int | None = 0,
        expiring: datetime | None = None,
    ) -> None:
        """After every write of memories: the scope's revision + 1 (every process's index sees it),
        and `held` added to its quota counter (-1 after a delete; `recall/quota.py`). For the
        quota's kept count, in the same update: `alive`, the live memories the write added (1) or
        removed (-1), None when not known (a bulk insert); `expiring`, an expiry it set."""
        inc, least = quota.moved(alive, expiring)
        if held:
            inc[rd.HELD] = held
        await self.coherence.bump(scope_key(scope), *memory_ids, inc=inc or None, least=least or None)

    @asynccontextmanager
    async def writing(
        self, scope: MemoryScope, ends_on: tuple[type[BaseException], ...] = (MongogateError,)
    ) -> AsyncIterator[None]:
        """Around every write of the scope's memories (each followed by `changed` inside): the
        write is in flight for every process's recall until the block ends (`indexing/coherence.py`,
        with the engine's write signal), so a recall in between reads its results back from the
        database. Ended on success and on a refusal (a `MongogateError`: raised before a write, or
        after its `changed`); any other exception (a lost connection, the process stopped) leaves it
        in flight, which a recall takes as abandoned after `coherence.LEASE`; `ends_on` adds the
        exceptions after which the block's writes are known to be bumped (a `changed` in a
        `finally`)."""
        async with self.coherence.writing(scope_key(scope), self.clock.now(), ends_on, clock=self.clock):
            yield

    async def lookup(self, scope: MemoryScope, ident: Doc, fields: Doc) -> Doc | None:
        """The memory of `ident` (`identity`), by its derived `_id`; None when absent or not the
        caller's. `fields` must not leave out tenant and owner."""
        doc = await self.memories.find_one({"_id": memory_id(ident)}, fields)
        if doc is None and self.legacy:  # a memory stored by the previous version, under a uuid
            doc = await self.memories.find_one(ident, fields)
        return doc if in_scope(doc, scope) else None

    def scoped(self, scope: MemoryScope, namespace: object, now: datetime) -> Doc:
        """The query of a listing or an export: the call's `RecallFilter` without metadata values."""
        return RecallFilter.of(scope, now, namespace).mongo()
