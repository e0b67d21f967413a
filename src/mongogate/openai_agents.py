"""`MongogateSession`: the OpenAI Agents SDK's `Session` protocol on mongogate's sessions and messages.

Needs the ``openai-agents`` extra (installed from a clone: docs/operations.md, Install); the SDK
is imported here only.
One `sessions` document per (tenant, session_id), its `_id` derived from both (so two tenants'
``"chat-1"`` never meet), and one `messages` document per item: ``role`` from the item (an item
without a user/assistant/system role is stored as ``tool``), ``content`` the item as JSON,
``seq`` its place. `add_items` reserves a block of seqs with one atomic ``$inc`` on the session,
then inserts the block: items of one call stay together and in order, whatever runs beside it.
Reads are bounded: `get_items` returns at most ``max_items`` (default `memory.max_context_limit`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongogate.bridge import Bridge, check_tenant, settings_for
from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import Settings
from mongogate.errors import InvalidInput, StorageError
from mongogate.memory import MemoryStore, check_content, check_id, message_id
from mongogate.values import Doc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

#: the turn id every item of an Agents SDK session is stored under
TURN = "agents"
_ROLES = ("user", "assistant", "system")


def session_doc_id(tenant: str, session_id: str) -> str:
    digest = hashlib.sha256(f"{tenant}\x00{session_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"agents-{digest[:40]}"


class MongogateSession:
    """An Agents SDK session stored in mongogate (`Runner.run(agent, input, session=...)`)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        tenant: str | None = None,
        config: str | Path | Settings | None = None,
        max_items: int | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        settings = settings_for(config)
        self.tenant = check_tenant(tenant, settings)
        self.session_id = check_id(session_id, "session_id", settings.memory.max_id_length)
        self.session_settings = session_settings
        self.max_items = settings.memory.max_context_limit if max_items is None else max_items
        if self.max_items < 1:
            raise InvalidInput("max_items must be at least 1")
        self._doc_id = session_doc_id(self.tenant, self.session_id)
        self._bridge = Bridge(settings)
        self._opened = False
        self._open_lock = threading.Lock()

    # ------------------------------------------------------------------ lifetime

    def _ensure_open(self) -> None:
        with self._open_lock:
            if not self._opened:
                self._bridge.open(_indexes)
                self._opened = True

    async def _run(self, coro: Any) -> Any:
        if not self._opened:
            await asyncio.to_thread(self._ensure_open)
        return await self._bridge.acall(coro)

    def close(self) -> None:
        """Close the session's connection (the stored items stay)."""
        with self._open_lock:
            self._bridge.close()

    async def __aenter__(self) -> MongogateSession:
        await asyncio.to_thread(self._ensure_open)
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------------ the protocol

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items in order (None: the settings' limit, else all), `max_items` at most."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        n = self.max_items if limit is None else min(int(limit), self.max_items)
        if n <= 0:
            return []
        result: list[TResponseInputItem] = await self._run(self._latest(n))
        return result

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._run(self._add(list(items)))

    async def pop_item(self) -> TResponseInputItem | None:
        result: TResponseInputItem | None = await self._run(self._pop())
        return result

    async def clear_session(self) -> None:
        await self._run(self._clear())

    # ------------------------------------------------------------------ on the bridge's loop

    def _match(self) -> Doc:
        return {"session_id": self._doc_id, "tenant": self.tenant}

    async def _latest(self, n: int) -> list[Any]:
        db = self._bridge.db.memory
        try:
            docs = (
                await db["messages"]
                .find(self._match(), {"content": 1, "_id": 0}, sort=[("seq", DESCENDING)], limit=n)
                .to_list()
            )
        except PyMongoError as e:
            raise StorageError(f"could not read session {self.session_id!r}") from e
        return [json.loads(d["content"]) for d in reversed(docs)]

    async def _add(self, items: list[Any]) -> None:
        cap = self._bridge.settings.memory.max_message_bytes
        contents = [check_content(json.dumps(item, separators=(",", ":")), "item", cap) for item in items]
        db = self._bridge.db.memory
        try:
            end = await self._reserve(len(items))
            first = end - len(items) + 1
            now = SYSTEM_CLOCK.now()
            docs = [
                {
                    "_id": message_id(self._doc_id, f"{TURN}:{first + i}"),
                    "session_id": self._doc_id,
                    "tenant": self.tenant,
                    "key": f"{TURN}:{first + i}",
                    "seq": first + i,
                    "turn_id": TURN,
                    "role": _role(item),
                    "call_id": None,
                    "content": text,
                    "created_at": now,
                }
                for i, (item, text) in enumerate(zip(items, contents, strict=True))
            ]
            await db["messages"].insert_many(docs, ordered=True)
        except PyMongoError as e:
            raise StorageError(f"could not add items to session {self.session_id!r}") from e

    async def _reserve(self, n: int) -> int:
        """The last of `n` seqs reserved on the session (created on first use); one atomic `$inc`."""
        sessions = self._bridge.db.memory["sessions"]
        now = SYSTEM_CLOCK.now()
        on_insert: Doc = {
            "tenant": self.tenant,
            "created_at": now,
            "title": self.session_id,
            "metadata": {"source": "openai-agents"},
            "locked_by": None,
            "locked_until": None,
            "lease_turn": None,
        }
        # By `_id` alone (the id is the tenant's: `session_doc_id`), and created by an insert, not
        # an upsert: both flat in the collection's size on the embedded engine.
        for _ in range(2):  # two first uses at once: one creates, the other's insert retries
            doc = await sessions.find_one_and_update(
                {"_id": self._doc_id},
                {"$inc": {"next_seq": n}, "$set": {"last_activity": now}},
                projection={"next_seq": 1, "tenant": 1},
                return_document=ReturnDocument.AFTER,
            )
            if doc is not None:
                if doc.get("tenant") != self.tenant:  # pragma: no cover - the id hashes the tenant
                    raise StorageError(f"session {self.session_id!r} belongs to another tenant")
                return int(doc["next_seq"])
            try:
                await sessions.insert_one(
                    {"_id": self._doc_id, **on_insert, "next_seq": n, "last_activity": now}
                )
            except DuplicateKeyError:
                continue
            return n
        raise StorageError(f"could not create session {self.session_id!r}; retry")

    async def _pop(self) -> Any:
        try:
            doc = await self._bridge.db.memory["messages"].find_one_and_delete(
                self._match(), projection={"content": 1}, sort=[("seq", DESCENDING)]
            )
        except PyMongoError as e:
            raise StorageError(f"could not pop from session {self.session_id!r}") from e
        return None if doc is None else json.loads(doc["content"])

    async def _clear(self) -> None:
        db = self._bridge.db.memory
        try:
            await db["messages"].delete_many(self._match())
            await db["sessions"].delete_one({"_id": self._doc_id, "tenant": self.tenant})
        except PyMongoError as e:
            raise StorageError(f"could not clear session {self.session_id!r}") from e


def _role(item: Any) -> str:
    role = item.get("role") if isinstance(item, dict) else None
    return role if role in _ROLES else "tool"


async def _indexes(bridge: Bridge) -> None:
    await MemoryStore(bridge.db.memory, bridge.settings.memory).ensure_indexes()


__all__ = ["MongogateSession"]
