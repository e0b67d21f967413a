"""The caller's session ids by prefix, from an in-process copy per conversation scope (completions).

Why a copy: on the embedded engine only a read by `_id` is known to stay flat as a collection
grows (a prefix query, an `_id` range or a regex, was not measured to; docs/prompts-and-resources.md
"Completions"), and a completion is asked for at every keystroke.
So each scope's ids are read once (`find({tenant})`, with progress when the client asked for it),
kept in order, and brought up to date the way long-term memory's index is (`recall.Coherence`,
recall/coherence.py): every session created or deleted moves its scope's revision document
(`session_revisions`, `_id` = the scope's stored `tenant`; memory/repository.py `changed`, wired
by the assembly); a completion reads that one document by `_id` and re-reads by `_id` only the
sessions named since, or the scope whole when too far behind (or erased: a new incarnation).

Sessions erased by retention (the TTL index on `last_activity`) move no revision: the copy keeps
each session's `last_activity` as read, a lower bound of the stored one, and a session it would
offer that may have expired by then is read again by `_id` first (at most `VERIFY` a call).
The copy is scoped by construction: read with the caller's stored `tenant`, keyed by it, and a
session re-read by `_id` is kept only if it still carries that `tenant`.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongogate import progress
from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.errors import StorageError
from mongogate.memory import SESSION_REVISIONS, MemoryStore, retention_seconds
from mongogate.recall import Coherence, read_by_id
from mongogate.values import Doc

__all__ = ["MAX_IDS", "SessionIds", "guard", "watch"]

log = logging.getLogger(__name__)

#: ids held across scopes (about 120 bytes each); past it the least recently used scope goes
MAX_IDS = 500_000
#: sessions read again by `_id` in one call because retention may have erased them
VERIFY = 200
#: a progress step every this many sessions read (a scope read whole)
STEP = 1000
_FIELDS = {"tenant": 1, "last_activity": 1}


@dataclass
class ScopeIds:
    """One conversation scope's session ids, in order, each with its `last_activity` as read."""

    rev: int
    born: object = None
    verified: tuple[int, int] | None = None
    ids: list[str] = field(default_factory=list)
    seen: dict[str, datetime | None] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def put(self, sid: str, last: object) -> None:
        if sid not in self.seen:
            bisect.insort(self.ids, sid)
        self.seen[sid] = as_utc(last) if isinstance(last, datetime) else None

    def remove(self, sid: str) -> None:
        if self.seen.pop(sid, _ABSENT) is not _ABSENT:
            del self.ids[bisect.bisect_left(self.ids, sid)]


_ABSENT = object()


def guard(memory: MemoryStore) -> Coherence:
    """The revision protocol of `memory`'s session ids: its own collection and signal kind; no
    write signal (a completion reads the one revision document, which is enough at its rate)."""
    return Coherence(memory.db[SESSION_REVISIONS], memory.db.name, None, kind="sessions:")


def watch(memory: MemoryStore) -> None:
    """Every session `memory` creates or deletes moves its scope's revision (one update by `_id`,
    after the write: memory/repository.py `changed`)."""
    memory.on_change = guard(memory).bump


