"""Database access: two pymongo async clients, and the embedded engine when no URI is set.

The embedded engine (mongoeco) runs on its own thread and event loop, never on the
server's loop: a driver waiting on a server that shares its loop can deadlock.

One process owns a data directory's engine (a `flock` on engine.lock) and publishes its URI
in `engine.json` (uri, pid; mode 0600). Another process that finds the lock held by a live
owner connects to that URI instead of failing, so `worker --status`, `check` and workers run
beside `serve`. A stale engine.json (its pid is gone) is ignored and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import anyio
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from mongogate.config import DatabaseSettings
from mongogate.connect import connect, ping
from mongogate.errors import ConfigError, StorageError
from mongogate.values import Doc

log = logging.getLogger(__name__)

IndexHook = Callable[[AsyncDatabase[Doc]], Awaitable[None]]

ENGINE_FILE = "engine.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but alive
    return True


def published_engine_uri(data_dir: Path) -> str | None:
    """The URI a live engine owner published for `data_dir`, or None (missing, unreadable or stale)."""
    try:
        info = json.loads((data_dir / ENGINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    pid, uri = info.get("pid"), info.get("uri")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(uri, str) or not _alive(pid):
        return None
    return uri


class EmbeddedEngine:
    """The mongoeco wire server on a SQLite file, locked so that one process owns a data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.uri: str | None = None
        self._lock_file: IO[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None
        #: set when start() failed because another process holds the data directory
        self.in_use = False

    def start(self) -> str:
        try:
            from mongoeco.engines.sqlite import SQLiteEngine
            from mongoeco.wire import AsyncMongoEcoProxyServer
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ConfigError(
                "no database.uri is configured and the embedded engine is not installed; "
                "install mongogate[embedded] (needs Python >= 3.13) or set database.uri"
            ) from e
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="mongogate-embedded", daemon=True)
        self._thread.start()
        db_file = self.data_dir / "mongogate.sqlite3"
        server = AsyncMongoEcoProxyServer(
            engine=SQLiteEngine(str(db_file), executor_workers=2), host="127.0.0.1", port=0
        )
        try:
            addr = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        self._server = server
        self.uri = str(addr.uri)
        try:
            self._publish(self.uri)
        except OSError as e:  # the engine works; only other processes cannot find it
            log.warning("could not write %s: %s", self.data_dir / ENGINE_FILE, e)
        log.info("embedded engine on %s (data in %s)", self.uri, db_file)
        return self.uri

    def _publish(self, uri: str) -> None:
        """Write engine.json (0600, atomically) so other processes on this data dir can connect."""
        path = self.data_dir / ENGINE_FILE
        tmp = path.with_name(f".{ENGINE_FILE}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"uri": uri, "pid": os.getpid()}, f)
        os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_CREAT
        os.replace(tmp, path)

    def _take_lock(self) -> None:
        lock_path = self.data_dir / "engine.lock"
        f = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the engine's lifetime
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            self.in_use = True
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise ConfigError(
                f"data directory {self.data_dir} is in use by {holder}; stop that server, or give this "
                "one its own directory (server.data_dir / MONGOGATE_SERVER__DATA_DIR), or set database.uri"
            ) from e
        f.seek(0)
        f.truncate()
        f.write(f"mongogate pid {os.getpid()}\n")
        f.flush()
        self._lock_file = f

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            if self._server is not None:
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(self._server.close(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
        self._loop = self._thread = self._server = None
        if self._lock_file is not None:
            with contextlib.suppress(OSError):  # ours: we hold the lock
                (self.data_dir / ENGINE_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._lock_file.seek(0)
                self._lock_file.truncate()
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None


class Database:
    """The memory (read-write) and query (read-only user) connections."""

    def __init__(self, settings: DatabaseSettings, data_dir: Path) -> None:
        self.settings = settings
        self.data_dir = data_dir
        self.engine: EmbeddedEngine | None = None
        #: the URI of another process's embedded engine on this data dir, when we connected to it
        self.shared_engine_uri: str | None = None
        self._client: AsyncMongoClient[Doc] | None = None
        self._query_client: AsyncMongoClient[Doc] | None = None
        self._uris = ("", "")

    @property
    def embedded(self) -> bool:
        return self.engine is not None or self.shared_engine_uri is not None

    async def open(self) -> None:
        uri = self.settings.uri
        if uri is None:
            engine = EmbeddedEngine(self.data_dir)
            try:
                uri = await anyio.to_thread.run_sync(engine.start)
            except ConfigError:
                shared = published_engine_uri(self.data_dir) if engine.in_use else None
                if shared is None:
                    raise
                # Another process owns the engine: use it over the wire rather than fail.
                log.info("data directory %s is served by another process: using %s", self.data_dir, shared)
                self.shared_engine_uri = uri = shared
            else:
                self.engine = engine
            log.warning(
                "embedded engine (mongoeco) in %s: it enforces no roles, so read-only rests on "
                "mongogate's own checks; use database.uri/query_uri with real MongoDB in production",
                self.data_dir,
            )
        self._client, self._query_client = connect(uri, self.settings)
        self._uris = (uri, self.settings.query_uri or uri)

    async def close(self) -> None:
        # Shielded: a shutdown that cancels the server (a vanished stdio client) must still
        # stop the engine and release the data directory.
        with anyio.CancelScope(shield=True):
            for c in (self._client, self._query_client):
                if c is not None:
                    await c.close()
            self._client = self._query_client = None
            self.shared_engine_uri = None
            if self.engine is not None:
                await anyio.to_thread.run_sync(self.engine.stop)
                self.engine = None

    @property
    def client(self) -> AsyncMongoClient[Doc]:
        if self._client is None:
            raise StorageError("database is not open")
        return self._client

    @property
    def memory(self) -> AsyncDatabase[Doc]:
        """Read-write database for memory collections only."""
        return self.client[self.settings.name]

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

    async def ping(self) -> None:
        """Both connections answer, or one StorageError line naming the hosts, the key and the timeout."""
        await ping(self.client, self._uris[0], self._key("uri"), self.settings)
        await ping(self.query_client, self._uris[1], self._key("query_uri"), self.settings)

    def _key(self, key: str) -> str:
        if self.settings.uri is None:
            return "the embedded engine"
        return f"database.{key}" if key == "uri" or self.settings.query_uri else "database.uri"
