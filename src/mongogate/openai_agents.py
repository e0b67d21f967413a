"""`MongogateSession`: the OpenAI Agents SDK's `Session` protocol on mongogate's sessions and messages.

Needs the ``openai-agents`` extra (installed from a clone: docs/operations.md, Install); the SDK
is imported here only.
One `sessions` document per (tenant, session_id), its `_id` derived from both (so two tenants'
``"chat-1"`` never meet), and one `messages` document per item: ``role`` from the item (an item
without a user/assistant/system role is stored as ``tool``), ``content`` the item as JSON,
``seq`` its place. Every read and write goes through the memory store (`memory/items.py`, built by
`assembly.memory_store`): `add_items` reserves a block of the session's one counter with one
atomic ``$inc``, then inserts the block: items of one call stay together and in order, whatever
runs beside it. Reads are bounded: `get_items` returns at most ``max_items`` (default
`memory.max_context_limit`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mongogate.assembly import memory_store
from mongogate.bridge import Bridge, check_tenant, settings_for
from mongogate.config import Settings
from mongogate.errors import InvalidInput, StorageError
from mongogate.memory import MemoryStore, check_content, check_id

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
        self._store: MemoryStore | None = None
        self._opened = False
        self._open_lock = threading.Lock()

    # ------------------------------------------------------------------ lifetime

    def _ensure_open(self) -> None:
        with self._open_lock:
            if not self._opened:
                self._bridge.open(self._setup)
                self._opened = True

    async def _setup(self, bridge: Bridge) -> None:
        """On the bridge's loop, once open: the memory store and its indexes."""
        self._store = memory_store(bridge.settings, bridge.db.memory)
        await self._store.ensure_indexes()

    @property
    def store(self) -> MemoryStore:
        """The memory store every read and write goes through (made when the session opens)."""
        if self._store is None:
            raise StorageError(f"session {self.session_id!r} is not open")
        return self._store

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

    async def _latest(self, n: int) -> list[Any]:
        contents = await self.store.latest_items(self.tenant, self._doc_id, n, name=self.session_id)
        return [json.loads(c) for c in contents]

    async def _add(self, items: list[Any]) -> None:
        cap = self._bridge.settings.memory.max_message_bytes
        contents = [check_content(json.dumps(item, separators=(",", ":")), "item", cap) for item in items]
        await self.store.add_items(
            self.tenant,
            self._doc_id,
            [(_role(item), text) for item, text in zip(items, contents, strict=True)],
            turn=TURN,
            new={"title": self.session_id, "metadata": {"source": "openai-agents"}},
            name=self.session_id,
        )

    async def _pop(self) -> Any:
        content = await self.store.pop_item(self.tenant, self._doc_id, name=self.session_id)
        return None if content is None else json.loads(content)

    async def _clear(self) -> None:
        await self.store.clear_items(self.tenant, self._doc_id, name=self.session_id)


def _role(item: Any) -> str:
    role = item.get("role") if isinstance(item, dict) else None
    return role if role in _ROLES else "tool"


__all__ = ["MongogateSession"]
