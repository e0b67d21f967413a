"""The mongoeco wire server on a SQLite file, on its own thread and event loop.

Never on the caller's loop: a driver waiting on a server that shares its loop can deadlock.
This is the building block: the engine process (`daemon`) runs one with credentials, and the
test suite runs one in-process without them (a cheap engine per test session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

from mongogate.engine.files import DB_FILE, MECHANISM, USER, socket_uri
from mongogate.errors import ConfigError

log = logging.getLogger(__name__)


class EmbeddedEngine:
    """One mongoeco server; `password` makes every command but the handshake need SCRAM-SHA-256."""

    def __init__(
        self, data_dir: Path, *, password: str | None = None, port: int = 0, socket_path: Path | None = None
    ) -> None:
        self.data_dir = data_dir
        self.password = password
        self.port = port
        #: serve on this Unix domain socket instead of a loopback TCP port (compat.mongoeco.UnixProxyServer)
        self.socket_path = socket_path
        self.uri: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None

    @property
    def data_file(self) -> Path:
        return self.data_dir / DB_FILE

    def start(self) -> str:
        try:
            from mongoeco.wire import AsyncMongoEcoProxyServer
            from mongoeco.wire.auth import WireAuthUser
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ConfigError(
                "no database.uri is configured and the embedded engine is not installed; "
                "install mongogate with its embedded extra (Python >= 3.13; from a clone: "
                "docs/operations.md, Install) or set database.uri"
            ) from e
        self.data_dir.mkdir(parents=True, exist_ok=True)
        users: tuple[Any, ...] = ()
        if self.password is not None:
            # SCRAM only: mongoeco's PLAIN compares the password sent in clear.
            users = (
                WireAuthUser(
                    USER, self.password, mechanisms=(MECHANISM,), roles=({"role": "root", "db": "admin"},)
                ),
            )
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="mongogate-embedded", daemon=True)
        self._thread.start()
        from mongogate.compat.mongoeco import FastIdEngine  # flat inserts, primary-key finds

        sqlite = FastIdEngine(str(self.data_file), executor_workers=2)
        server: Any
        if self.socket_path is not None:
            from mongogate.compat.mongoeco import UnixProxyServer
            from mongogate.engine.write_signal import prepare

            # before the socket exists: every client finds the file, under this start's new epoch
            try:
                prepare(self.socket_path.parent)
            except BaseException:
                self.stop()  # the loop's thread, started above
                raise

            server = UnixProxyServer(self.socket_path, engine=sqlite, auth_users=users)
        else:
            server = AsyncMongoEcoProxyServer(
                engine=sqlite, host="127.0.0.1", port=self.port, auth_users=users
            )
        try:
            addr = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        self._server = server
        if self.socket_path is not None:
            self.uri = socket_uri(self.socket_path)
        else:
            self.port = int(addr.port)
            self.uri = str(addr.uri)
        log.info("embedded engine on %s (data in %s)", self.address, self.data_file)
        return self.uri

    @property
    def address(self) -> str:
        return str(self.socket_path) if self.socket_path is not None else f"127.0.0.1:{self.port}"

    def connections(self) -> int:
        """Open client connections (pymongo keeps at least its monitor's open while a client lives)."""
        server = self._server
        if server is None:
            return 0
        from mongogate.compat.mongoeco import open_connections

        return open_connections(server)

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
