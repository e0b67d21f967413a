"""Database access: two pymongo async clients, and the shared embedded engine when no URI is set.

Without `database.uri`, every mongogate process on a data directory uses one engine process
(`mongogate.engine`): found through `<data_dir>/engine.json`, started on demand, private
(SCRAM-SHA-256 credentials kept in the directory, files 0600), listening on a Unix socket in
that 0700 directory. The socket's path never changes, so when the engine stops (`mongogate
engine stop`, idle, a crash) and any process starts it again, the clients of a running server
reconnect by themselves (pymongo re-checks an unknown server every 0.5 s while a call waits).
A process whose engine crashed restarts it.

Memory, run and scheduler writes go through `memory`, which carries the configured write and
read concerns (majority + journal by default); query tools read through `query`, whose read
preference comes from `database.query_uri`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from mongogate.config import DatabaseSettings
from mongogate.connect import connect
from mongogate.connect import ping as ping_server
from mongogate.engine import client as engine_client
from mongogate.engine.embedded import EmbeddedEngine
from mongogate.engine.files import STATE_FILE, EngineState, engine_running
from mongogate.errors import StorageError
from mongogate.values import Doc

__all__ = ["STATE_FILE", "Database", "EmbeddedEngine", "IndexHook"]

log = logging.getLogger(__name__)

IndexHook = Callable[[AsyncDatabase[Doc]], Awaitable[None]]

#: how often a process using the embedded engine checks that it is still there
WATCH_S = 2.0


class Database:
    """The memory (read-write) and query (read-only user) connections."""

    def __init__(
        self,
        settings: DatabaseSettings,
        data_dir: Path,
        *,
        role_warning: bool = False,
        listeners: Sequence[Any] = (),
    ) -> None:
        self.settings = settings
        #: pymongo command listeners on both clients (server/tracing.py: a span per command)
        self.listeners = tuple(listeners)
        self.data_dir = data_dir
        #: warn that the embedded engine enforces no roles (what serves query tools: the server);
        #: other commands log it at INFO, and `check` reports it in its own words
        self.role_warning = role_warning
        #: the embedded engine this process uses (None with database.uri)
        self.engine_state: EngineState | None = None
        self._client: AsyncMongoClient[Doc] | None = None
        self._query_client: AsyncMongoClient[Doc] | None = None
        self._uris = ("", "")
        self._memory: AsyncDatabase[Doc] | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def embedded(self) -> bool:
        return self.engine_state is not None

    async def open(self) -> None:
        uri = self.settings.uri
        lease = None
        if uri is None:
            lease = await self._lease()
            uri, self.engine_state = lease.uri, lease.state
        try:
            self._client, self._query_client = connect(uri, self.settings, self.listeners)
            self._uris = (uri, self.settings.query_uri or uri)
            wc = self.settings.write_concern
            self._memory = self._client.get_database(
                self.settings.name,
                write_concern=WriteConcern(w=wc.w, j=wc.j, wtimeout=wc.wtimeout_ms),
                read_concern=ReadConcern(self.settings.read_concern),
            )
            if lease is not None:
                await self.ping()  # connected while the start lock is held: the engine cannot idle out
        except BaseException:
            await self.close()
            raise
        finally:
            if lease is not None:
                lease.release()
        if self.engine_state is not None:
            st = self.engine_state
            log.info("embedded engine pid %d on %s (data in %s)", st.pid, st.address, st.data_file)
            log.log(
                logging.WARNING if self.role_warning else logging.INFO,
                "embedded engine (mongoeco) in %s: it enforces no roles, so read-only rests on "
                "mongogate's own checks; use database.uri/query_uri with real MongoDB in production",
                self.data_dir,
            )
            self._watch = asyncio.get_running_loop().create_task(self._watch_engine())

    async def _lease(self) -> engine_client.EngineLease:
        """The engine's lease, taken on a thread. A caller cancelled while the thread works (close()
        cancels the watch task, and asyncio does not wait for the thread) never leaves the lease,
        and the engine's start lock with it, to the garbage collector: the lease is released by
        whichever side learns second that nobody will use it."""
        guard = threading.Lock()
        abandoned = False
        delivered: list[engine_client.EngineLease] = []

        def take() -> engine_client.EngineLease:
            lease = engine_client.lease(self.data_dir, self.settings.engine_idle_stop_s)
            with guard:
                if abandoned:
                    lease.release()
                else:
                    delivered.append(lease)
            return lease

        try:
            return await anyio.to_thread.run_sync(take)
        except BaseException:
            with guard:
                abandoned = True
                for lease in delivered:
                    lease.release()
            raise

    async def _watch_engine(self) -> None:
        """Restart a crashed engine (its engine.json is left behind; a stopped one removes it)."""
        while True:
            await anyio.sleep(WATCH_S)
            if engine_running(self.data_dir) or not (self.data_dir / STATE_FILE).exists():
                continue
            log.warning("the embedded engine of %s is gone: restarting it", self.data_dir)
            try:
                lease = await self._lease()
            except Exception as e:  # keep watching; calls fail with storage errors meanwhile
                log.warning("could not restart the embedded engine: %s", e)
                continue
            try:
                old = self.engine_state
                self.engine_state = lease.state
                if old is not None and old.address != lease.state.address:  # an engine of an older version
                    log.error("the embedded engine moved to %s: restart this process", lease.state.address)
                with contextlib.suppress(StorageError):
                    await self.ping()
            finally:
                lease.release()

    async def close(self) -> None:
        # Shielded: a shutdown that cancels the server (a vanished stdio client) must still close.
        with anyio.CancelScope(shield=True):
            if self._watch is not None:
                self._watch.cancel()
                with contextlib.suppress(BaseException):
                    await self._watch
                self._watch = None
            for c in {id(c): c for c in (self._client, self._query_client) if c is not None}.values():
                await c.close()  # once each: without database.query_uri both are one client
            self._client = self._query_client = self._memory = None

    @property
    def uri(self) -> str:
        """The read-write URI this process connected with (the engine's carries its credentials)."""
        if not self._uris[0]:
            raise StorageError("database is not open")
        return self._uris[0]

    @property
    def client(self) -> AsyncMongoClient[Doc]:
        if self._client is None:
            raise StorageError("database is not open")
        return self._client

    @property
    def memory(self) -> AsyncDatabase[Doc]:
        """Read-write database for memory, run and scheduler collections (write/read concern set)."""
        if self._memory is None:
            raise StorageError("database is not open")
        return self._memory

    @property
    def query_client(self) -> AsyncMongoClient[Doc]:
        """The read-only user's client (asked for its privileges by `check` and `serve`)."""
        if self._query_client is None:
            raise StorageError("database is not open")
        return self._query_client

    @property
    def query(self) -> AsyncDatabase[Doc]:
        """Database through the read-only query user; query tools use nothing else."""
        return self.query_client[self.settings.name]

    async def ping(self, timeout_s: float | None = None) -> None:
        """Both connections answer, or one StorageError line naming the hosts, the key and the timeout."""
        try:
            with anyio.fail_after(timeout_s) if timeout_s is not None else contextlib.nullcontext():
                await ping_server(self.client, self._uris[0], self._key("uri"), self.settings)
                if self.query_client is not self.client:
                    await ping_server(self.query_client, self._uris[1], self._key("query_uri"), self.settings)
        except TimeoutError as e:
            raise StorageError(f"the database did not answer within {timeout_s} s") from e

    def _key(self, key: str) -> str:
        if self.settings.uri is None:
            return "the embedded engine"
        return f"database.{key}" if key == "uri" or self.settings.query_uri else "database.uri"
