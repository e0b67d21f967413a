"""Conversation messages held in the server process for `search_messages`: one index per
conversation scope (the stored `tenant`), the generic index of `indexing/scope_index.py` that
long-term memory's recall ranks with, on the process's one index budget (`indexing/budget.py`),
kept fresh by the revision protocol (`indexing/coherence.py`, bracketed by every writer of
messages: `memory/guard.py`).

What a row holds comes from two documents of the same `_id`: the message (its session, seq, role,
date, and its text when at most HOLD_CHARS, so a settled search answers without reading it) and
what search derived from it (`message_index`, `memory/message_fill.py`: its terms, its vector).
A message whose derived document is missing or stale is held anyway (by meaning or by terms,
whichever it has) and listed in `pending`, for the bounded work of a search and the background
(`MessageFill`); one without terms yet is not found by its words (`unindexed`: the search says
`partial`).

What the index never serves:

- a message of a session that no longer exists (erased: `s:` changes; a rebuild reads the
  scope's sessions; a message of an unknown session is looked up by `_id`);
- a message older than the retention (`memory.retention_days`) by the clock: the TTL monitor
  erases it without any writer's bracket, so each row expires at `created_at` + retention;
- more than the budget: a scope's index holds the newest messages up to the whole budget
  (`left_out` counts the older ones it leaves out; the search says `partial`).

Reading a scope is paged (`values.reply_batch`) so no reply reaches the engine's wire limit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import as_utc
from mongogate.indexing import Coherence, Entry, IndexBudget, Refreshed, ScopeIndex, born, read_by_id, unpack
from mongogate.lazy import lazy
from mongogate.memory import documents as md
from mongogate.memory.message_terms import of_message, stored_terms
from mongogate.memory.repository import SessionRepository
from mongogate.values import Doc, reply_batch, wire_bytes

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

log = logging.getLogger(__name__)

__all__ = ["HOLD_CHARS", "KIND", "MessageIndex", "MessageScope", "ScopeStats"]

#: the kind message indexes are filed under on the shared budget
KIND = "messages"
#: a message's text is held in its row up to this many characters; longer ones are read back
HOLD_CHARS = 16 * 1024
#: what the index reads of a message, and of its derived document
MESSAGE_FIELDS = dict.fromkeys((md.SESSION_ID, md.SEQ, "role", "content", "created_at", md.TENANT), 1)
DERIVED_FIELDS = dict.fromkeys(
    (md.TENANT, "created_at", md.TERMS, md.TERM_COUNTS, md.TERMS_V, md.EMBEDDING, md.EMBEDDING_MODEL), 1
)
#: a rebuild reads this many messages a reply at most (fewer when messages may be large)
PAGE = 1000
#: a scope trimmed past the budget keeps this share of it (so trims are rare)
TRIM_TO = 0.9


@dataclass
class ScopeStats:
    rebuilds: int = 0
    patches: int = 0
    fresh: int = 0
    unread: int = 0
    abandoned: int = 0
    #: searches that read their results back (a write in flight at the revision read)
    readbacks: int = 0


@dataclass(eq=False)
class MessageScope:
    """One conversation scope's messages, as of revision `rev` (`coherence.Held`)."""

    index: ScopeIndex
    rev: int
    #: the scope's live sessions (a message of another is never held)
    sessions: set[str] = field(default_factory=set)
    #: ids held without a current derived document (work for `MessageFill`), oldest first
    pending: dict[str, None] = field(default_factory=dict)
    #: ids held without terms yet (not found by their words until derived)
    unindexed: set[str] = field(default_factory=set)
    #: messages of the scope left out past the budget (the oldest)
    left_out: int = 0
    born: object = None
    verified: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.index)

    def nbytes(self) -> int:
        extra = 100 * (len(self.sessions) + len(self.pending) + len(self.unindexed))
        return self.index.nbytes() + extra

    @property
    def partial(self) -> bool:
        """Some messages of the scope are not searched whole: left out, or not by their words yet."""
        return self.left_out > 0 or bool(self.unindexed)

    def forget(self, mid: str) -> None:
        self.index.remove(mid)
        self.pending.pop(mid, None)
        self.unindexed.discard(mid)


