"""Re-embed memories after the embedding model changed (`mongogate memory reembed`).

`recall` never compares vectors of two models, so after `[memory.embedding]` changes, the
memories embedded by the old model are found by exact term only until they are re-embedded.
This walks every memory whose `embedding_model` is not the configured one (or that has no
embedding), in `_id` order and in batches, and writes each new vector with a conditional
update on the `version` and `embedding_model` it read:

- idempotent: a re-embedded memory no longer matches, so a second run finds nothing to do;
- resumable: stopped anywhere (an embedder outage, Ctrl-C, a crash), the next run starts over
  on what is still stale; nothing is half-written (one update per memory sets vector, model
  and size together);
- safe beside a serving mongogate: a memory changed between the read and the write (a new
  `version`, or embedded anew by `remember`) is skipped, never overwritten with the vector of
  its old text;
- seen by every serving process at once: each batch's write is bracketed per scope like every
  other write of memories (the scope's revision and the engine's write signal,
  `indexing/coherence.py`), so the indexes re-read the memories it wrote and find them by meaning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any

from pymongo import ASCENDING, UpdateOne
from pymongo.errors import PyMongoError

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.engine.write_signal import WriteSignal
from mongogate.errors import StorageError
from mongogate.indexing import Coherence, pack
from mongogate.leases import keep_unless, literal, same
from mongogate.recall import documents as rd
from mongogate.recall.documents import MEMORIES, REVISIONS
from mongogate.recall.embedding import Embedder
from mongogate.recall.model import MemoryScope, scope_key

log = logging.getLogger(__name__)

__all__ = ["COLLECTION", "ReembedReport", "reembed", "stale_counts"]

COLLECTION = MEMORIES
#: what a batch reads of each memory
_FIELDS = {"_id": 1, "text": 1, rd.VERSION: 1, rd.EMBEDDING_MODEL: 1, rd.TENANT: 1, rd.OWNER: 1}

Doc = dict[str, Any]
#: a test failpoint: runs after a batch is embedded and before it is written
BeforeWrite = Callable[[list[Doc]], Awaitable[None]]


@dataclass
class ReembedReport:
    model: str
    #: memories read that needed a new vector
    seen: int = 0
    #: written with the configured model
    reembedded: int = 0
    #: changed by someone else between the read and the write (left to its writer)
    skipped: int = 0
    #: memories still not embedded by the configured model after this run
    remaining: int = 0

    def lines(self) -> list[str]:
        """What `mongogate memory reembed` prints."""
        out = [f"re-embedded {self.reembedded} of {self.seen} memories with {self.model}"]
        if self.skipped:
            out.append(f"skipped {self.skipped} changed while re-embedding (left to their writer)")
        left = self.remaining
        out.append(f"{left} memories still to re-embed" if left else "nothing left to re-embed")
        return out


def _stale(model: str) -> Doc:
    # `$ne` also matches memories without the field (never embedded, or marked for embedding)
    return {rd.EMBEDDING_MODEL: {"$ne": model}}


async def stale_counts(db: Any, model: str) -> dict[str, int]:
    """Memories not embedded by `model`, per model they were embedded by ("(none)": not at all)."""
    try:
        cursor = await db[COLLECTION].aggregate(
            [{"$match": _stale(model)}, {"$group": {"_id": "$embedding_model", "n": {"$sum": 1}}}]
        )
        rows = await cursor.to_list(length=None)
    except PyMongoError as e:
        raise StorageError("counting memories to re-embed") from e
    return {str(r["_id"]) if r["_id"] is not None else "(none)": int(r["n"]) for r in rows}


async def reembed(
    db: Any,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    before_write: BeforeWrite | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> ReembedReport:
    """Re-embed every memory of `db` not embedded by `embedder.model`; `EmbeddingUnavailable`
    stops the run (what was written stays written; run again to go on)."""
    if batch_size < 1:
        raise ValueError("batch_size must be 1 or more")
    report = ReembedReport(model=embedder.model)
    coll = db[COLLECTION]
    # one read of every stale memory, in `_id` order and in batches (a query per batch scanned
    # the collection each time on the embedded engine)
    cursor = coll.find(_stale(embedder.model), _FIELDS, sort=[("_id", ASCENDING)], batch_size=batch_size)
    while True:
        try:
            batch = await cursor.to_list(batch_size)
        except PyMongoError as e:
            raise StorageError("reading memories to re-embed") from e
        if not batch:
            break
        report.seen += len(batch)
        vectors = await embedder.embed([str(d.get("text", "")) for d in batch])
        if before_write is not None:
            await before_write(batch)
        writes = [_write(d, vec, embedder) for d, vec in zip(batch, vectors, strict=True)]
        try:
            result = await _bracketed(db, batch, partial(coll.bulk_write, writes, ordered=False), clock)
        except PyMongoError as e:
            raise StorageError("writing re-embedded memories") from e
        report.reembedded += result.modified_count
        report.skipped += len(batch) - result.modified_count
        log.info("re-embedded %d memories (%d so far)", result.modified_count, report.reembedded)
    try:
        report.remaining = await coll.count_documents(_stale(embedder.model))
    except PyMongoError as e:
        raise StorageError("counting memories to re-embed") from e
    return report


def _write(doc: Doc, vector: list[float], embedder: Embedder) -> UpdateOne:
    """The new vector of `doc`, by `_id` alone (flat on the embedded engine, where a second field
    in the filter scans the collection), applied only if the memory still has the `version` and
    `embedding_model` read (the condition inside the pipeline: `leases.keep_unless`)."""
    ok = {
        "$and": [same(rd.VERSION, doc.get(rd.VERSION)), same(rd.EMBEDDING_MODEL, doc.get(rd.EMBEDDING_MODEL))]
    }
    fields = {
        "embedding": pack(vector),
        rd.EMBEDDING_MODEL: embedder.model,
        "embedding_dims": embedder.dimensions,
    }
    return UpdateOne({"_id": doc["_id"]}, [keep_unless(ok, {k: literal(v) for k, v in fields.items()})])


async def _bracketed(db: Any, batch: list[Doc], write: Callable[[], Awaitable[Any]], clock: Clock) -> Any:
    """`write` in flight for every scope of `batch` (a token in each scope's revision document and
    the write signal held), then each scope's revision bumped naming its memories, as
    `RecallRepository.writing` + `changed` do for one scope."""
    scopes: dict[str, list[str]] = {}
    for d in batch:
        scope = MemoryScope(str(d.get(rd.TENANT)), str(d.get(rd.OWNER)))
        scopes.setdefault(scope_key(scope), []).append(str(d["_id"]))
    guard = Coherence(db[REVISIONS], db.name, WriteSignal.of(db.client))
    async with guard.announcing(*scopes, clock=clock):  # one open file for every scope of the batch
        # begun at the injectable clock's time: the lease ages the writes by it
        tokens = {key: await guard.begin(key, clock.now()) for key in scopes}
        async with AsyncExitStack() as ends:
            for key, ids in scopes.items():  # bumped whether the write went through or not
                ends.push_async_callback(partial(guard.bump, key, *ids, token=tokens[key]))
            return await write()
