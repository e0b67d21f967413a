"""One database on a private event loop thread, for the framework adapters (langgraph, openai_agents).

Frameworks call their storage from sync code, from async code, and from threads of their own.
pymongo's async client belongs to the loop it was opened on, so an adapter opens mongogate's
`Database` once on a loop of its own (a daemon thread) and sends every operation there:
`call` from sync code, `acall` from any event loop. The tenant comes from the caller, as the
server's fixed tenant does (`auth.tenant`); nothing here reads it from the framework's data.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from mongogate.config import Settings, load_settings
from mongogate.db import Database
from mongogate.errors import InvalidInput
from mongogate.memory import check_id

T = TypeVar("T")


def settings_for(config: str | Path | Settings | None) -> Settings:
    """A `Settings` as given, or read from a file (None: $MONGOGATE_CONFIG, else the defaults)."""
    if isinstance(config, Settings):
        return config
    return load_settings(config)


def check_tenant(tenant: object, settings: Settings) -> str:
    if tenant is None:
        tenant = settings.auth.tenant
    if tenant is None:
        raise InvalidInput("a tenant is needed: pass tenant=... (or set auth.tenant)")
    return check_id(tenant, "tenant", settings.memory.max_id_length)


class Bridge:
    """`Database` opened on its own loop thread; `call`/`acall` run a coroutine there."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database(settings.database, settings.server.data_dir)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mongogate-bridge", daemon=True)
        self._closed = False

    def open(self, setup: Callable[[Bridge], Awaitable[None]] | None = None) -> None:
        self._thread.start()
        try:
            self.call(self._open(setup))
        except BaseException:
            self.close()
            raise

    async def _open(self, setup: Callable[[Bridge], Awaitable[None]] | None) -> None:
        await self.db.open()
        if setup is not None:
            await setup(self)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the bridge's loop and wait for it (from sync code, never from that loop)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` run on the bridge's loop, from any event loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Start `coro` on the bridge's loop without waiting (a heartbeat); `cancel()` stops it."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def close(self, before: Callable[[], Awaitable[None]] | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            if before is not None:
                self.call(_awaited(before))
            self.call(self.db.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()


async def _awaited(fn: Callable[[], Awaitable[None]]) -> None:
    await fn()
