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
        async with httpx2.AsyncClient(transport=transport, base_url="http://x", timeout=60) as hc:

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

    from mongogate.server.auth.jwks import JwksUnavailable, fetch_jwks

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


def test_an_event_mongodb_cannot_encode_falls_back_and_the_writer_lives_on(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A signed token's `sub` is any JSON string, a lone surrogate included (PyJWT's json.loads
    takes "\\ud800"); BSON cannot encode it. That must cost one event a trip to the fallback
    file, not the writer thread: a dead writer never answers `synced()`, so every later
    refused query call would hang, and no audit event would reach MongoDB again."""
    import asyncio
    import json

    from pymongo import MongoClient

    from mongogate.audit.log import AuditLog
    from mongogate.audit.store import COLLECTION

    path = tmp_path / "audit.jsonl"
    log = AuditLog.for_database(
        path, uri=engine_uri, db_name=db_name, sink="mongodb", queue_size=100, timeout_ms=2000,
        retention_days=7, redact_values=False, max_value_chars=64, stream=None,
    )  # fmt: skip

    def reject(principal: str, request_id: str) -> None:
        log.filter_rejected(
            tool="find_orders", tenant="acme", principal=principal, reason="operator_not_allowed",
            path="filter.$where", filter={"$where": "1"}, request_id=request_id,
        )  # fmt: skip

    async def calls() -> None:
        reject("mallory\ud800", "bad")
        await log.synced()
        reject("alice", "good")
        await log.synced()

    try:
        asyncio.run(asyncio.wait_for(calls(), 30))  # a cap on a hang, not a margin
    finally:
        log.close()
    on_file = [json.loads(x)["request_id"] for x in path.read_text().splitlines()] if path.exists() else []
    assert on_file == ["bad"] and log.fallbacks == 1
    c: MongoClient[dict[str, object]] = MongoClient(engine_uri)
    try:
        assert [d["request_id"] for d in c[db_name][COLLECTION].find()] == ["good"]
    finally:
        c.close()


def test_metrics_sit_behind_the_host_guard_and_name_no_tenant(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A rebinding page (foreign Host) cannot scrape /metrics; a random tool name becomes "unknown"."""
    from mongogate.server.app import build_server
    from mongogate.server.http import BackgroundHttpServer
    from mongogate.server.metrics import metrics_of
    from tests.conftest import make_settings

    settings = make_settings(engine_uri, db_name, tmp_path, server={"metrics": True})
    server = build_server(settings, transport="http", insecure_no_auth=True)
    with BackgroundHttpServer(server) as http:
        base = http.url.removesuffix("/mcp")
        with httpx2.Client(timeout=30) as hc:
            assert hc.get(base + "/metrics", headers={"Host": "evil.example"}).status_code == 421
            r = hc.get(base + "/metrics")
    assert r.status_code == 200 and "acme" not in r.text
    metrics = metrics_of(server)
    assert metrics is not None
    assert metrics.tool_label("x" * 10_000) == "unknown" and metrics.tool_label(["find"]) == "unknown"


async def test_a_stateless_server_opens_no_idle_get_streams(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A stateless server can never send anything on a GET stream (no session routes to it), yet
    each one was held open for good, each counting against `server.max_connections`: a token
    holder could fill them all. The spec's other answer is 405."""
    from mongogate.server.app import build_server
    from mongogate.server.auth.tokens import mint_dev_token
    from mongogate.server.http import BackgroundHttpServer
    from tests.conftest import jwt_auth, make_settings
    from tests.server import rpc

    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), server={"stateless": True})
    with BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server) as http:
        token = mint_dev_token(settings.auth, tenant="acme")
        async with httpx2.AsyncClient(timeout=30) as hc:  # the cap on a hang, not a margin
            with anyio.fail_after(30):
                r = await hc.get(http.url, headers=rpc.headers(token))
            assert r.status_code == 405 and r.headers["allow"] == "POST"
            assert (await hc.get(http.url, headers=rpc.headers(None))).status_code in (401, 405)
            listed = await hc.post(
                http.url, headers=rpc.headers(token), json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            )
            assert listed.status_code == 200  # POST still served
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as client,
        ):
            assert (await client.list_tools()).tools  # the SDK's client takes the 405 in its stride


def test_a_deeply_nested_key_set_is_unavailable_keys_not_a_crash() -> None:
    """200 KB of `[` (under the size cap) makes json.loads raise RecursionError, which is no
    ValueError: it escaped the fetch, so a token needing a refresh got a server error instead
    of a 401 "signing keys unavailable", and the interval's one fetch was spent."""
    import http.server
    import threading

    from mongogate.server.auth.jwks import Reason, Rejected, RemoteJwks

    body = b"[" * 200_000 + b"]" * 200_000

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        keys = RemoteJwks(
            f"http://127.0.0.1:{srv.server_address[1]}/jwks", cache_s=300, refresh_interval_s=60
        )
        with pytest.raises(Rejected) as refused:
            keys.fetch_for({"alg": "RS256", "kid": "k1"})
        assert refused.value.kind == Reason.KEYS_UNAVAILABLE and keys.fetches == 1
    finally:
        srv.shutdown()
        srv.server_close()


async def test_a_token_with_a_deeply_nested_header_under_the_cap_is_a_401(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Held: json.loads recurses past ~10,000 levels only, and the 16 KB token cap allows about
    6,000, so a nested header is parsed before the signature check and refused with a 401."""
    import base64

    from mongogate.server.app import build_server
    from mongogate.server.http import BackgroundHttpServer
    from tests.conftest import jwt_auth, make_settings
    from tests.helpers import INITIALIZE
    from tests.server import rpc

    header = base64.urlsafe_b64encode(b'{"alg":"HS256","x":' + b"[" * 6000 + b"]" * 6000 + b"}")
    token = header.rstrip(b"=").decode() + ".e30.c2ln"
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    with BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server) as http:
        async with httpx2.AsyncClient(timeout=30) as hc:
            r = await hc.post(http.url, json=INITIALIZE[0], headers=rpc.headers(token))
    assert r.status_code == 401, r.text[:200]
    assert r.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