class MessageIndex:
    """Conversation scope -> `MessageScope`, on the shared budget, fresh by the scope's revision."""

    def __init__(
        self,
        repo: SessionRepository,
        budget: IndexBudget,
        *,
        model: str = "",
        dims: int = 0,
    ) -> None:
        self.repo = repo
        self.coherence: Coherence = repo.guard.coherence
        self.budget = budget
        self._scopes = budget.shelf(KIND, MessageScope)
        #: the embedding model whose vectors rows hold ("" and 0: none, by terms only)
        self.model = model
        self.dims = dims
        self.stats = ScopeStats()
        self.derived: AsyncCollection[Doc] = repo.db[md.MESSAGE_INDEX]

    def retention(self) -> timedelta | None:
        days = self.repo.settings.retention_days
        return None if days is None else timedelta(days=days)

    def nbytes(self) -> int:
        return self._scopes.nbytes()

    def __len__(self) -> int:
        return len(self._scopes)

    @property
    def evictions(self) -> int:
        return self._scopes.evictions

    def held(self, key: str) -> MessageScope | None:
        return self._scopes.get(key)

    async def fresh(self, key: str, now: datetime | None, *, tenant: str) -> tuple[MessageScope, bool]:
        """The scope's index as of the revision read now, and whether it is settled (no write in
        flight: it may answer without reading back). `now` (the injectable clock) ages writes in
        flight; None never takes one as abandoned. `tenant`: whose share of the budget it is."""
        if self._scopes.get(key) is None:
            # the revision document exists before the scope is read (a scope written before
            # message search kept revisions has none): the copy is labelled with its incarnation
            await self.coherence.revisions.update_one({"_id": key}, born(), upsert=True)
        got = await self.coherence.refresh(
            key,
            partial(self._scopes.get, key),
            fits=lambda s: s.index.model == self.model and s.index.dims == self.dims,
            patch=partial(self._patch, key),
            rebuild=partial(self._rebuild, key),
            now=now,
            stamp=self.coherence.stamp(key),
        )
        self._count(got)
        self._scopes.keep(key, got.held, tenant=tenant, evict=got.outcome != "unread")
        return got.held, got.settled

    def _count(self, got: Refreshed[MessageScope]) -> None:
        self.stats.abandoned += got.abandoned
        self.stats.fresh += got.outcome in ("unread", "fresh")
        self.stats.unread += got.outcome == "unread"
        self.stats.patches += got.outcome == "patched"
        self.stats.rebuilds += got.outcome == "rebuilt"

    # -- reading the database -----------------------------------------------------------------

    def _batch(self) -> int:
        """Messages (or derived documents) a reply may carry under the wire limit."""
        s = self.repo.settings
        largest = s.max_message_bytes + 6 * s.max_id_length + 4096
        return reply_batch(largest, PAGE, wire_bytes(self.repo.db))

    async def _rebuild(self, key: str, rev: int) -> MessageScope:
        """The scope read whole, paged: its sessions, what search derived, then its messages."""
        scope = MessageScope(ScopeIndex(self.model, self.dims, rev, distinct_words=False), rev)
        batch = self._batch()
        live = self.repo.sessions.find({md.TENANT: key}, {"_id": 1}, batch_size=PAGE)
        scope.sessions = {str(d["_id"]) async for d in live}
        found = self.derived.find({md.TENANT: key}, DERIVED_FIELDS, batch_size=batch)
        derived = {str(d["_id"]): d async for d in found}
        messages = self.repo.messages.find({md.TENANT: key}, MESSAGE_FIELDS, batch_size=batch)
        async for d in messages:
            if str(d.get(md.SESSION_ID)) in scope.sessions:
                self._hold(scope, d, derived.pop(str(d["_id"]), None))
        return scope

    async def _patch(self, key: str, scope: MessageScope, changed: list[str]) -> None:
        """The changes re-read by `_id` (`memory/guard.py` names them): sessions erased, messages
        written or deleted, derived documents written."""
        sessions, rederived, messages = _changes(changed, scope.index.where)
        for sid in sessions:
            await self._session(key, scope, sid)
        for mid, d in (await read_by_id(self.derived, rederived, DERIVED_FIELDS)).items():
            self._rederive(key, scope, mid, d)
        docs = await read_by_id(self.repo.messages, messages, MESSAGE_FIELDS)
        derived = await read_by_id(self.derived, [m for m in messages if m in docs], DERIVED_FIELDS)
        for mid in messages:
            doc = docs.get(mid)
            if doc is None or doc.get(md.TENANT) != key or not await self._alive(key, scope, doc):
                scope.forget(mid)
            else:
                self._hold(scope, doc, derived.get(mid))

    async def _session(self, key: str, scope: MessageScope, sid: str) -> None:
        """A session erased (or made again, by the Agents adapter): its messages are dropped and
        the session looked up; messages of it written since are re-read by their own changes."""
        for mid in [r.id for r in scope.index.rows if sid in r.ns_path]:
            scope.forget(mid)
        scope.sessions.discard(sid)
        doc = await self.repo.sessions.find_one({"_id": sid}, {md.TENANT: 1})
        if doc is not None and doc.get(md.TENANT) == key:
            scope.sessions.add(sid)

    async def _alive(self, key: str, scope: MessageScope, doc: Doc) -> bool:
        """The message's session exists (known live, or looked up by `_id` now)."""
        sid = str(doc.get(md.SESSION_ID))
        if sid in scope.sessions:
            return True
        found = await self.repo.sessions.find_one({"_id": sid}, {md.TENANT: 1})
        if found is None or found.get(md.TENANT) != key:
            return False
        scope.sessions.add(sid)
        return True

    # -- rows ---------------------------------------------------------------------------------

    def _hold(self, scope: MessageScope, doc: Doc, derived: Doc | None) -> None:
        """Hold the message (`entry`), note what it lacks, and keep the scope within the budget."""
        entry, terms_known, vector_known = self.entry(doc, derived)
        scope.index.add(entry)
        scope.unindexed.discard(entry.id)
        scope.pending.pop(entry.id, None)
        if not terms_known:
            scope.unindexed.add(entry.id)
        if not (terms_known and vector_known):
            scope.pending[entry.id] = None
        if scope.nbytes() > self.budget.budget_bytes:
            self._trim(scope)

    def _rederive(self, key: str, scope: MessageScope, mid: str, derived: Doc) -> None:
        """A held message's row with what was derived from it since (terms, vector)."""
        at = scope.index.where.get(mid)
        if at is None:
            return
        row = scope.index.rows[at]
        if not of_message(derived, {md.TENANT: key, "created_at": row.item["created_at"]}):
            return  # derived from an erased message of the same `_id`: the row stays pending
        terms = stored_terms(derived)
        vector = self._vector(derived)
        old = row.terms
        entry = Entry(
            mid,
            terms if terms is not None else old,
            vector if vector is not None else scope.index.vector(mid),
            row.item,
            expires_at=row.expires_at,
            ns_path=row.ns_path,
            text_bytes=row.text_bytes,
            order=row.order,
        )
        scope.index.add(entry)
        known = terms is not None or mid not in scope.unindexed
        if known:
            scope.unindexed.discard(mid)
        if known and (entry.vector is not None or not self.model):
            scope.pending.pop(mid, None)
        if scope.nbytes() > self.budget.budget_bytes:
            self._trim(scope)

    def entry(self, doc: Doc, derived: Doc | None) -> tuple[Entry, bool, bool]:
        """The message as a row, and whether its terms and its vector (when an embedder ranks)
        were derived already."""
        mid, sid = str(doc["_id"]), str(doc.get(md.SESSION_ID))
        content = doc.get("content")
        text = content if isinstance(content, str) else ""
        created = as_utc(doc["created_at"])
        if derived is not None and not of_message(derived, doc):
            derived = None  # an erased message's of the same `_id`: derived again (`MessageFill`)
        terms = stored_terms(derived) if derived is not None else None
        vector = self._vector(derived)
        item: Doc = {"_id": mid, md.SESSION_ID: sid, md.SEQ: int(doc.get(md.SEQ) or 0)}
        item |= {"role": str(doc.get("role")), "created_at": created}
        held = len(text) <= HOLD_CHARS
        if held:
            item["content"] = text
        keep = self.retention()
        entry = Entry(
            mid,
            terms or {},
            vector,
            item,
            expires_at=None if keep is None else created + keep,
            ns_path=frozenset((sid,)),
            text_bytes=len(text) if held else 0,
            order=created.timestamp(),
        )
        return entry, terms is not None, vector is not None or not self.model

    def _vector(self, derived: Doc | None) -> npt.NDArray[np.float32] | None:
        if not self.model or derived is None or derived.get(md.EMBEDDING_MODEL) != self.model:
            return None
        raw = derived.get(md.EMBEDDING)
        try:
            vec = np.array(unpack(raw), dtype=np.float32) if raw is not None else None
        except ValueError:
            return None
        if vec is None or vec.shape != (self.dims,):
            return None
        norm = float(np.linalg.norm(vec))
        return vec / norm if np.isfinite(norm) and norm > 0 else None

    def _trim(self, scope: MessageScope) -> None:
        """The oldest messages out until the scope's index holds TRIM_TO of the budget."""
        target = int(self.budget.budget_bytes * TRIM_TO)
        while scope.nbytes() > target and len(scope.index) > 1:
            step = max(1, len(scope.index) // 20)
            for mid in scope.index.oldest(step):
                scope.forget(mid)
                scope.left_out += 1
        log.info("message index: a scope past the budget keeps its newest %d messages", len(scope.index))

    # -- what rows a search shows -------------------------------------------------------------

    async def read_back(self, key: str, ids: Iterable[str]) -> dict[str, Doc]:
        """The messages `ids` read by `_id` (while a write is in flight, or a text too long to
        hold), each only while it is the scope's and its session exists."""
        wanted = list(ids)
        docs = await read_by_id(self.repo.messages, wanted, MESSAGE_FIELDS)
        sessions: dict[str, bool] = {}
        out: dict[str, Doc] = {}
        for mid, doc in docs.items():
            sid = str(doc.get(md.SESSION_ID))
            if sid not in sessions:
                found = await self.repo.sessions.find_one({"_id": sid}, {md.TENANT: 1})
                sessions[sid] = found is not None and found.get(md.TENANT) == key
            if doc.get(md.TENANT) == key and sessions[sid]:
                out[mid] = doc
        return out


def _changes(changed: list[str], held: Mapping[str, int]) -> tuple[list[str], list[str], list[str]]:
    """A patch's changes: sessions erased; messages derived anew, held and not themselves
    rewritten (their rows keep, with the terms and vector read now; the message is not read
    again); and the messages to read (written, deleted, or derived but not held)."""
    sessions = [c[2:] for c in changed if c.startswith("s:")]
    written = {c[2:] for c in changed if c.startswith("m:")}
    rederived = [c[2:] for c in changed if c.startswith("x:") and c[2:] not in written]
    rederived = [m for m in dict.fromkeys(rederived) if m in held]
    again = set(rederived)
    messages = [m for m in dict.fromkeys(c[2:] for c in changed if c[:2] in ("m:", "x:")) if m not in again]
    return sessions, rederived, messages


def item_of(doc: Doc) -> dict[str, Any]:
    """A message read back, as a row's item."""
    return {
        "_id": str(doc["_id"]),
        md.SESSION_ID: str(doc.get(md.SESSION_ID)),
        md.SEQ: int(doc.get(md.SEQ) or 0),
        "role": str(doc.get("role")),
        "created_at": as_utc(doc["created_at"]),
        "content": str(doc.get("content") or ""),
    }
