"""`MongogateSession`: the OpenAI Agents SDK's `Session` protocol on mongogate's sessions and messages.

Needs the ``openai-agents`` extra (installed from a clone: docs/operations.md, Install); the SDK
is imported here only.
One `sessions` document per (tenant, session_id), its `_id` derived from both (so two tenants'
``"chat-1"`` never meet), and one `messages` document per item: ``role`` from the item (an item
without a user/assistant/system role is stored as ``tool``), ``content`` the item as JSON,
``seq`` its place. Every read and write goes through the memory store (`memory/items.py`, built by
`assembly.memory_store`): `add_items` reserves a block of the session's one counter with one
atomic ``$inc``, then inserts the block: items of one call stay together and in order, whatever
runs beside it. `get_items` answers as the SDK's `SQLiteSession` does (every item without a
limit, read in replies under the wire limit), except that a limit never starts the window inside
a tool call (`whole_calls`).
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
        if max_items is not None and max_items < 1:
            raise InvalidInput("max_items must be at least 1 (or None: every item, as SQLiteSession reads)")
        self.max_items = max_items
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
        """Every item in order, as `SQLiteSession` answers (None: the settings' limit, else all;
        `max_items`, when given, caps a read). A limit keeps the latest items, less any at the
        window's start that belong to a tool call it cuts (`whole_calls`); 0 reads nothing and a
        negative limit reads everything, as SQLite's `LIMIT` does."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        n = None if limit is None or int(limit) < 0 else int(limit)
        if self.max_items is not None:
            n = self.max_items if n is None else min(n, self.max_items)
        if n == 0:
            return []
        items: list[TResponseInputItem] = await self._run(self._latest(n))
        return whole_calls(items) if n is not None and len(items) == n else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._run(self._add(list(items)))

    async def pop_item(self) -> TResponseInputItem | None:
        result: TResponseInputItem | None = await self._run(self._pop())
        return result

    async def clear_session(self) -> None:
        await self._run(self._clear())

    # ------------------------------------------------------------------ on the bridge's loop

    async def _latest(self, n: int | None) -> list[Any]:
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


#: each kind of tool output: the kind of the call it answers, the field of the output naming that
#: call and the call's own field it names (the Responses API's items, as the Agents SDK stores them)
OUTPUT_OF: dict[str, tuple[str, str, str]] = {
    "function_call_output": ("function_call", "call_id", "call_id"),
    "custom_tool_call_output": ("custom_tool_call", "call_id", "call_id"),
    "computer_call_output": ("computer_call", "call_id", "call_id"),
    "local_shell_call_output": ("local_shell_call", "call_id", "call_id"),
    "shell_call_output": ("shell_call", "call_id", "call_id"),
    "apply_patch_call_output": ("apply_patch_call", "call_id", "call_id"),
    "tool_search_output": ("tool_search_call", "call_id", "call_id"),
    "program_output": ("program", "call_id", "call_id"),
    "mcp_approval_response": ("mcp_approval_request", "approval_request_id", "id"),
}
_CALLS = {call: field for call, _, field in OUTPUT_OF.values()}


def whole_calls(window: list[Any]) -> list[Any]:
    """`window` (the latest items) from its first position at which no output answers a call
    before it: the model API rejects an output whose call it was not sent. Only outputs can be
    cut from their call (a call comes first), so only the window's start moves."""
    start = 0
    while True:
        calls: set[tuple[str, object]] = set()
        orphan = -1
        for i in range(start, len(window)):
            item = window[i]
            kind = item.get("type") if isinstance(item, dict) else None
            if kind in _CALLS:
                calls.add((kind, item.get(_CALLS[kind])))
            elif kind in OUTPUT_OF:
                call, link, _ = OUTPUT_OF[kind]
                if isinstance(item.get(link), str) and (call, item[link]) not in calls:
                    orphan = i
        if orphan < 0:
            return window[start:]
        start = orphan + 1


def _role(item: Any) -> str:
    role = item.get("role") if isinstance(item, dict) else None
    return role if role in _ROLES else "tool"


__all__ = ["MongogateSession"]
