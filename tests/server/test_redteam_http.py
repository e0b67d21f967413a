"""Red-team attacks on the unauthenticated HTTP surface: /readyz as a database-load lever."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
from pymongo import monitoring

from mongogate.config import DatabaseSettings
from mongogate.db import Database
from mongogate.server.health import HealthRoutes, Readiness

pytestmark = pytest.mark.anyio


class _Pings(monitoring.CommandListener):
    """Counts ping commands sent by clients created after registration (a real pymongo listener).

    pymongo has no unregister: the listener stays, counting only while ``active``.
    """

    def __init__(self) -> None:
        self.count = 0
        self.active = True

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.active and event.command_name == "ping":
            self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def _never(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    raise AssertionError("health paths never reach the MCP app")


async def test_a_flood_of_readyz_shares_one_database_ping(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Unauthenticated /readyz requests must not each cost database round trips (and pooled
    connections held up to ready_timeout_s on a slow database): concurrent probes share one."""
    pings = _Pings()
    monitoring.register(pings)
    db = Database(DatabaseSettings(uri=engine_uri, name=db_name), tmp_path)
    await db.open()
    try:
        await db.ping(30)
        pings.count = 0
        app = HealthRoutes(_never, Readiness(db), 30.0)
        n = 20
        codes: list[int] = []
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://x") as hc:

            async def probe() -> None:
                codes.append((await hc.get("/readyz")).status_code)

            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(probe)
        assert codes == [200] * n
        # Old code: 2 pings (both clients) per request, 2n in all, whatever the overlap.
        assert pings.count < 2 * n, f"{pings.count} pings for {n} concurrent probes"
    finally:
        pings.active = False
        await db.close()


def test_a_dripping_jwks_url_is_given_up_after_the_fetch_timeout() -> None:
    """A key set sent one byte at a time resets urllib's per-read timeout forever: the fetch
    (which holds the key source's lock, so every token with a new kid waits behind it) must
    end after ``timeout_s`` in all, not after ``timeout_s`` per byte."""
    import socket
    import threading
    import time

    from mongogate.server.jwks import JwksUnavailable, fetch_jwks

    drip = 400  # bytes, one per 50 ms: 20 s if the client waits for all of them
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sent: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n")
            n = 0
            try:
                for _ in range(drip):
                    conn.sendall(b" ")
                    n += 1
                    time.sleep(0.05)  # the attacker's pace, not a test margin
            except OSError:
                pass  # the client hung up: what the fix does
            sent.append(n)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(JwksUnavailable):
            fetch_jwks(f"http://127.0.0.1:{port}/jwks", 0.5)
        t.join(60)
    finally:
        listener.close()
    assert sent and sent[0] < drip, "the fetch waited for the whole drip"
