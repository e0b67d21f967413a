"""Long-term memory: one document per memory, scoped by (tenant, owner), found again by recall.

Correctness rests on the database, not on read-then-write in mongogate:
- a keyed memory is unique on (tenant, owner, namespace, key) and a memory without a key on
  (tenant, owner, namespace, text_hash) (two partial unique indexes), so two concurrent
  `remember`s, or a retry after a lost reply, can never make a second memory;
- a new version is a conditional update on the version read (`{_id, version: v}`), written after
  the previous text is in the history (an idempotent upsert on (memory_id, version)), so the
  history never misses a version that was replaced and never holds one that was not stored;
- every read and write filters on `tenant` and `owner` first: another scope's memory is absent.

The text is embedded before anything is written: a failing embedder stores nothing
(`EmbeddingUnavailable`, retryable). Ranking lives in `recall/search.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from datetime import datetime, timedelta

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput, QuotaExceeded, StorageError
from mongogate.recall import checks
from mongogate.recall.history import prune, read_history
from mongogate.recall.model import (
    History,
    MemoryPage,
    Recalled,
    RecallMethod,
    Remembered,
    Scope,
)
from mongogate.recall.pages import (
    ITEM_FIELDS,
    cap_items,
    decode_cursor,
    encode_cursor,
    item_of,
    live,
)
from mongogate.recall.repository import RecallRepository
from mongogate.recall.vectors import pack
from mongogate.values import Doc, check_int

log = logging.getLogger(__name__)

KEY_INDEX = "scope_namespace_key_unique"
TEXT_HASH_INDEX = "scope_namespace_text_unique"
TEXT_INDEX = "memory_text"
TTL_INDEX = "expires_at_ttl"
#: memories per list_memories page
PAGE_DEFAULT = 20
PAGE_MAX = 100
#: rounds of read-then-conditional-write before a busy key is reported (retryable)
_ATTEMPTS = 8


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity(scope: Scope, namespace: str, key: str | None, digest: str) -> Doc:
    """What makes a memory one (the unique indexes): its key in the namespace, or else its text."""
    ident: Doc = {"tenant": scope.tenant, "owner": scope.owner, "namespace": namespace}
    ident |= {"keyed": True, "key": key} if key is not None else {"keyed": False, "text_hash": digest}
    return ident


class LongTermMemory(RecallRepository):
    """remember, forget, list and history over the repository's collections; recall is in `search.py`."""

    async def ensure_indexes(self) -> None:
        """Idempotent: `serve` and `check` run it at every start."""
        scope_ns = [("tenant", ASCENDING), ("owner", ASCENDING), ("namespace", ASCENDING)]
        try:
            await self.memories.create_index(
                [*scope_ns, ("key", ASCENDING)],
                name=KEY_INDEX,
                unique=True,
                partialFilterExpression={"keyed": True},
            )
            await self.memories.create_index(
                [*scope_ns, ("text_hash", ASCENDING)],
                name=TEXT_HASH_INDEX,
                unique=True,
                partialFilterExpression={"keyed": False},
            )
            await self.memories.create_index(
                [
                    ("tenant", ASCENDING),
                    ("owner", ASCENDING),
                    ("updated_at", DESCENDING),
                    ("_id", DESCENDING),
                ],
                name="scope_updated",
            )
            await self.memories.create_index(
                [("tenant", ASCENDING), ("owner", ASCENDING), ("ns_path", ASCENDING)], name="scope_ns_path"
            )
            await self.memories.create_index([("text", "text")], name=TEXT_INDEX, default_language="none")
            await self.memories.create_index(
                [("expires_at", ASCENDING)], name=TTL_INDEX, expireAfterSeconds=0
            )
            await self.versions.create_index(
                [("memory_id", ASCENDING), ("version", ASCENDING)], name="memory_version_unique", unique=True
            )
            await self.versions.create_index(
                [("expires_at", ASCENDING)], name=TTL_INDEX, expireAfterSeconds=0
            )
        except PyMongoError as e:
            raise StorageError("could not create the long-term memory indexes") from e

    # -- remember -----------------------------------------------------------------------------

    async def remember(
        self,
        scope: Scope,
        text: object,
        *,
        namespace: object = checks.DEFAULT_NAMESPACE,
        key: object = None,
        metadata: object = None,
        ttl_days: object = None,
        author: str | None = None,
    ) -> Remembered:
        """Store one memory; a repeat (or a retry after a lost reply) is `unchanged`, never a copy.

        `author` is the subject writing it (the tools pass the caller's authenticated subject): stored
        on a created or updated memory, and on the history entry of the text it replaces. An
        `unchanged` remember writes no text and leaves the author as it was."""
        body = checks.check_text(text, self.settings)
        ns = checks.check_namespace(checks.DEFAULT_NAMESPACE if namespace is None else namespace)
        k = None if key is None else checks.check_key(key)
        meta = checks.check_metadata(metadata, self.limits)
        ttl = checks.check_ttl(ttl_days, self.settings)
        digest = text_hash(body)
        vector = await self.embed_one(body)  # before any write: a failure stores nothing
        ident = identity(scope, ns, k, digest)
        try:
            async with self.writing(scope):
                return await self._remember(scope, ident, body, digest, ns, k, meta, vector, ttl, author)
        except PyMongoError as e:
            raise StorageError("could not store the memory") from e

    async def _remember(
        self,
        scope: Scope,
        ident: Doc,
        body: str,
        digest: str,
        ns: str,
        k: str | None,
        meta: Doc,
        vector: list[float],
        ttl: int | None,
        author: str | None,
    ) -> Remembered:
        """remember's writes, in the scope's `writing` block."""
        for _ in range(_ATTEMPTS):
            now = self.clock.now()
            expires = None if ttl is None else now + timedelta(days=ttl)
            found = await self.memories.find_one(ident, {"embedding": 0})
            self.at("remember.after_read")
            if found is not None and found.get("expires_at") and as_utc(found["expires_at"]) <= now:
                await self._erase(scope, str(found["_id"]))  # expired: as if it were not there
                continue
            if found is None:
                await self._check_quota(scope, now)
                doc = self.new_document(ident, body, meta, vector, now, expires, author)
                try:
                    await self.memories.insert_one(doc)
                except DuplicateKeyError:
                    continue  # a concurrent remember created it first: read it again
                await self.changed(scope, doc["_id"])
                self.at("remember.after_write")
                return Remembered(doc["_id"], ns, k, 1, "created")
            if k is None or (found["text_hash"] == digest and dict(found.get("metadata") or {}) == meta):
                if not await self._set_expiry(scope, found, expires):
                    continue  # changed by another call since the read: read it again
                # bumped even when nothing changed: a retry after a write whose bump was lost
                # (a crash between the two) makes every process's index see it
                await self.changed(scope, str(found["_id"]))
                return Remembered(str(found["_id"]), ns, k, int(found["version"]), "unchanged")
            if await self._new_version(scope, found, body, digest, meta, vector, now, expires, author):
                self.at("remember.after_write")
                return Remembered(str(found["_id"]), ns, k, int(found["version"]) + 1, "updated")
        raise StorageError(
            "could not store the memory", advice=f"key {k!r} is being changed by other calls right now; retry"
        )

    def new_document(
        self,
        ident: Doc,
        body: str,
        meta: Doc,
        vector: list[float],
        now: datetime,
        expires: datetime | None,
        author: str | None,
    ) -> Doc:
        """A memory's version 1 (`ident` from `identity`): what remember and the bulk import insert."""
        return {
            "_id": uuid.uuid4().hex,
            **ident,
            "key": ident.get("key"),
            "text": body,
            "text_hash": text_hash(body),
            "ns_path": checks.namespace_path(str(ident["namespace"])),
            "metadata": meta,
            "version": 1,
            "author": author,
            "created_at": now,
            "updated_at": now,
            "expires_at": expires,
            **self._vector_fields(vector),
        }

    def _vector_fields(self, vector: list[float]) -> Doc:
        return {
            "embedding": pack(vector),
            "embedding_model": self.embedder.model,
            "embedding_dims": self.embedder.dimensions,
        }

    async def _set_expiry(self, scope: Scope, found: Doc, expires: datetime | None) -> bool:
        """An `unchanged` remember still sets the expiry it names (a new `ttl_days`, or none): the
        last remember decides when a memory expires, whatever its status. False when the memory
        changed since it was read."""
        held = found.get("expires_at")
        if (None if held is None else as_utc(held)) == expires:
            return True
        mid = str(found["_id"])
        changed = await self.memories.update_one(
            {"_id": mid, "tenant": scope.tenant, "owner": scope.owner, "version": found["version"]},
            {"$set": {"expires_at": expires}},
        )
        if changed.matched_count == 0:
            return False
        await self.versions.update_many({"memory_id": mid}, {"$set": {"expires_at": expires}})
        return True

    async def _new_version(
        self,
        scope: Scope,
        found: Doc,
        body: str,
        digest: str,
        meta: Doc,
        vector: list[float],
        now: datetime,
        expires: datetime | None,
        author: str | None = None,
    ) -> bool:
        """The previous text into the history first (idempotent), then the update on that version."""
        v = int(found["version"])
        mid = str(found["_id"])
        entry: Doc = {
            "memory_id": mid,
            "tenant": scope.tenant,
            "owner": scope.owner,
            "version": v,
            "text": found["text"],
            "metadata": found.get("metadata") or {},
            "author": found.get("author"),
            "updated_at": found["updated_at"],
            "expires_at": expires,
        }
        with contextlib.suppress(DuplicateKeyError):  # a concurrent update wrote this same entry
            await self.versions.update_one(
                {"memory_id": mid, "version": v}, {"$setOnInsert": entry}, upsert=True
            )
        changed = await self.memories.update_one(
            {"_id": mid, "tenant": scope.tenant, "owner": scope.owner, "version": v},
            {
                "$set": {
                    "text": body,
                    "text_hash": digest,
                    "metadata": meta,
                    "version": v + 1,
                    "author": author,
                    "updated_at": now,
                    "expires_at": expires,
                    **self._vector_fields(vector),
                }
            },
        )
        if changed.matched_count == 0:
            if await self.memories.count_documents({"_id": mid}, limit=1) == 0:
                # forgotten (or erased) since the read: the entry just written would keep the
                # forgotten text under an id no tool reaches
                await self.versions.delete_many(
                    {"memory_id": mid, "tenant": scope.tenant, "owner": scope.owner}
                )
            return False
        await self.changed(scope, mid)
        if expires != found.get("expires_at"):
            await self.versions.update_many({"memory_id": mid}, {"$set": {"expires_at": expires}})
        await prune(self, scope, mid, v)
        return True

    async def _check_quota(self, scope: Scope, now: datetime) -> None:
        held = await self.memories.count_documents(
            {"tenant": scope.tenant, "owner": scope.owner, **live(now)}, limit=self.settings.max_per_scope
        )
        if held >= self.settings.max_per_scope:
            raise QuotaExceeded(
                f"this scope holds {held} memories, the most memory.long_term.max_per_scope allows; "
                "nothing was written. forget memories you no longer need, or update one by its key"
            )

    # -- forget, list, history ----------------------------------------------------------------

    async def forget(
        self, scope: Scope, *, id: object = None, namespace: object = None, key: object = None
    ) -> bool:
        """Erase one memory and its history; False when there is none (for this scope)."""
        if id is not None and (namespace is not None or key is not None):
            raise InvalidInput("forget takes either id, or namespace and key; not both")
        if id is not None:
            query: Doc = {"_id": checks.check_memory_id(id)}
        elif key is not None:
            ns = checks.check_namespace(checks.DEFAULT_NAMESPACE if namespace is None else namespace)
            query = {"namespace": ns, "keyed": True, "key": checks.check_key(key)}
        else:
            raise InvalidInput(
                "forget needs id (from remember, recall or list_memories), or namespace and key"
            )
        try:
            async with self.writing(scope):
                gone = await self.memories.find_one_and_delete(
                    {"tenant": scope.tenant, "owner": scope.owner, **query}, {"_id": 1, "expires_at": 1}
                )
                self.at("forget.before_bump")
                mid = str(gone["_id"]) if gone is not None else query.get("_id")
                if gone is not None:
                    await self.changed(scope, str(gone["_id"]))
            self.at("forget.after_memory")
            if mid is not None:  # by id: also what a forget interrupted here left behind
                await self.versions.delete_many(
                    {"memory_id": mid, "tenant": scope.tenant, "owner": scope.owner}
                )
        except PyMongoError as e:
            raise StorageError("could not forget the memory; call forget again") from e
        if gone is None:
            return False
        expired = gone.get("expires_at") and as_utc(gone["expires_at"]) <= self.clock.now()
        return not expired

    async def _erase(self, scope: Scope, mid: str) -> None:
        await self.memories.delete_one({"_id": mid, "tenant": scope.tenant, "owner": scope.owner})
        await self.changed(scope, mid)
        await self.versions.delete_many({"memory_id": mid, "tenant": scope.tenant, "owner": scope.owner})

    async def list(
        self, scope: Scope, *, namespace: object = None, limit: object = None, cursor: object = None
    ) -> MemoryPage:
        """Newest first (last written), through the (scope, updated_at, _id) index."""
        n = check_int(limit, "limit", 1, PAGE_MAX, default=PAGE_DEFAULT, hint="memories per page")
        query = self.scoped(scope, namespace, self.clock.now())
        if cursor is not None:
            at, last = decode_cursor(cursor)
            query = {
                "$and": [
                    query,
                    {"$or": [{"updated_at": {"$lt": at}}, {"updated_at": at, "_id": {"$lt": last}}]},
                ]
            }
        try:
            found = self.memories.find(
                query, ITEM_FIELDS, sort=[("updated_at", DESCENDING), ("_id", DESCENDING)], limit=n + 1
            )
            docs = [d async for d in found]
        except PyMongoError as e:
            raise StorageError("could not list the memories") from e
        items, truncated = cap_items([item_of(d) for d in docs[:n]], self.settings.max_response_bytes)
        more = (len(docs) > n or truncated) and items
        nxt = encode_cursor(items[-1].updated_at, items[-1].id) if more else None
        return MemoryPage(items, nxt, truncated)

    async def history(self, scope: Scope, id: object) -> History:
        """Every version, oldest first, the current one last; another scope's id is `not_found`."""
        return await read_history(self, scope, id)

    # -- recall -------------------------------------------------------------------------------

    async def recall(
        self,
        scope: Scope,
        query: object,
        *,
        namespace: object = None,
        limit: object = None,
        metadata: object = None,
        method: RecallMethod = "fused",
        min_score: object = None,
    ) -> Recalled:
        from mongogate.recall.search import recall  # ranking lives beside, to keep this module short

        return await recall(
            self,
            scope,
            query,
            namespace=namespace,
            limit=limit,
            metadata=metadata,
            method=method,
            min_score=min_score,
        )
