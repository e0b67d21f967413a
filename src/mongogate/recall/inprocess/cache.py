"""The in-process scope indexes of long-term memory: one `ScopeIndex` per scope, on the process's
one index budget (`indexing/budget.py`, shared with message search's indexes: least recently used
first out past `[memory.long_term] index_budget_mb`, the one being used stays, even alone
larger), each kept fresh by the revision protocol of `indexing/coherence.py` (`IndexCache.fresh`).
The question caches beside them: a question's embedding and its tokens, the last QUERIES asked.

The benchmarks measure the call path as it was before each trim (`IndexPolicy`): they pass a
policy to `IndexCache.use`, which binds the behaviour once; the default path never reads one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, partial
from typing import TYPE_CHECKING

from pymongo.asynchronous.collection import AsyncCollection

from mongogate import progress
from mongogate.indexing import QUERIES, Coherence, IndexBudget, Memo, Refreshed, Shelf, read_by_id
from mongogate.recall import documents as rd
from mongogate.recall.ids import in_scope
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.textrank import fold, query_tokens
from mongogate.values import Doc

if TYPE_CHECKING:  # the indexes themselves are a call's, never a start's (tests/test_lazy.py)
    from mongogate.recall.inprocess.scope_index import ScopeIndex

log = logging.getLogger(__name__)

#: stripped from a question's words before they are shown as `matched_terms`
WORD_EDGES = "?!,;:\"'()[]{}<>#*`.-"
#: a progress step every this many memories read while a scope's index is built (a first recall)
STEP = 500
#: the kind long-term memory's indexes are filed under on the shared budget
KIND = "memories"


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


@dataclass(frozen=True)
class IndexPolicy:
    """How the index answers: the default is the code as it is; the benchmarks turn trims off to
    measure what each saved (benchmarks/recall_index.py, recall_call_path.py)."""

    #: False: every recall reads its results back and embeds its question, as before the settled
    #: path (and never trusts the write signal)
    answer_settled: bool = True
    #: False: questions are tokenized each call, as before they were trimmed
    lean: bool = True
    #: False: the write signal is still written but never trusted
    trust_signal: bool = True


DEFAULT_POLICY = IndexPolicy()


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
    """MemoryScope -> ScopeIndex, on the process's index budget (`budget_bytes`, or a budget
    shared with message search's indexes)."""

    def __init__(self, budget: int | IndexBudget, policy: IndexPolicy = DEFAULT_POLICY) -> None:
        #: the process's one index budget (assembly hands it to message search too)
        self.budget = budget if isinstance(budget, IndexBudget) else IndexBudget(budget)
        self.stats = IndexStats()
        #: (model, question) -> its embedding, the last QUERIES asked (a question asked again,
        #: as agents do, skips the model: 0.6 ms of a recall)
        self._queries: Memo[tuple[str, str], list[float]] = Memo(QUERIES)
        #: question -> its tokens and words (`query_terms`), the last QUERIES asked
        self._terms: Memo[str, QueryTerms] = Memo(QUERIES)
        self.use(policy)

    @cached_property
    def _indexes(self) -> Shelf[ScopeIndex]:
        """The scopes' indexes on the budget, at the first index asked for (its module with it)."""
        from mongogate.recall.inprocess.scope_index import ScopeIndex

        return self.budget.shelf(KIND, ScopeIndex)

    @property
    def budget_bytes(self) -> int:
        return self.budget.budget_bytes

    def use(self, policy: IndexPolicy) -> None:
        """Answer by `policy` from now on: each switch is bound here, once, to the function it
        chooses (benchmarks; the server keeps `DEFAULT_POLICY`)."""
        self.policy = policy
        self.query_vector: Callable[[str, str], list[float] | None] = (
            self._kept_vector if policy.answer_settled else _no_vector
        )
        self.query_terms: Callable[[str], QueryTerms] = self._kept_terms if policy.lean else QueryTerms.of
        trusted = policy.trust_signal and policy.answer_settled
        self._stamp: Callable[[Coherence, str], tuple[int, int] | None] = (
            Coherence.stamp if trusted else _no_stamp
        )
        self._settles = policy.answer_settled

    def _kept_vector(self, model: str, text: str) -> list[float] | None:
        return self._queries.get((model, text))

    def keep_query_vector(self, model: str, text: str, vector: list[float]) -> None:
        self._queries.put((model, text), vector)

    def _kept_terms(self, text: str) -> QueryTerms:
        """The question's tokens and words (`QueryTerms.of`), the last QUERIES asked kept by text
        (tokenizing and stemming them was a tenth of a recall at 1,000 memories)."""
        terms = self._terms.get(text)
        if terms is None:
            terms = QueryTerms.of(text)
            self._terms.put(text, terms)
        return terms

    def nbytes(self) -> int:
        """The bytes long-term memory's indexes hold (the budget's other kinds not counted)."""
        return self._indexes.nbytes()

    def held(self, scope: MemoryScope, model: str, dims: int) -> ScopeIndex | None:
        """The scope's index if this process holds one of `model`, as of its last refresh (none
        is read or built here: a remember's notice, `recall/supersession.py`)."""
        idx = self._indexes.get(scope_key(scope))
        return idx if idx is not None and idx.model == model and idx.dims == dims else None

    def __len__(self) -> int:
        return len(self._indexes)

    async def fresh(
        self,
        memories: AsyncCollection[Doc],
        coherence: Coherence,
        scope: MemoryScope,
        model: str,
        dims: int,
        now: datetime | None = None,
    ) -> Fresh:
        """The scope's index, fresh as of the revision read now (`Coherence.refresh`), and whether
        it is settled. `now` (the injectable clock) ages the writes in flight; None never takes
        one as abandoned."""
        key = scope_key(scope)
        got = await coherence.refresh(
            key,
            partial(self._indexes.get, key),
            fits=lambda idx: idx.model == model and idx.dims == dims,
            patch=partial(self._patch, memories, scope),
            rebuild=partial(self._rebuild, memories, scope, model, dims),
            now=now,
            stamp=self._stamp(coherence, key),
        )
        self._count(got)
        self._indexes.keep(key, got.held, tenant=scope.tenant, evict=got.outcome != "unread")
        self.stats.evictions = self._indexes.evictions
        return Fresh(got.held, got.settled and self._settles)

    def _count(self, got: Refreshed[ScopeIndex]) -> None:
        self.stats.abandoned += got.abandoned
        if got.outcome in ("unread", "fresh"):
            self.stats.fresh += 1
        self.stats.unread += got.outcome == "unread"
        self.stats.patches += got.outcome == "patched"
        self.stats.rebuilds += got.outcome == "rebuilt"

    async def _patch(
        self, memories: AsyncCollection[Doc], scope: MemoryScope, idx: ScopeIndex, changed: list[str]
    ) -> None:
        """The changed memories re-read by `_id`: put when still the scope's, else removed."""
        from mongogate.recall.inprocess.rows import INDEX_FIELDS

        docs = await read_by_id(memories, changed, INDEX_FIELDS | {rd.TENANT: 1, rd.OWNER: 1})
        docs = {i: d for i, d in docs.items() if in_scope(d, scope)}
        for mid in changed:
            if mid in docs:
                idx.put(docs[mid])
            else:
                idx.remove(mid)

    async def _rebuild(
        self, memories: AsyncCollection[Doc], scope: MemoryScope, model: str, dims: int, rev: int
    ) -> ScopeIndex:
        from mongogate.recall.inprocess.scope_index import INDEX_FIELDS, ScopeIndex

        idx = ScopeIndex(model, dims, rev)
        async for d in memories.find(scope.match(), INDEX_FIELDS):
            idx.put(d)
            if len(idx) % STEP == 0:  # to the client that asked (mongogate.progress), else nothing
                await progress.step(len(idx), None, "reading the scope's memories into the recall index")
        return idx


def _no_vector(model: str, text: str) -> None:
    return None


def _no_stamp(coherence: Coherence, key: str) -> None:
    return None