class SessionIds:
    """Conversation scope (stored `tenant`) -> its session ids, least recently used out past MAX_IDS."""

    def __init__(
        self,
        sessions: AsyncCollection[Doc],
        guard: Coherence,
        retention: timedelta | None,
        clock: Clock = SYSTEM_CLOCK,
        max_ids: int = MAX_IDS,
    ) -> None:
        self.sessions = sessions
        self.guard = guard
        self.retention = retention
        self.clock = clock
        self.max_ids = max_ids
        self._scopes: OrderedDict[str, ScopeIds] = OrderedDict()
        #: scopes read whole (tests and benchmarks read it)
        self.rebuilds = 0

    @classmethod
    def of(cls, memory: MemoryStore, clock: Clock = SYSTEM_CLOCK) -> SessionIds:
        """The index over `memory`'s sessions (whose writers `watch` tells of each change)."""
        ttl = retention_seconds(memory.settings)
        return cls(memory.sessions, guard(memory), None if ttl is None else timedelta(seconds=ttl), clock)

    async def complete(self, tenant: str, prefix: str, limit: int) -> tuple[list[str], bool]:
        """The scope's session ids starting with `prefix`, in order, at most `limit`, and whether
        more exist."""
        try:
            held = await self._fresh(tenant)
            return await self._pick(tenant, held, prefix, limit)
        except PyMongoError as e:
            raise StorageError("could not read the sessions to complete") from e

    async def _fresh(self, tenant: str) -> ScopeIds:
        got = await self.guard.refresh(
            tenant,
            partial(self._scopes.get, tenant),
            fits=lambda held: True,
            patch=partial(self._patch, tenant),
            rebuild=partial(self._rebuild, tenant),
            now=None,
            stamp=None,
        )
        held: ScopeIds = got.held
        if held.born is None and len(held):
            held.born = await self._incarnation(tenant)
        self._scopes[tenant] = held
        self._scopes.move_to_end(tenant)
        if got.outcome == "rebuilt":
            self._evict(keep=tenant)
        return held

    async def _incarnation(self, tenant: str) -> object:
        """The scope's revision document, made when there is none (sessions stored before this
        version, or the document erased): without one every call would read the scope whole.
        Made after the read, so a session created meanwhile (which makes it too) is read next."""
        revisions = self.guard.revisions
        await revisions.update_one({"_id": tenant}, {"$setOnInsert": {"born": uuid.uuid4().hex}}, upsert=True)
        doc = await revisions.find_one({"_id": tenant}, {"born": 1})
        return None if doc is None else doc.get("born")

    async def _pick(self, tenant: str, held: ScopeIds, prefix: str, limit: int) -> tuple[list[str], bool]:
        """Up to `limit` ids from `prefix` on; one that retention may have erased is read again."""
        out: list[str] = []
        checked = 0
        at = bisect.bisect_left(held.ids, prefix)
        while at < len(held.ids) and held.ids[at].startswith(prefix):
            sid = held.ids[at]
            if self._may_have_expired(held.seen[sid]):
                if checked == VERIFY:
                    return out, True  # the rest is unknown: say there may be more
                checked += 1
                await self._patch(tenant, held, [sid])
                if sid not in held.seen:
                    continue  # erased: the next id now sits at `at`
            if len(out) == limit:
                return out, True
            out.append(sid)
            at += 1
        return out, False

    def _may_have_expired(self, last: datetime | None) -> bool:
        if self.retention is None:
            return False
        return last is None or last + self.retention <= self.clock.now()

    async def _patch(self, tenant: str, held: ScopeIds, changed: list[str]) -> None:
        docs = await read_by_id(self.sessions, changed, _FIELDS)
        for sid in changed:
            doc = docs.get(sid)
            if doc is not None and doc.get("tenant") == tenant:
                held.put(sid, doc.get("last_activity"))
            else:
                held.remove(sid)

    async def _rebuild(self, tenant: str, rev: int) -> ScopeIds:
        self.rebuilds += 1
        seen: dict[str, datetime | None] = {}
        async for doc in self.sessions.find({"tenant": tenant}, _FIELDS):
            last = doc.get("last_activity")
            seen[str(doc["_id"])] = as_utc(last) if isinstance(last, datetime) else None
            if len(seen) % STEP == 0:
                await progress.step(len(seen), None, "reading the caller's session ids")
        return ScopeIds(rev, ids=sorted(seen), seen=seen)

    def _evict(self, keep: str) -> None:
        total = sum(len(s) for s in self._scopes.values())
        while total > self.max_ids and len(self._scopes) > 1:
            oldest = next(iter(self._scopes))
            if oldest == keep:
                break
            total -= len(self._scopes.pop(oldest))
