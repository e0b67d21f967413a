"""Sessions and messages: one document per message, keyed by the work, numbered by `$inc`.

No code path reads a history, changes it in memory and writes it back: every write is
an insert of one message or a single-document atomic update of the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import MemorySettings
from mongogate.errors import InvalidInput, NotFound, StorageError
from mongogate.memory.keys import check_content, check_id, message_key

Doc = dict[str, Any]


@dataclass(frozen=True)
class AppendResult:
    status: str  # "inserted" | "duplicate"
    key: str
    seq: int


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    turn_id: str
    seq: int
    call_id: str | None = None


@dataclass(frozen=True)
class Context:
    messages: list[Message] = field(default_factory=list)
    truncated: bool = False


def session_not_found(session_id: str) -> NotFound:
    # The same words whether the session is missing or another tenant's.
    return NotFound(f"session {session_id!r} not found; create one with create_session")


class MemoryStore:
    def __init__(self, db: AsyncDatabase[Doc], settings: MemorySettings) -> None:
        self.db = db
        self.settings = settings
        self.sessions: AsyncCollection[Doc] = db["sessions"]
        self.messages: AsyncCollection[Doc] = db["messages"]
        #: test seam: called at named points between a write and its acknowledgement
        self.fault: Callable[[str], None] | None = None

    async def ensure_indexes(self) -> None:
        try:
            await self.sessions.create_index([("tenant", ASCENDING)], name="tenant")
            await self.messages.create_index(
                [("session_id", ASCENDING), ("key", ASCENDING)], unique=True, name="session_key_unique"
            )
            await self.messages.create_index(
                [("session_id", ASCENDING), ("seq", DESCENDING)], name="session_seq_desc"
            )
        except PyMongoError as e:
            raise StorageError(f"could not create memory indexes: {e}") from e

    def _id(self, value: object, what: str) -> str:
        return check_id(value, what, self.settings.max_id_length)

    async def create_session(self, tenant: str, title: str | None = None, metadata: Doc | None = None) -> str:
        if title is not None:
            check_content(title, "title", 1024)
        session_id = uuid.uuid4().hex
        doc: Doc = {
            "_id": session_id,
            "tenant": tenant,
            "title": title,
            "metadata": metadata or {},
            "next_seq": 0,
            "locked_by": None,
            "locked_until": None,
            "created_at": SYSTEM_CLOCK.now(),
        }
        try:
            await self.sessions.insert_one(doc)
        except PyMongoError as e:
            raise StorageError(f"could not create the session: {e}") from e
        return session_id

    async def get_session(self, tenant: str, session_id: object) -> Doc:
        sid = self._id(session_id, "session_id")
        try:
            doc = await self.sessions.find_one({"_id": sid, "tenant": tenant})
        except PyMongoError as e:
            raise StorageError(f"could not read session: {e}") from e
        if doc is None:
            raise session_not_found(sid)
        return doc

    async def append(
        self,
        tenant: str,
        session_id: object,
        turn_id: object,
        role: object,
        content: object,
        call_id: object = None,
        *,
        extra: Doc | None = None,
    ) -> AppendResult:
        """Insert one message. A repeat of the same key is success (`duplicate`), never a second copy."""
        sid = self._id(session_id, "session_id")
        tid = self._id(turn_id, "turn_id")
        cid = None if call_id is None else self._id(call_id, "call_id")
        if not isinstance(role, str):
            raise InvalidInput("role must be one of user, assistant, tool, system")
        key = message_key(tid, role, cid)
        text = check_content(content, "content", self.settings.max_message_bytes)
        try:
            existing = await self.messages.find_one({"session_id": sid, "key": key}, {"seq": 1, "tenant": 1})
            if existing is not None and existing.get("tenant") == tenant:
                return AppendResult("duplicate", key, int(existing["seq"]))
            # The $inc is the tenant check as well: another tenant's session matches nothing.
            session = await self.sessions.find_one_and_update(
                {"_id": sid, "tenant": tenant},
                {"$inc": {"next_seq": 1}},
                projection={"next_seq": 1},
                return_document=ReturnDocument.AFTER,
            )
            if session is None:
                raise session_not_found(sid)
            seq = int(session["next_seq"])
            doc: Doc = {
                "session_id": sid,
                "tenant": tenant,
                "key": key,
                "seq": seq,
                "turn_id": tid,
                "role": role,
                "call_id": cid,
                "content": text,
                "created_at": SYSTEM_CLOCK.now(),
                **(extra or {}),
            }
            try:
                await self.messages.insert_one(doc)
            except DuplicateKeyError:
                # A concurrent or retried writer got there first: its copy stands.
                stored = await self.messages.find_one({"session_id": sid, "key": key}, {"seq": 1})
                return AppendResult("duplicate", key, int(stored["seq"]) if stored else seq)
        except PyMongoError as e:
            raise StorageError(f"could not append to session {sid}: {e}") from e
        return AppendResult("inserted", key, seq)

    async def find_message(self, session_id: str, key: str) -> Doc | None:
        try:
            return await self.messages.find_one({"session_id": session_id, "key": key})
        except PyMongoError as e:
            raise StorageError(f"could not read message: {e}") from e

    def check_limit(self, limit: object) -> int:
        if limit is None:
            return self.settings.default_context_limit
        cap = self.settings.max_context_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= cap:
            raise InvalidInput(
                f"limit must be an integer from 1 to {cap} (memory.max_context_limit); got {limit!r}"
            )
        return limit

    async def load_context(self, tenant: str, session_id: object, limit: object = None) -> Context:
        """The last `limit` messages, cut so the window starts at a user message (never mid-turn).

        Reads `limit + 1` documents through the (session, seq desc) index, so the cost does
        not grow with the session's length.
        """
        n = self.check_limit(limit)
        session = await self.get_session(tenant, session_id)
        return await self.window(session["_id"], n)

    async def window(self, session_id: str, n: int) -> Context:
        """`load_context` for a session whose tenant the caller has already checked."""
        try:
            cursor = self.messages.find(
                {"session_id": session_id},
                {"role": 1, "content": 1, "turn_id": 1, "seq": 1, "call_id": 1},
                sort=[("seq", DESCENDING)],
                limit=n + 1,
            )
            docs = [d async for d in cursor]
        except PyMongoError as e:
            raise StorageError(f"could not load context: {e}") from e
        truncated = len(docs) > n
        window = list(reversed(docs[:n]))
        first_user = next((i for i, d in enumerate(window) if d["role"] == "user"), len(window))
        if first_user:
            truncated = True
            window = window[first_user:]
        return Context(
            messages=[
                Message(d["role"], d["content"], d["turn_id"], int(d["seq"]), d.get("call_id"))
                for d in window
            ],
            truncated=truncated,
        )
