"""What message search derives from each message, stored beside it (`message_index`,
`documents.MessageIndexDoc`, the same `_id`): its terms (`message_terms.py`, of its whole text)
and the vector of its first `[memory.search] embed_chars` characters. Never a whole scope at once:

- per message: at most `embed_chars` characters are embedded (a message too long to embed whole
  is still found by every one of its terms), and its text is tokenized in a worker thread when
  long (`message_terms.terms_of_async`);
- per call (`fill`): at most `embed_per_call` messages, and at most TOKENIZE_CHARS characters of
  text to tokenize (one message always), in one batch for the model;
- per tenant: one `fill` at a time (a search finding the tenant's batch in progress waits for it,
  then derives what is still missing); the background takes tenants in turn, then each tenant's
  scopes in turn, one batch each (a tenant with many subjects gets no more turns than one with
  one), and skips a tenant whose search is deriving;
- in the background (`want`, `drain`): a server process queues the messages each write stored
  (`guard.MessageGuard.on_written`) and what its searches found missing, at most QUEUE_PER_SCOPE
  per scope, QUEUE_PER_TENANT per tenant (whatever its subjects: one tenant never fills the
  queue for every other) and QUEUE_MAX in all (more is dropped: the next search of the scope
  finds it again).

Each batch is one write bracketed by its scope's revision (`memory/guard.py`, changes `x:<id>`),
so every process's index reads the derived documents (by `_id`) and finds the messages by them.
An embedder that fails is left alone for EMBEDDER_REST (the injectable clock): the terms are
written meanwhile, the vectors later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import anyio
from pymongo import DeleteOne, ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError

from mongogate.config import MessageSearchSettings
from mongogate.errors import EmbeddingUnavailable
from mongogate.indexing import pack, read_by_id
from mongogate.memory import documents as md
from mongogate.memory.guard import derived
from mongogate.memory.message_terms import TERMS_VERSION, encoded, of_message, terms_of_async
from mongogate.memory.messages import DUPLICATE_KEY
from mongogate.memory.repository import SessionRepository
from mongogate.values import Doc

log = logging.getLogger(__name__)

__all__ = [
    "EMBEDDER_REST",
    "QUEUE_MAX",
    "QUEUE_PER_SCOPE",
    "QUEUE_PER_TENANT",
    "TOKENIZE_CHARS",
    "FillStats",
    "MessageFill",
]

#: the most characters of text one `fill` tokenizes (one message always)
TOKENIZE_CHARS = 1024 * 1024
#: messages queued for the background, per scope and in all
QUEUE_PER_SCOPE = 4096
QUEUE_MAX = 65_536
#: messages queued per tenant, across its subjects' scopes (at least 8 tenants fill QUEUE_MAX)
QUEUE_PER_TENANT = QUEUE_MAX // 8
#: how long an embedder that failed is left alone
EMBEDDER_REST = timedelta(seconds=30)
#: what a fill reads of a message
_READ = dict.fromkeys((md.SESSION_ID, md.TENANT, "content", "created_at"), 1)


class TextEmbedder(Protocol):
    """Long-term memory's embedder (`recall.Embedder`) as message search uses it (`memory` may not
    import `recall`)."""

    model: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@dataclass
class FillStats:
    #: messages whose derived document was written
    derived: int = 0
    #: messages embedded, and the characters sent to the model
    embedded: int = 0
    embedded_chars: int = 0
    #: characters tokenized
    tokenized_chars: int = 0
    #: messages not queued (a queue was full)
    dropped: int = 0
    #: batches whose embedding failed (their terms were written)
    embedder_failures: int = 0


class MessageFill:
    """The bounded derivation of messages' terms and vectors (module docstring)."""

    def __init__(
        self,
        repo: SessionRepository,
        embedder: TextEmbedder | None,
        settings: MessageSearchSettings,
        *,
        background: bool = False,
    ) -> None:
        self.repo = repo
        self.embedder = embedder
        self.per_call = settings.embed_per_call
        self.chars = settings.embed_chars
        self.background = background
        self.stats = FillStats()
        #: tenant -> its scopes -> their queued message ids: tenants take turns, then their scopes
        self._queue: OrderedDict[str, OrderedDict[str, dict[str, None]]] = OrderedDict()
        self._queued = 0
        #: per tenant: how many of its messages are queued (QUEUE_PER_TENANT at most)
        self._per_tenant: dict[str, int] = {}
        #: per tenant: how many fills hold or wait for its lock (one fill at a time per tenant)
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._rest_until: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        #: test seam: awaited with the ids of a batch after they are derived, before the write
        self.before_write: Callable[[list[str]], Awaitable[None]] | None = None

    # -- the queue ----------------------------------------------------------------------------

    def want(self, key: str, ids: Sequence[str], *, tenant: str) -> None:
        """Queue `ids` of scope `key`, a scope of `tenant` (`MemoryScope.tenant`: the queue's and
        the lock's turns are per tenant), for the background (bounded; the rest is dropped)."""
        scopes = self._queue.setdefault(tenant, OrderedDict())
        held = scopes.setdefault(key, {})
        for mid in ids:
            if mid in held:
                continue
            full = self._queued >= QUEUE_MAX or self._per_tenant.get(tenant, 0) >= QUEUE_PER_TENANT
            if len(held) >= QUEUE_PER_SCOPE or full:
                self.stats.dropped += 1
                continue
            held[mid] = None
            self._queued += 1
            self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        if not held:
            del scopes[key]
        if not scopes:
            del self._queue[tenant]
        if self.background and self._queue and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    def resting(self) -> bool:
        """The embedder failed lately and is left alone: only terms are worth deriving now."""
        return self._rest_until is not None and self.repo.clock.now() < self._rest_until

    def queued(self) -> int:
        return self._queued

    def _next(self) -> tuple[str, str, list[str]] | None:
        """The next tenant in turn that is not busy, its next scope in turn, and that scope's next
        batch: a tenant writing through many subjects gets one turn as any other tenant does."""
        for tenant in list(self._queue):
            if tenant in self._locks:  # a search of the tenant is on it, or waits
                continue
            scopes = self._queue.pop(tenant)
            key, held = scopes.popitem(last=False)
            batch = list(held)[: self.per_call]
            for mid in batch:
                del held[mid]
            self._queued -= len(batch)
            left = self._per_tenant.pop(tenant) - len(batch)
            if left:
                self._per_tenant[tenant] = left
            if held:
                scopes[key] = held  # to the end: the tenant's next scope goes first
            if scopes:
                self._queue[tenant] = scopes  # to the end: the next tenant goes first
            return tenant, key, batch
        return None

    async def drain(self) -> None:
        """Derive everything queued, a batch at a time, scopes in turn (the background's loop;
        tests call it to finish the work without waiting)."""
        while (step := self._next()) is not None:
            tenant, key, batch = step
            try:
                await self.fill(key, batch, tenant=tenant)
            except Exception as e:  # the next search of the scope finds these again
                log.warning("message search: deriving %d message(s) failed: %s", len(batch), e)
            await anyio.sleep(0)

    async def settle(self) -> None:
        """Until nothing is queued and the background is idle (tests, and a shutdown that may wait)."""
        while True:
            task = self._task
            if task is not None and not task.done():
                await asyncio.wait([task])
            await self.drain()
            if not self._queued and (self._task is None or self._task.done()):
                return

    async def _run(self) -> None:
        await self.drain()

    async def aclose(self) -> None:
        """Stop the background (at shutdown); what is queued is left to later searches."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- one batch ----------------------------------------------------------------------------

    async def fill(self, key: str, ids: Sequence[str], *, tenant: str) -> list[str]:
        """Derive at most `embed_per_call` of `ids` (scope `key`, of `tenant`) not derived yet,
        within TOKENIZE_CHARS of text, after the tenant's fill in progress (one batch at most);
        the ids derived."""
        if not ids:
            return []
        lock, users = self._locks.setdefault(tenant, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                return await self._fill(key, list(ids))
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[tenant]

    async def _underived(self, ids: list[str]) -> tuple[list[str], set[str]]:
        """The first `embed_per_call` of `ids` whose derived document is missing or stale, and
        those whose derived document is another message's (`message_terms.of_message`: replaced
        whole when written, never field by field)."""
        fields = {md.TERMS_V: 1, md.EMBEDDING_MODEL: 1, md.TENANT: 1, "created_at": 1}
        have = await read_by_id(self.repo.db[md.MESSAGE_INDEX], ids, fields)
        # whose message each is (a small read by `_id`): another message's is replaced whole
        mine = await read_by_id(self.repo.messages, list(have), {md.TENANT: 1, "created_at": 1})
        others = {i for i, d in have.items() if i in mine and not of_message(d, mine[i])}
        model = None if self.embedder is None or self.resting() else self.embedder.model
        current = {
            i
            for i, d in have.items()
            if d.get(md.TERMS_V) == TERMS_VERSION
            and (model is None or d.get(md.EMBEDDING_MODEL) == model)
            and i not in others
        }
        return [i for i in ids if i not in current][: self.per_call], others

    async def _fill(self, key: str, wanted: list[str]) -> list[str]:
        ids, others = await self._underived(wanted)
        if not ids:
            return []
        found = await read_by_id(self.repo.messages, ids, _READ)
        docs: list[Doc] = []
        size = 0
        for mid in ids:
            doc = found.get(mid)
            if doc is None or doc.get(md.TENANT) != key or not isinstance(doc.get("content"), str):
                continue
            if docs and size + len(doc["content"]) > TOKENIZE_CHARS:
                break
            size += len(doc["content"])
            docs.append(doc)
        if not docs:
            return []
        out: list[Doc] = []
        for doc in docs:
            terms = await terms_of_async(doc["content"], self.repo.settings.max_message_bytes)
            out.append(
                {
                    "_id": doc["_id"],
                    md.SESSION_ID: doc[md.SESSION_ID],
                    md.TENANT: key,
                    "created_at": doc["created_at"],
                    **encoded(terms),
                }
            )
        self.stats.tokenized_chars += size
        await self._embed(docs, out)
        await self._write(key, out, others)
        return [str(d["_id"]) for d in out]

    async def _embed(self, docs: list[Doc], out: list[Doc]) -> None:
        """The vectors of the messages' first `embed_chars` characters, into `out` (none while the
        embedder rests after a failure)."""
        now = self.repo.clock.now()
        if self.embedder is None or self.resting():
            return
        prefixes = [str(d["content"])[: self.chars] for d in docs]
        try:
            vectors = await self.embedder.embed(prefixes)
            if len(vectors) != len(prefixes) or any(len(v) != self.embedder.dimensions for v in vectors):
                raise EmbeddingUnavailable("the embedder answered with the wrong number or size of vectors")
            packed = [pack(v) for v in vectors]
        except Exception as e:  # the model is code we do not own: any failure is "unavailable"
            self.stats.embedder_failures += 1
            self._rest_until = now + EMBEDDER_REST
            log.warning("message search: the embedder failed (%s); terms only for now", e)
            return
        for d, text, vec in zip(out, prefixes, packed, strict=True):
            d |= {md.EMBEDDING: vec, md.EMBEDDING_MODEL: self.embedder.model, md.CHARS: len(text)}
        self.stats.embedded += len(prefixes)
        self.stats.embedded_chars += sum(len(t) for t in prefixes)

    async def _write(self, key: str, out: list[Doc], others: set[str]) -> None:
        """The derived documents, inserted (or, where one exists, replaced field by field, or
        whole where it is another message's: `others`), in one write bracketed by the scope's
        revision."""
        coll = self.repo.db[md.MESSAGE_INDEX]
        if self.before_write is not None:
            await self.before_write([str(d["_id"]) for d in out])
        async with self.repo.guard.writing(key, [derived(str(d["_id"])) for d in out]):
            try:
                await coll.insert_many(out, ordered=False)
            except BulkWriteError as e:
                errors = e.details.get("writeErrors") or []
                if not errors or any(err.get("code") != DUPLICATE_KEY for err in errors):
                    raise
                again = [out[int(err["index"])] for err in errors]
                await coll.bulk_write([_again(d, str(d["_id"]) in others) for d in again])
            await self._take_back(key, out)
        self.stats.derived += len(out)

    async def _take_back(self, key: str, out: list[Doc]) -> None:
        """The derived documents just written whose message is gone or another (a pop, clear,
        delete_session or erasure ran between the fill's read and its write), deleted: the erased
        words never stay in `message_index`. Checked after the write: an eraser deletes the
        message before its derived document, so either it deletes ours or we see its message gone.
        Each deleted only as written (tenant, created_at): a newer derivation of a new message of
        the same `_id` stays."""
        left = await read_by_id(
            self.repo.messages, [str(d["_id"]) for d in out], {md.TENANT: 1, "created_at": 1}
        )
        gone = [d for d in out if (m := left.get(str(d["_id"]))) is None or not of_message(d, m)]
        if gone:
            mine = [{"_id": d["_id"], md.TENANT: key, "created_at": d["created_at"]} for d in gone]
            await self.repo.db[md.MESSAGE_INDEX].bulk_write([DeleteOne(f) for f in mine])
            log.info("message search: %d derivation(s) taken back (their message was erased)", len(gone))


def _again(doc: Doc, whole: bool) -> ReplaceOne[Doc] | UpdateOne:
    """The write of a derived document over the one stored: whole when that one is another
    message's (its vector must not stay), else field by field (a vector kept while the embedder
    rests)."""
    if whole:
        return ReplaceOne({"_id": doc["_id"]}, doc)
    return UpdateOne({"_id": doc["_id"]}, {"$set": {k: v for k, v in doc.items() if k != "_id"}})
