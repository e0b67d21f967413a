"""The long-term memory collections and what every reader and writer of them shares.

`LongTermMemory` (`store.py`) builds on it, and `history.py` and `search.py` take it: they need
the collections, the embedder and the scope filter, never the store's own operations, so no
module of `recall/` imports the one that calls it.
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
from mongogate.recall import checks
from mongogate.recall.embedding import Embedder
from mongogate.recall.index import REVISIONS, IndexCache, begin, bump
from mongogate.recall.model import MemoryScope
from mongogate.recall.pages import live
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
        self.memories: AsyncCollection[Doc] = db["memories"]
        self.versions: AsyncCollection[Doc] = db["memory_versions"]
        #: one document per scope: the revision every write bumps (`recall/index.py`)
        self.revisions: AsyncCollection[Doc] = db[REVISIONS]
        #: this process's copies of the scopes' memories, bounded by `index_budget_mb`
        self.index = IndexCache(settings.index_budget_mb * 1024 * 1024, db.name)
        #: on the embedded engine, every writer and reader of this machine shares its signal
        self.index.signal = WriteSignal.of(db.client)
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

    async def changed(self, scope: MemoryScope, *memory_ids: str, held: int = 0) -> None:
        """After every write of memories: the scope's revision + 1 (every process's index sees it),
        and `held` added to its quota counter (-1 after a delete; `recall/quota.py`)."""
        await bump(self.revisions, scope, *memory_ids, held=held)

    @asynccontextmanager
    async def writing(
        self, scope: MemoryScope, ends_on: tuple[type[BaseException], ...] = (MongogateError,)
    ) -> AsyncIterator[None]:
        """Around every write of the scope's memories (each followed by `changed` inside): the
        write is in flight for every process's recall until the block ends (`recall/index.py`),
        so a recall in between reads its results back from the database. Ended on success and
        on a refusal (a `MongogateError`: raised before a write, or after its `changed`); any other
        exception (a lost connection, the process stopped) leaves it in flight, which a recall
        takes as abandoned after `index.LEASE`; `ends_on` adds the exceptions after which the
        block's writes are known to be bumped (a `changed` in a `finally`)."""
        async with self.index.announcing(scope, clock=self.clock):  # the write signal: in flight till the end
            token = await begin(self.revisions, scope, self.clock.now())
            try:
                yield
            except ends_on:
                await bump(self.revisions, scope, token=token)
                raise
            await bump(self.revisions, scope, token=token)

    def scoped(self, scope: MemoryScope, namespace: object, now: datetime) -> Doc:
        query: Doc = dict(scope.match())
        if namespace is not None:
            query["ns_path"] = checks.check_namespace(namespace)
        return query | live(now)
