"""Long-term memory: one document per memory, scoped by (tenant, owner), found again by recall.

Correctness rests on the database, not on read-then-write in mongogate, in shapes the embedded
engine serves in the same time at 10,000 memories in a scope as at none (recall/ids.py,
docs/decisions/recall-writes.md):
- a memory's `_id` is its identity hashed (tenant, owner, namespace, and key, or the text's hash
  for a memory without a key), so two concurrent `remember`s, or a retry after a lost reply, can
  never make a second memory: the loser's `insert_one` is a duplicate `_id`, and it reads again;
- a new version is an update by `_id` whose pipeline applies only on the version read (and the
  caller's scope), written after the previous text is in the history (an `insert_one` of
  `{memory id}:{version}`, a duplicate meaning it is already there), so the history never misses
  a version that was replaced and never holds one that was not stored;
- every document read by `_id` is checked against the caller's tenant and owner before anything
  is returned or written: another scope's memory is absent, whatever id a caller gives;
- `max_per_scope` is kept by a counter in the scope's revision document (recall/quota.py), not by
  counting the collection.

The text is embedded before anything is written: a failing embedder stores nothing
(`EmbeddingUnavailable`, retryable). Recall (the read side) is `recall/search.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.clock import as_utc, utc_or_none
from mongogate.errors import InvalidInput, QuotaExceeded, StorageError
from mongogate.migrations import Migrations
from mongogate.recall import checks, quota, search
from mongogate.recall import documents as rd
from mongogate.recall.documents import MemoryDoc, VectorFields, VersionDoc
from mongogate.recall.ids import in_scope, memory_id, version_id
from mongogate.recall.model import (
    History,
    MemoryPage,
    MemoryScope,
    Recalled,
    RecallMethod,
    Remembered,
)
from mongogate.recall.repository import RecallRepository
from mongogate.recall.setup import ensure_indexes
from mongogate.recall.vectors import pack
from mongogate.values import Doc, bson

log = logging.getLogger(__name__)

#: rounds of read-then-conditional-write before a busy key is reported (retryable)
_ATTEMPTS = 8


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity(scope: MemoryScope, namespace: str, key: str | None, digest: str) -> Doc:
    """What makes a memory one (hashed into its `_id`): its key in the namespace, or else its text."""
    ident: Doc = {**scope.match(), "namespace": namespace}
    ident |= {"keyed": True, "key": key} if key is not None else {"keyed": False, rd.TEXT_HASH: digest}
    return ident


class LongTermMemory(RecallRepository):
    """remember, forget, list and history over the repository's collections; recall is in `search.py`."""

    async def ensure_indexes(self, migrations: Migrations | None = None) -> None:
        """Idempotent: `serve` and `check` run it at every start (`recall/setup.py`); ``migrations``:
        as `MemoryStore.ensure_indexes`'s (mongogate/migrations.py)."""
        await ensure_indexes(self, migrations)

    # -- remember -----------------------------------------------------------------------------

    async def remember(
        self,
        scope: MemoryScope,
        text: object,
        *,
        namespace: object = checks.DEFAULT_NAMESPACE,
        key: object = None,
        metadata: object = None,
        ttl_days: object = None,
        author: str | None = None,
        supersedes: object = None,
        source: object = None,
        occurred_at: object = None,
    ) -> Remembered:
        """Store one memory; a repeat (or a retry after a lost reply) is `unchanged`, never a copy.

        `author` is the subject writing it (the tools pass the caller's authenticated subject): stored
        on a created or updated memory, and on the history entry of the text it replaces. An
        `unchanged` remember writes no text and leaves the author as it was. `source` (a message the
        caller checked is its own) and `occurred_at` belong to the text's version, like metadata;
        `supersedes` links older memories to it (`recall/supersession.py`)."""
        from mongogate.recall import supersession  # a call's, never a start's (tests/test_lazy.py)

        body = checks.check_text(text, self.settings)
        ns = checks.check_namespace(checks.DEFAULT_NAMESPACE if namespace is None else namespace)
        k = None if key is None else checks.check_key(key)
        meta = checks.check_metadata(metadata, self.limits)
        ttl = checks.check_ttl(ttl_days, self.settings)
        told = checks.check_told(source, occurred_at)
        refs = checks.check_supersedes(supersedes)
        digest = text_hash(body)
        vector = await self.embed_one(body)  # before any write: a failure stores nothing
        ident = identity(scope, ns, k, digest)
        try:
            targets = await supersession.resolve(self, scope, ident, refs)  # read and checked first
            room = supersession.room_for(targets) if targets else None
            async with self.writing(scope):
                r = await self._remember(
                    scope, ident, body, digest, ns, k, meta, vector, ttl, author, told, room
                )
                if targets:
                    r = replace(r, supersedes=await supersession.link(self, scope, r.id, targets))
        except PyMongoError as e:
            raise StorageError("could not store the memory") from e
        return supersession.noticed(self, scope, r, vector, targets)

    async def _remember(
        self,
        scope: MemoryScope,
        ident: Doc,
        body: str,
        digest: str,
        ns: str,
        k: str | None,
        meta: Doc,
        vector: list[float],
        ttl: int | None,
        author: str | None,
        told: Doc | None = None,
        check: Callable[[Doc], None] | None = None,
    ) -> Remembered:
        """remember's writes, in the scope's `writing` block; `check` runs on a stored memory read
        before anything is written to it."""
        for _ in range(_ATTEMPTS):
            now = self.clock.now()
            expires = None if ttl is None else now + timedelta(days=ttl)
            doc = self.new_document(ident, body, meta, vector, now, expires, author, told)
            if not self.legacy:
                # create first: on the embedded engine a read by `_id` that finds nothing scans
                # the collection (0.2-1.4 s at 10,000), a duplicate insert does not
                self.at("remember.before_create")
                if await self.create(scope, doc, now, refuse=False):
                    return await self._created(scope, doc, ns, k)
            found = await self.lookup(scope, ident, {"embedding": 0})
            self.at("remember.after_read")
            if found is not None and expired(found, now):
                await self._erase(scope, found)  # expired: as if it were not there
                continue
            if found is None:  # (after a create above: gone since, or the scope was full)
                if await self.create(scope, doc, now):
                    return await self._created(scope, doc, ns, k)
                continue  # a concurrent remember created it first: read it again
            if check is not None:
                check(found)
            if k is None or _same(found, digest, meta, told):
                if not await self._set_expiry(scope, found, expires):
                    continue  # changed by another call since the read: read it again
                # bumped even when nothing changed: a retry after a write whose bump was lost
                # (a crash between the two) makes every process's index see it
                await self.changed(scope, str(found["_id"]), expiring=expires)
                return Remembered(str(found["_id"]), ns, k, int(found[rd.VERSION]), "unchanged")
            fields = {**(told or {}), rd.STATED_AT: now}  # a new text is stated current
            if await self._new_version(
                scope, found, body, digest, meta, vector, now, expires, author, fields
            ):
                self.at("remember.after_write")
                return Remembered(str(found["_id"]), ns, k, int(found[rd.VERSION]) + 1, "updated")
        raise StorageError(
            "could not store the memory", advice=f"key {k!r} is being changed by other calls right now; retry"
        )

    async def _created(self, scope: MemoryScope, doc: Doc, ns: str, k: str | None) -> Remembered:
        await self.changed(scope, doc["_id"], alive=1, expiring=doc[rd.EXPIRES_AT])
        self.at("remember.after_write")
        return Remembered(doc["_id"], ns, k, 1, "created")

    async def create(self, scope: MemoryScope, doc: Doc, now: datetime, *, refuse: bool = True) -> bool:
        """Insert a new memory within the scope's quota; False when it already exists (a duplicate
        `_id`: another call made it), or, with `refuse=False`, when the scope is full (the caller
        then reads: an update of a memory the scope holds needs no new place). QuotaExceeded
        writes nothing."""
        room, held = await quota.reserve(
            self.revisions, self.memories, scope, 1, self.settings.max_per_scope, now
        )
        if room == 0 and not refuse:
            return False
        if room == 0:
            raise quota_exceeded(held)
        try:
            await self.memories.insert_one(doc)
        except DuplicateKeyError:
            await quota.release(self.revisions, scope, 1)
            return False
        # any other failure keeps the reservation: the insert may have landed, and a counter too
        # high is only corrected later, one too low would let the scope past its quota
        return True

    def new_document(
        self,
        ident: Doc,
        body: str,
        meta: Doc,
        vector: list[float],
        now: datetime,
        expires: datetime | None,
        author: str | None,
        told: Doc | None = None,
    ) -> Doc:
        """A memory's version 1 (`ident` from `identity`): what remember and the bulk import insert;
        `told`: its source and occurred_at (`checks.check_told`), and links an import carries."""
        vec = self._vector_fields(vector)
        doc: MemoryDoc = {
            "_id": memory_id(ident),
            rd.TENANT: ident[rd.TENANT],
            rd.OWNER: ident[rd.OWNER],
            "namespace": ident["namespace"],
            "keyed": ident["keyed"],
            "key": ident.get("key"),
            "text": body,
            rd.TEXT_HASH: text_hash(body),
            rd.NS_PATH: checks.namespace_path(str(ident["namespace"])),
            "metadata": meta,
            rd.VERSION: 1,
            "author": author,
            "created_at": now,
            rd.UPDATED_AT: now,
            rd.EXPIRES_AT: expires,
            "embedding": vec["embedding"],
            rd.EMBEDDING_MODEL: vec["embedding_model"],
            "embedding_dims": vec["embedding_dims"],
        }
        return bson(doc) | (told or {})

    def _vector_fields(self, vector: list[float]) -> VectorFields:
        return {
            "embedding": pack(vector),
            rd.EMBEDDING_MODEL: self.embedder.model,
            "embedding_dims": self.embedder.dimensions,
        }

    async def _update(self, scope: MemoryScope, mid: str, version: int, fields: Doc) -> bool:
        """`on_version.update_on_version`: `fields` set only on the version read, in the scope."""
        from mongogate.recall.on_version import update_on_version

        return await update_on_version(self, scope, mid, version, fields)

    async def _set_expiry(self, scope: MemoryScope, found: Doc, expires: datetime | None) -> bool:
        """An `unchanged` remember still sets the expiry it names (a new `ttl_days`, or none): the
        last remember decides when a memory expires, whatever its status. False when the memory
        changed since it was read."""
        from mongogate.recall import history as hist

        held = found.get(rd.EXPIRES_AT)
        if (None if held is None else as_utc(held)) == expires:
            return True
        mid = str(found["_id"])
        if not await self._update(scope, mid, int(found[rd.VERSION]), {rd.EXPIRES_AT: expires}):
            return False
        await hist.set_expiry(self, scope, mid, int(found[rd.VERSION]), expires)
        return True

    async def _new_version(
        self,
        scope: MemoryScope,
        found: Doc,
        body: str,
        digest: str,
        meta: Doc,
        vector: list[float],
        now: datetime,
        expires: datetime | None,
        author: str | None = None,
        told: Doc | None = None,
    ) -> bool:
        """The previous text into the history first (idempotent), then the update on that version;
        `told`: more fields of the new version (source, occurred_at, stated_at)."""
        from mongogate.recall import history as hist

        v = int(found[rd.VERSION])
        mid = str(found["_id"])
        entry: VersionDoc = {
            "_id": version_id(mid, v),
            rd.MEMORY_ID: mid,
            **scope.match(),
            rd.VERSION: v,
            "text": found["text"],
            "metadata": found.get("metadata") or {},
            "author": found.get("author"),
            rd.UPDATED_AT: found[rd.UPDATED_AT],
            rd.EXPIRES_AT: expires,
            rd.SOURCE: found.get(rd.SOURCE),
            rd.OCCURRED_AT: found.get(rd.OCCURRED_AT),
        }
        with contextlib.suppress(DuplicateKeyError):  # a concurrent update wrote this same entry
            await self.versions.insert_one(bson(entry))
        fields: Doc = {
            "text": body,
            rd.TEXT_HASH: digest,
            "metadata": meta,
            "author": author,
            rd.UPDATED_AT: now,
            rd.EXPIRES_AT: expires,
            **self._vector_fields(vector),
            **(told or {}),
            rd.VERSION: v + 1,  # last: the condition reads the version as it was
        }
        if not await self._update(scope, mid, v, fields):
            if await self.memories.find_one({"_id": mid}, {"_id": 1}) is None:
                # forgotten (or erased) since the read: the entry just written would keep the
                # forgotten text under an id no tool reaches
                await hist.erase(self, scope, mid, v)
            return False
        await self.changed(scope, mid, expiring=expires)
        if expires != found.get(rd.EXPIRES_AT):
            await hist.set_expiry(self, scope, mid, v + 1, expires)
        await hist.prune(self, scope, mid, v)
        return True

    async def forget(
        self, scope: MemoryScope, *, id: object = None, namespace: object = None, key: object = None
    ) -> bool:
        """Erase one memory and its history; False when there is none (for this scope)."""
        from mongogate.recall import history as hist

        if id is not None and (namespace is not None or key is not None):
            raise InvalidInput("forget takes either id, or namespace and key; not both")
        try:
            mid, found = await self._to_forget(scope, id, namespace, key)
            gone = None if found is None else await self._delete(scope, found)
            self.at("forget.after_memory")
            if gone is not None:
                await hist.erase(self, scope, str(gone["_id"]), int(gone[rd.VERSION]))
            elif mid is not None and id is not None:
                # by id, nothing there: also what a forget interrupted above left behind
                await hist.erase(self, scope, mid, None)
        except PyMongoError as e:
            raise StorageError("could not forget the memory; call forget again") from e
        return gone is not None and not expired(gone, self.clock.now())

    async def _to_forget(
        self, scope: MemoryScope, id: object, namespace: object, key: object
    ) -> tuple[str | None, Doc | None]:
        """The memory forget names (its id, and its document when it is the caller's), by id or
        by namespace and key."""
        fields = {"_id": 1, rd.TENANT: 1, rd.OWNER: 1, rd.EXPIRES_AT: 1, rd.VERSION: 1}
        if id is not None:
            mid = checks.check_memory_id(id)
            found = await self.memories.find_one({"_id": mid}, fields)
            return mid, found if in_scope(found, scope) else None  # another scope's: absent
        if key is not None:
            ns = checks.check_namespace(checks.DEFAULT_NAMESPACE if namespace is None else namespace)
            found = await self.lookup(scope, identity(scope, ns, checks.check_key(key), ""), fields)
            return (None if found is None else str(found["_id"])), found
        raise InvalidInput("forget needs id (from remember, recall or list_memories), or namespace and key")

    async def _delete(self, scope: MemoryScope, found: Doc) -> Doc | None:
        """Delete a memory read by `_id` and checked to be the caller's (an `_id` never changes
        scope: it is derived from the scope, or a uuid); the deleted document, or None when it was
        already gone. The revision and the quota counter follow in one update."""
        mid = str(found["_id"])
        async with self.writing(scope):
            gone = await self.memories.find_one_and_delete(
                {"_id": mid}, {"_id": 1, rd.EXPIRES_AT: 1, rd.VERSION: 1}
            )
            self.at("forget.before_bump")
            live = gone is not None and not expired(gone, self.clock.now())
            await self.changed(scope, mid, held=-1 if gone is not None else 0, alive=-1 if live else 0)
        return gone

    async def _erase(self, scope: MemoryScope, found: Doc) -> None:
        from mongogate.recall import history as hist

        gone = await self._delete(scope, found)
        upto = max(int(found[rd.VERSION]), int(gone[rd.VERSION]) if gone is not None else 0)
        await hist.erase(self, scope, str(found["_id"]), upto)

    async def list(self, scope: MemoryScope, **args: object) -> MemoryPage:
        """Newest change first (`recall/listing.py`: namespace, limit, cursor, occurred_after and
        occurred_before)."""
        from mongogate.recall.listing import list_page

        return await list_page(self, scope, **args)

    async def history(self, scope: MemoryScope, id: object) -> History:
        """Every version, oldest first, the current one last; another scope's id is `not_found`."""
        from mongogate.recall.history import read_history

        return await read_history(self, scope, id)

    # -- recall -------------------------------------------------------------------------------

    async def recall(
        self,
        scope: MemoryScope,
        query: object,
        *,
        namespace: object = None,
        limit: object = None,
        metadata: object = None,
        method: RecallMethod = "fused",
        min_score: object = None,
        **when: object,
    ) -> Recalled:
        """The memories best matching `query` (`recall/search.py`: the one entry of the read side);
        `when`: include_superseded, as_of, occurred_after, occurred_before."""
        return await search.recall(
            self,
            scope,
            query,
            namespace=namespace,
            limit=limit,
            metadata=metadata,
            method=method,
            min_score=min_score,
            **when,
        )


def expired(doc: Doc, now: datetime) -> bool:
    """The memory's `expires_at` has passed (the TTL monitor erases it late)."""
    return bool(doc.get(rd.EXPIRES_AT)) and as_utc(doc[rd.EXPIRES_AT]) <= now


def _same(found: Doc, digest: str, meta: Doc, told: Doc | None = None) -> bool:
    """A keyed memory already holds this text, metadata, source and occurred_at (a remember that
    changes nothing)."""
    held = {rd.SOURCE: found.get(rd.SOURCE), rd.OCCURRED_AT: utc_or_none(found.get(rd.OCCURRED_AT))}
    same_told = told is None or all(held[f] == v for f, v in told.items())
    return bool(found[rd.TEXT_HASH] == digest and dict(found.get("metadata") or {}) == meta and same_told)


def quota_exceeded(held: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"this scope holds {held} memories, the most memory.long_term.max_per_scope allows; "
        "nothing was written. forget memories you no longer need, or update one by its key"
    )
