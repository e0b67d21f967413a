"""The `messages` collection's inserts and lookups by key: a message's `_id` is derived from its
session and key (`memory/keys.py` `message_id`), so "already stored" is a duplicate key and a
lookup by key is one read by `_id` (flat in the collection's size on the embedded engine;
docs/decisions/turn-write-path.md). Every insert is bracketed by its scope's revision
(`memory/guard.py`), so message search's indexes see it."""

from __future__ import annotations

from datetime import datetime

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from mongogate.clock import Clock
from mongogate.errors import StorageError
from mongogate.memory.guard import MessageGuard, message
from mongogate.memory.keys import message_id
from mongogate.memory.model import key_conflict
from mongogate.values import Doc

#: the server's duplicate key error
DUPLICATE_KEY = 11000


def answer_doc(tenant: str, sid: str, pending: Doc, now: datetime) -> Doc:
    """A committed answer (an entry of `session.pending`) as the message that stores it."""
    return {
        "_id": message_id(sid, pending["key"]),
        "session_id": sid,
        "tenant": tenant,
        "key": pending["key"],
        "seq": int(pending["seq"]),
        "turn_id": pending["turn_id"],
        "role": "assistant",
        "call_id": None,
        "content": pending["content"],
        "created_at": pending.get("at") or now,
        "lease_id": pending.get("lease_id"),
    }


class MessageWrites:
    """Inserts and lookups of messages, for `SessionRepository` (which sets these attributes)."""

    messages: AsyncCollection[Doc]
    clock: Clock
    guard: MessageGuard
    #: messages with ObjectId `_id`s (the previous version's) may exist, so a lookup by key
    #: that misses the derived `_id` looks by (session, key) too; `ensure_indexes` settles it
    legacy_messages: bool

    async def insert_turn(self, tenant: str, sid: str, pending: list[Doc], user: Doc | None) -> set[int]:
        """The answers still pending on the session, then (if given) a turn's user message, in one
        insert; the positions already stored (the user message's is `len(pending)`)."""
        now = self.clock.now()
        docs = [answer_doc(tenant, sid, p, now) for p in pending] + ([user] if user is not None else [])
        return await self.insert_messages(docs) if docs else set()

    async def insert_messages(self, docs: list[Doc]) -> set[int]:
        """One insert of several messages (answers still pending, a user message); the positions of
        those already stored (a duplicate key). Their content is not compared here."""
        key, ids = docs[0]["tenant"], [str(d["_id"]) for d in docs]
        async with self.guard.writing(key, map(message, ids)):
            try:
                await self.messages.insert_many(docs, ordered=False)
            except BulkWriteError as e:
                errors = e.details.get("writeErrors") or []
                if not errors or any(err.get("code") != DUPLICATE_KEY for err in errors):
                    raise StorageError(f"could not append to session {docs[0]['session_id']!r}") from e
                repeated = {int(err["index"]) for err in errors}
            except PyMongoError as e:
                raise StorageError(f"could not append to session {docs[0]['session_id']!r}") from e
            else:
                repeated = set()
        self.guard.wrote(key, [i for n, i in enumerate(ids) if n not in repeated])
        return repeated

    async def insert_message(self, doc: Doc) -> tuple[str, int]:
        """Insert; a key already stored is `duplicate` with the same role and content, else a conflict."""
        key, mid = doc["tenant"], str(doc["_id"])
        async with self.guard.writing(key, [message(mid)]):
            try:
                await self.messages.insert_one(doc)
            except DuplicateKeyError:
                inserted = False
            except PyMongoError as e:
                raise StorageError(f"could not append to session {doc['session_id']!r}") from e
            else:
                inserted = True
        if not inserted:
            return await self.stored_copy(doc)
        self.guard.wrote(key, [mid])
        return "inserted", int(doc["seq"])

    async def stored_copy(self, doc: Doc) -> tuple[str, int]:
        """`doc`'s key is already stored: `duplicate` with its seq if the role and content match,
        else a conflict."""
        try:
            fields = {"seq": 1, "role": 1, "content": 1}
            stored = await self.messages.find_one({"_id": doc["_id"]}, fields)
            if stored is None:  # refused by the previous version's index: an ObjectId copy
                by_key = {"session_id": doc["session_id"], "key": doc["key"]}
                stored = await self.messages.find_one(by_key, fields)
        except PyMongoError as e:
            raise StorageError(f"could not append to session {doc['session_id']!r}") from e
        if stored is None:  # pragma: no cover - a unique-index hit always has a stored copy
            raise StorageError(f"could not read back message {doc['key']!r}")
        if stored.get("role") != doc["role"] or stored.get("content") != doc["content"]:
            raise key_conflict(doc["key"])
        return "duplicate", int(stored["seq"])

    async def find_message(self, tenant: str, session_id: str, key: str) -> Doc | None:
        """The message by its derived `_id` (one lookup, flat); by (session, key) as well while
        messages of the previous version may remain (`legacy_messages`)."""
        try:
            doc = await self.messages.find_one({"_id": message_id(session_id, key)})
            if doc is None and self.legacy_messages:
                doc = await self.messages.find_one({"session_id": session_id, "key": key})
            return doc if doc is not None and doc.get("tenant") == tenant else None
        except PyMongoError as e:
            raise StorageError("could not read the message") from e
