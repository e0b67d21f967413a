"""`search_messages`: the caller's conversation messages that match a query, best first, through
an index of each conversation scope held in the server process (`message_index.py`), ranked by
the code that ranks long-term recall (`indexing/scope_index.py`, `indexing/fusion.py`,
`scoring.py`).

- **Terms**: recall's (`textrank`: folded, stemmed, stop words dropped, identifiers whole, query
  syntax as plain words), over each message's whole text, derived once per message and stored
  (`message_fill.py`, `message_terms.py`).
- **Meaning** (`[memory.search] embed_messages`): the vector of each message's first
  `embed_chars` characters, derived and stored likewise; the query's is embedded per call (the
  last QUERIES asked are kept). An embedder that fails leaves the term ranking (a warning in the
  log, no error).
- **Score**: the one recall shows, in [0, 1]: 0.9 x the best match's fused score + 0.1 x the
  message's own (`scoring.shown`), only the tenth when the best match is no evidence on either
  side (`scoring.evidenced`). Messages under `min_score` are left out, so a question about
  nothing said returns none; and each message returned matches by itself (a word of the query, or
  a fused score of its own at `min_score`), so a good match never brings unrelated ones along.
- **Bounded**: the index is kept fresh by each scope's revision (a settled search reads nothing
  but, on a remote MongoDB, one revision document), read whole only at first use (paged under
  the wire limit), and a call derives at most `embed_per_call` messages itself (`MessageFill`);
  what remains goes to the background, and `partial` says when messages were not all searched
  by their words (not derived yet, or older than what the budget holds).

Messages are the tenant's, like sessions: another tenant's session id finds nothing and is
`not_found`, exactly like one that never existed; a deleted conversation is never found again.
The result is cut to a byte cap (`truncated`): the same cap as recall's (`values.within`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pymongo.errors import PyMongoError

from mongogate.clock import as_utc
from mongogate.config import MessageSearchSettings
from mongogate.errors import StorageError
from mongogate.indexes import IndexModel, ensure_indexes
from mongogate.indexing import IndexBudget, Memo
from mongogate.memory import documents as md
from mongogate.memory.model import session_not_found
from mongogate.memory.repository import SessionRepository
from mongogate.memory_scope import tenant_of_stored
from mongogate.scoring import TEXT_WEIGHT
from mongogate.textrank import query_tokens
from mongogate.values import Doc, check_int, check_query_text, items_budget, within

if TYPE_CHECKING:
    from mongogate.indexing import Ranked
    from mongogate.memory.message_fill import MessageFill, TextEmbedder
    from mongogate.memory.message_index import MessageIndex, MessageScope

log = logging.getLogger(__name__)

__all__ = [
    "MAX_QUERY_CHARS",
    "MESSAGE_TEXT_INDEX",
    "SEARCH_DEFAULT",
    "SEARCH_MAX",
    "Hit",
    "Hits",
    "MessageSearch",
    "ensure_search_index",
    "hit_json",
]

MESSAGE_TEXT_INDEX = "message_content_text"
SEARCH_DEFAULT = 10
SEARCH_MAX = 50
MAX_QUERY_CHARS = 1000


@dataclass(frozen=True)
class Hit:
    session_id: str
    seq: int
    role: str
    content: str
    created_at: datetime
    score: float

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], score: float) -> Hit:
        """A message as a row of the index holds it, or as read back (`documents.MessageDoc`)."""
        return cls(
            str(doc[md.SESSION_ID]),
            int(doc[md.SEQ]),
            str(doc["role"]),
            str(doc["content"]),
            as_utc(doc["created_at"]),
            score,
        )


@dataclass(frozen=True)
class Hits:
    messages: list[Hit]
    truncated: int = 0
    #: not every message of the scope was searched by its words: some are not derived yet (the
    #: background is on them), or the scope is larger than the index budget holds (the oldest)
    partial: bool = False


async def ensure_search_index(store: SessionRepository) -> None:
    """The text index on messages.content (idempotent; `serve` and `check` create it). No longer
    read by search (older deployments' queries; `check` lists it)."""
    try:
        text = IndexModel([("content", "text")], name=MESSAGE_TEXT_INDEX, default_language="none")
        await ensure_indexes(store.messages, [text])
    except PyMongoError as e:
        raise StorageError("could not create the message search index") from e


class MessageSearch:
    """`search_messages` over one database: the process's message indexes, the bounded work that
    derives messages' terms and vectors, and the floor."""

    def __init__(
        self,
        store: SessionRepository,
        budget: IndexBudget,
        embedder: TextEmbedder | None,
        settings: MessageSearchSettings,
        *,
        min_score: float,
        background: bool = False,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.min_score = min_score
        self._budget = budget
        self._settings = settings
        self._background = background
        #: the embedding model whose vectors the index holds, as given (a wrapper set later, e.g.
        #: tracing's, embeds with the same model)
        self._model = ("", 0) if embedder is None else (embedder.model, embedder.dimensions)
        if background:  # what every write of this process stores is derived soon after
            store.guard.on_written = self._written
        self._queries: Memo[str, list[float]] = Memo()

    # The index and the derivation are made at their first use (a search, a write to derive, a
    # metrics scrape): their modules are a call's, never a start's (tests/test_lazy.py).

    @cached_property
    def index(self) -> MessageIndex:
        from mongogate.memory.message_index import MessageIndex

        model, dims = self._model
        return MessageIndex(self.store, self._budget, model=model, dims=dims)

    @cached_property
    def fill(self) -> MessageFill:
        from mongogate.memory.message_fill import MessageFill

        return MessageFill(self.store, self.embedder, self._settings, background=self._background)

    def _written(self, key: str, ids: list[str]) -> None:
        """A write stored `ids` in scope `key` (the stored form: all a writer holds)."""
        self.fill.want(key, ids, tenant=tenant_of_stored(key))

    async def aclose(self) -> None:
        if "fill" in vars(self):  # made: its background may run
            await self.fill.aclose()

    async def search(
        self,
        tenant: str,
        query: object,
        *,
        session_id: object = None,
        limit: object = None,
        max_bytes: int = 256 * 1024,
        min_score: float | None = None,
        owner: str,
    ) -> Hits:
        """The best `limit` messages of the conversation scope `tenant` (the stored form), of one
        session when `session_id` is given. `owner`: the tenant the scope is of (`MemoryScope.tenant`:
        its share of the index budget, `indexing/budget.py`, and its turn in the derivation); no
        default, so a caller never makes each subject a tenant of its own by forgetting it."""
        from mongogate.indexing import above_floor

        text = check_query_text(query, MAX_QUERY_CHARS)
        n = check_int(limit, "limit", 1, SEARCH_MAX, default=SEARCH_DEFAULT, hint="messages")
        words = query_tokens(text)
        if not words:  # only stop words, negations or punctuation: nothing to rank by
            return Hits([])
        sid = None if session_id is None else self.store.check_id(session_id, "session_id")
        floor = self.min_score if min_score is None else min_score
        now = self.store.clock.now()
        try:
            scope, settled = await self._fresh(tenant, now, owner)
            vector = await self._query_vector(text)
            wt = 1.0 if vector is None else TEXT_WEIGHT
            ranked = scope.index.rank(
                vector,
                words,
                now=now,
                ns_path=sid,
                metadata={},
                depth=n,
                weight_text=wt,
                weight_vector=1 - wt,
            )
            # recall's floor on the score shown (a question about nothing said gets none), and
            # each message a match of its own: a term of the query, or a fused score at the floor
            kept = [r for r in above_floor(ranked, floor) if r.matched or r.fused >= floor]
            shown = await self._shown(tenant, scope, settled, kept)
            if sid is not None and sid not in scope.sessions and not await self._exists(tenant, sid):
                raise session_not_found(sid)
        except PyMongoError as e:
            raise StorageError("could not search the messages") from e
        hits = [Hit.from_doc(shown[r.id], r.score) for r in kept if r.id in shown][:n]
        # the best hit always, even alone larger than the cap (`values.within`, as recall's items)
        capped = within(items_budget(max_bytes), hits, hit_json)
        return Hits(capped, len(hits) - len(capped), scope.partial)

    async def _fresh(self, key: str, now: datetime, owner: str) -> tuple[MessageScope, bool]:
        """The scope's index, with at most one call's derivation done first when messages lack
        theirs (the newest first), the rest queued for the background."""
        scope, settled = await self.index.fresh(key, now, tenant=owner)
        if not scope.pending:
            return scope, settled
        rows, where = scope.index.rows, scope.index.where
        # while the embedder rests after a failure, only messages without terms are worth a call
        wanted = scope.unindexed if self.fill.resting() else scope.pending
        newest = sorted(wanted, key=lambda m: -rows[where[m]].order if m in where else 0.0)
        done = await self.fill.fill(key, newest, tenant=owner)
        if self.fill.background:
            self.fill.want(key, [m for m in newest if m not in set(done)], tenant=owner)
        # read again: what this call derived, and what the background derived while it waited
        return await self.index.fresh(key, now, tenant=owner)

    async def _query_vector(self, text: str) -> list[float] | None:
        """The query's embedding (kept for the next time it is asked); None without an embedder or
        when it fails (the term ranking then)."""
        if self.embedder is None:
            return None
        vector = self._queries.get(text)
        if vector is not None:
            return vector
        try:
            got = await self.embedder.embed([text])
        except Exception as e:  # the model is code we do not own: any failure is "unavailable"
            log.warning("search_messages: the embedder failed (%s); term ranking only", e)
            return None
        if len(got) != 1 or len(got[0]) != self.embedder.dimensions:
            log.warning("search_messages: the embedder answered with the wrong shape; term ranking only")
            return None
        self._queries.put(text, got[0])
        return got[0]

    async def _shown(
        self, key: str, scope: MessageScope, settled: bool, kept: list[Ranked]
    ) -> dict[str, Doc]:
        """What each ranked message shows: from the index when settled (read now, before any
        await), its text read back when too long to hold; else every one read back by `_id`
        (the database decides what exists)."""
        from mongogate.memory.message_index import item_of

        if not settled:
            self.index.stats.readbacks += 1
            read = await self.index.read_back(key, [r.id for r in kept])
            return {i: item_of(d) for i, d in read.items()}
        out: dict[str, Doc] = {}
        longer: list[str] = []
        for r in kept:
            item = scope.index.item(r.id)
            if item is not None and "content" in item:
                out[r.id] = item
            elif item is not None:
                longer.append(r.id)
        if longer:
            read = await self.index.read_back(key, longer)
            out |= {i: item_of(d) for i, d in read.items()}
        return out

    async def _exists(self, tenant: str, sid: str) -> bool:
        found = await self.store.sessions.find_one({"_id": sid, md.TENANT: tenant}, {"_id": 1})
        return found is not None


def hit_json(hit: Hit) -> Doc:
    """A hit as search_messages returns it: what the response byte cap measures."""
    return {
        "session_id": hit.session_id,
        "seq": hit.seq,
        "role": hit.role,
        "content": hit.content,
        "created_at": hit.created_at.isoformat(),
        "score": round(hit.score, 6),
    }
