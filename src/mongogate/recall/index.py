"""The in-process scope indexes, kept coherent across server processes by the database.

Every write of a scope's memories (remember, forget, an expiry set, an expired memory erased)
is bracketed by the scope's revision document in `memory_revisions` (`_id` = the scope), each
step one update by `_id` (flat on the embedded engine):

- `begin` before the memory write: `pending.<token>: now` (a write in flight);
- `bump` after it, before the call answers: `rev + 1` per memory written, `changes` (the last
  CHANGES ids written), and the token unset (`bump(..., token=)`).

A recall reads that document by `_id` first, then:

- same revision as its index: the index answers;
- newer, and every change since is still in `changes`: the index re-reads only those memories
  by `_id` (gone ones are removed);
- else (first use, evicted, too far behind, another model): the scope is read whole.

The revision is read BEFORE the memories, so an index is never labelled newer than what it
holds. With no write in flight at that read, every memory write that happened before it has
bumped the revision, so the index, once patched, holds every memory as the database does:
the recall answers from it (`Fresh.settled`). With a write in flight (between its `begin` and
its `bump`, or its process died there), the recall reads its results back by `_id` and the
database decides. A token older than LEASE (by the injectable clock) is taken as abandoned: it
is unset and the revision jumped past CHANGES, so every process's index is read whole once.

On the embedded engine, every process is on the engine's machine, and the write signal
(`engine/write_signal.py`) lets a recall skip the revision read: each bracketed write also moves
its scope's counter in a shared file and holds a lock there while in flight; a recall that finds
no write in flight and the counter where it was at its last settled revision read answers from
the index without reading (`IndexStats.unread`).

Indexes live in one LRU map bounded by `[memory.long_term] index_budget_mb`; the least recently
used scope is dropped past the budget (the one being used stays, even alone larger).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.engine.write_signal import WriteSignal
from mongogate.recall.model import MemoryScope
from mongogate.recall.scope_index import INDEX_FIELDS, ScopeIndex
from mongogate.textrank import fold, query_tokens
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: changes kept in a revision document (an index further behind is rebuilt)
CHANGES = 256
REVISIONS = "memory_revisions"
#: changes the revision read asks for (`read_head`): an index further behind reads them all
HEAD_CHANGES = 16
#: stripped from a question's words before they are shown as `matched_terms`
WORD_EDGES = "?!,;:\"'()[]{}<>#*`.-"
#: question embeddings kept (`IndexCache.query_vector`): 256 floats each, about 10 KiB as a list
QUERIES = 256
#: a write in flight longer than this is taken as abandoned (its process died between its
#: memory write and its bump); far longer than any write takes
LEASE = timedelta(minutes=5)


def scope_key(scope: MemoryScope) -> str:
    return f"{len(scope.tenant)}:{scope.tenant}:{scope.owner}"


async def begin(revisions: AsyncCollection[Doc], scope: MemoryScope, now: datetime) -> str:
    """Before a write of the scope's memories: the write is in flight (recalls read their results
    back until it ends). Returns the token to pass to `bump`."""
    token = uuid.uuid4().hex
    await revisions.update_one({"_id": scope_key(scope)}, {"$set": {f"pending.{token}": now}}, upsert=True)
    return token


async def bump(
    revisions: AsyncCollection[Doc],
    scope: MemoryScope,
    *memory_ids: str,
    token: str | None = None,
    held: int = 0,
) -> None:
    """The scope's revision + 1 per memory that changed, naming each (one change per revision is
    what a refresh patches from), and the write `token` (from `begin`) no longer in flight. A
    bulk import names many in one write; more than `CHANGES` of them make every index of the
    scope rebuild. `held` is added to the scope's quota counter in the same update (-1 after a
    memory was deleted; `recall/quota.py`)."""
    update: Doc = {}
    if memory_ids:
        update["$inc"] = {"rev": len(memory_ids), **({"held": held} if held else {})}
        update["$push"] = {"changes": {"$each": list(memory_ids), "$slice": -CHANGES}}
    if token is not None:
        update["$unset"] = {f"pending.{token}": ""}
    if update:
        await revisions.update_one({"_id": scope_key(scope)}, update, upsert=True)


async def read_by_id(memories: AsyncCollection[Doc], ids: list[str], fields: Doc) -> dict[str, Doc]:
    """The documents of `ids`, one `find_one` by `_id` each: on the embedded engine that stays
    flat in the collection's size (1-6 ms at 10,000 documents) where `{_id: {$in: ids}}` and any
    filter beside `_id` scan (0.2-1.9 s; docs/decisions/recall-index.md)."""
    out: dict[str, Doc] = {}
    for mid in ids:
        doc = await memories.find_one({"_id": mid}, fields)
        if doc is not None:
            out[mid] = doc
    return out


async def read_head(
    revisions: AsyncCollection[Doc], key: str, held: int | None, *, whole: bool = False
) -> Doc | None:
    """The scope's revision document: `rev`, `pending` and the last `HEAD_CHANGES` of `changes`
    (one read by `_id`; the whole list of CHANGES ids took a third of the read's time). Read again
    with every change when an index at revision `held` is further behind than those; the second
    read is the newer, and everything comes from it (the revision still read before any memory)."""
    last = 1 if whole else {"$slice": -HEAD_CHANGES}
    head = await revisions.find_one({"_id": key}, {"rev": 1, "pending": 1, "changes": last})
    if head is None or held is None:
        return head
    behind = int(head.get("rev") or 0) - held
    if behind > HEAD_CHANGES and len(head.get("changes") or []) >= HEAD_CHANGES:
        head = await revisions.find_one({"_id": key}, {"rev": 1, "pending": 1, "changes": 1})
    return head


@dataclass(frozen=True)
class QueryTerms:
    """What a recall reads of its question's text: its distinct tokens, in order (what the index
    ranks by), and each distinct word as typed (folded) with its tokens (what `matched_terms`
    shows). A pure function of the text."""

    tokens: tuple[str, ...]
    words: tuple[tuple[str, frozenset[str]], ...]

    @classmethod
    def of(cls, text: str) -> QueryTerms:
        words: dict[str, frozenset[str]] = {}
        for raw in fold(text).split():
            word = raw.strip(WORD_EDGES)
            toks = frozenset(query_tokens(word))
            if toks and word not in words:
                words[word] = toks
        return cls(tuple(query_tokens(text)), tuple(words.items()))

    def matched(self, held: frozenset[str]) -> list[str]:
        """The words whose tokens `held` (a memory's matched tokens) has, in order."""
        return [w for w, toks in self.words if not toks.isdisjoint(held)]


@dataclass(frozen=True)
class Fresh:
    """A scope's index as of the revision just read, and whether a write was in flight then."""

    index: ScopeIndex
    #: no write in flight: the index holds what the database does (no read-back needed)
    settled: bool


@dataclass
class IndexStats:
    rebuilds: int = 0
    patches: int = 0
    fresh: int = 0
    evictions: int = 0
    #: recalls that read their results back (a write in flight when the revision was read)
    readbacks: int = 0
    #: writes in flight past LEASE, taken as abandoned (every index of the scope read whole)
    abandoned: int = 0
    #: recalls answered with no revision read: the write signal said nothing changed
    unread: int = 0


class IndexCache:
    """MemoryScope -> ScopeIndex, least recently used first out past `budget_bytes`."""

    def __init__(self, budget_bytes: int, database: str = "") -> None:
        self.budget_bytes = budget_bytes
        self._indexes: OrderedDict[str, ScopeIndex] = OrderedDict()
        self.stats = IndexStats()
        #: (model, question) -> its embedding, the last QUERIES asked (a question asked again,
        #: as agents do, skips the model: 0.6 ms of a recall)
        self._queries: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        #: False: every recall reads its results back and embeds its question, as before the
        #: settled path (benchmarks/recall_index.py measures both in one run)
        self.answer_settled = True
        #: question -> its tokens and words (`query_terms`), the last QUERIES asked
        self._terms: OrderedDict[str, QueryTerms] = OrderedDict()
        #: False: the revision read takes every change and questions are tokenized each call, as
        #: before they were trimmed (benchmarks/recall_index.py measures both in one run)
        self.lean = True
        #: the engine's write signal (`engine/write_signal.py`), None where there is none (TCP,
        #: a remote MongoDB): then every recall reads the revision
        self.signal: WriteSignal | None = None
        #: False: the signal is still written but never trusted (benchmarks/recall_index.py)
        self.trust_signal = True
        #: the name of the database the memories are in (part of `signal_key`)
        self.database = database

    def signal_key(self, scope: MemoryScope) -> str:
        """The scope as the write signal knows it: with the database's name, so the same scope
        in two databases of one engine (tests, two deployments) does not share a counter."""
        return f"{len(self.database)}:{self.database}:{scope_key(scope)}"

    @contextlib.asynccontextmanager
    async def announcing(self, *scopes: MemoryScope, clock: Clock = SYSTEM_CLOCK) -> AsyncIterator[None]:
        """Around a whole bracketed write of `scopes` (`RecallRepository.writing`, a reembed
        batch): in flight for every process's write signal until the block ends. Its locks are
        waited for on `clock`, never inside the event loop (engine/write_signal.py)."""
        if self.signal is None:
            yield
            return
        async with self.signal.writing(*(self.signal_key(scope) for scope in scopes), clock=clock):
            yield

    def query_vector(self, model: str, text: str) -> list[float] | None:
        vec = self._queries.get((model, text)) if self.answer_settled else None
        if vec is not None:
            self._queries.move_to_end((model, text))
        return vec

    def keep_query_vector(self, model: str, text: str, vector: list[float]) -> None:
        self._queries[(model, text)] = vector
        while len(self._queries) > QUERIES:
            self._queries.popitem(last=False)

    def query_terms(self, text: str) -> QueryTerms:
        """The question's tokens and words (`QueryTerms.of`), the last QUERIES asked kept by text
        (tokenizing and stemming them was a tenth of a recall at 1,000 memories)."""
        terms = self._terms.get(text) if self.lean else None
        if terms is None:
            terms = QueryTerms.of(text)
            self._terms[text] = terms
            while len(self._terms) > QUERIES:
                self._terms.popitem(last=False)
        else:
            self._terms.move_to_end(text)
        return terms

    def nbytes(self) -> int:
        return sum(i.nbytes() for i in self._indexes.values())

    def __len__(self) -> int:
        return len(self._indexes)

    async def get(
        self,
        memories: AsyncCollection[Doc],
        revisions: AsyncCollection[Doc],
        scope: MemoryScope,
        model: str,
        dims: int,
    ) -> ScopeIndex:
        """The scope's index, fresh as of the revision read now."""
        return (await self.fresh(memories, revisions, scope, model, dims)).index

    async def fresh(
        self,
        memories: AsyncCollection[Doc],
        revisions: AsyncCollection[Doc],
        scope: MemoryScope,
        model: str,
        dims: int,
        now: datetime | None = None,
    ) -> Fresh:
        """The scope's index, fresh as of the revision read now, and whether it is settled.
        `now` (the injectable clock) ages the writes in flight; None never takes one as abandoned."""
        key = scope_key(scope)
        known = self._indexes.get(key)
        trusting = self.signal is not None and self.trust_signal and self.answer_settled
        stamp = self.signal.stamp(self.signal_key(scope)) if trusting and self.signal is not None else None
        if (
            stamp is not None
            and known is not None
            and known.verified == stamp
            and known.model == model
            and known.dims == dims
        ):  # no write of the scope began or ended since a settled read, and none is in flight
            self.stats.fresh += 1
            self.stats.unread += 1
            self._indexes.move_to_end(key)
            return Fresh(known, True)
        head = await read_head(revisions, key, known.rev if known is not None else None, whole=not self.lean)
        pending = head.get("pending") if head else None
        pending = pending if isinstance(pending, dict) else {}
        abandoned = [
            t
            for t, at in pending.items()
            if now is not None and isinstance(at, datetime) and as_utc(at) + LEASE <= now
        ]
        if abandoned:  # every process's index read whole once, then trusted again
            self.stats.abandoned += len(abandoned)
            log.warning("recall index: %d write(s) in scope %s never ended; rebuilding", len(abandoned), key)
            await revisions.update_one(
                {"_id": key},
                {"$unset": {f"pending.{t}": "" for t in abandoned}, "$inc": {"rev": CHANGES + 1}},
            )
            head = await read_head(revisions, key, None)
            pending = (head.get("pending") if head else None) or {}
        rev = int(head.get("rev") or 0) if head else 0
        changes: list[str] = [str(c) for c in (head.get("changes") or [])] if head else []
        idx = self._indexes.get(key)
        if idx is not None and (idx.model != model or idx.dims != dims or idx.rev > rev):
            idx = None
        if idx is not None and idx.rev == rev:
            self.stats.fresh += 1
        elif idx is not None and rev - idx.rev <= len(changes):
            changed = list(dict.fromkeys(changes[len(changes) - (rev - idx.rev) :]))
            docs = await read_by_id(memories, changed, INDEX_FIELDS | {"tenant": 1, "owner": 1})
            docs = {
                i: d
                for i, d in docs.items()
                if d.get("tenant") == scope.tenant and d.get("owner") == scope.owner
            }
            for mid in changed:
                if mid in docs:
                    idx.put(docs[mid])
                else:
                    idx.remove(mid)
            idx.rev = rev
            self.stats.patches += 1
        else:
            idx = ScopeIndex(model, dims, rev)
            async for d in memories.find(scope.match(), INDEX_FIELDS):
                idx.put(d)
            self.stats.rebuilds += 1
        # taken before the read that found no write in flight: trusted until the signal moves
        idx.verified = stamp if not pending else None
        self._indexes[key] = idx
        self._indexes.move_to_end(key)
        self._evict(keep=key)
        return Fresh(idx, not pending and self.answer_settled)

    def _evict(self, keep: str) -> None:
        total = self.nbytes()
        while total > self.budget_bytes and len(self._indexes) > 1:
            oldest = next(iter(self._indexes))
            if oldest == keep:
                break
            total -= self._indexes.pop(oldest).nbytes()
            self.stats.evictions += 1
            log.debug("recall index: evicted scope %s (budget %d bytes)", oldest, self.budget_bytes)
