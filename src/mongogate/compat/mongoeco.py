"""The embedded engine's internals (mongoeco 4.11; the ``embedded`` extra pins ``mongoeco==4.11.*``
and tests/test_compat.py pins each member used here).

``UnixProxyServer``: mongoeco's wire server on a Unix domain socket instead of a loopback TCP port.

A TCP port on 127.0.0.1 is open to every local user: before any login, mongoeco reads a whole
message of up to 48 MB (checksummed in pure Python on its only event loop) and keeps SCRAM
conversations for anyone, so one unauthenticated process could stall every tenant. A socket
inside the engine's 0700 data directory is reachable only by the directory's owner (and root):
the kernel refuses everyone else at ``connect``, before mongoeco sees a byte.

mongoeco 4.11 binds TCP only (``asyncio.start_server(host, port)`` in ``start``); this subclass
replaces that one call with ``asyncio.start_unix_server`` and keeps the rest of its lifecycle.
It reads and sets the proxy's private lifecycle (``_lifecycle_lock``, ``_server``,
``_owns_client``, ``_engine_connected``, ``_client._engine``, ``_accept_connection``,
``_diagnostics``, ``_update_diagnostic_resources``, ``_close_resources``) and calls the private
module's ``mongoeco.wire._lifecycle.finish_cleanup``, exactly as mongoeco's own ``start`` does.

``open_connections``: the proxy's ``_connections`` (mongoeco has no public count).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from mongoeco.wire import AsyncMongoEcoProxyServer
from mongoeco.wire._lifecycle import finish_cleanup


class UnixProxyServer(AsyncMongoEcoProxyServer):  # type: ignore[misc]
    """Serve the wire protocol on ``path`` (made 0600; a stale socket there is replaced, and removed
    again on close)."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path

    async def start(self) -> Any:
        async with self._lifecycle_lock:
            if self._server is not None:  # type: ignore[has-type]
                return self.path
            try:
                if self._owns_client:
                    self._engine_connected = True
                    await self._client._engine.connect()
                server = await asyncio.start_unix_server(
                    self._accept_connection, path=str(self.path), start_serving=False
                )
                self._server = server
                os.chmod(self.path, 0o600)  # the directory (0700) already keeps others out
                await server.start_serving()
                self._diagnostics.record("server_started")
                self._update_diagnostic_resources()
            except BaseException as error:
                try:
                    await finish_cleanup(self._close_resources())
                except BaseException as cleanup_error:
                    error.add_note(f"proxy startup cleanup failed: {cleanup_error}")
                raise
            return self.path


def open_connections(server: Any) -> int:
    """Client connections the proxy server holds open (``_connections``: no public count)."""
    return len(server._connections)
