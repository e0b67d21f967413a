"""`GET /healthz` and `GET /readyz`: unauthenticated, a status word only, readiness follows the database."""

from __future__ import annotations

from pathlib import Path

import httpx2

from mongogate.db import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings


def test_healthz_and_readyz_with_the_database_up_and_stopped(tmp_path: Path, db_name: str) -> None:
    engine = EmbeddedEngine(tmp_path / "engine")  # its own engine, so the test can stop it
    uri = engine.start()
    try:
        settings = make_settings(
            uri,
            db_name,
            tmp_path,
            auth=jwt_auth(),  # probes need no token even when every MCP call does
            server={"ready_timeout_s": 1.0},
            database={"timeout_ms": 1000},
        )
        with BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server) as srv:
            base = f"http://127.0.0.1:{srv.port}"
            with httpx2.Client(base_url=base, timeout=30) as hc:
                assert hc.post("/mcp", json={}).status_code == 401  # the MCP endpoint still needs a token
                for path, body in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
                    r = hc.get(path)
                    assert (r.status_code, r.json()) == (200, body)
                    assert r.headers["cache-control"] == "no-store"
                    # a probe addresses the pod by IP: no Host/Origin check on these two paths
                    assert hc.get(path, headers={"Host": "10.1.2.3:8000"}).status_code == 200
                assert hc.post("/healthz").status_code == 405
                assert hc.get("/healthzz").status_code == 404

                engine.stop()
                r = hc.get("/readyz")
                assert (r.status_code, r.json()) == (503, {"status": "unavailable"})  # no driver detail
                r = hc.get("/healthz")  # no database call: alive while the database is not
                assert (r.status_code, r.json()) == (200, {"status": "ok"})
    finally:
        engine.stop()


def test_readyz_is_unavailable_before_the_lifespan_opened_the_database() -> None:
    """Outside the server's lifespan there is no database to ping: 503, never an exception."""
    from mongogate.server.health import HealthRoutes, Readiness

    async def app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
        raise AssertionError("health paths never reach the MCP app")

    import anyio

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "path": "/readyz", "method": "GET", "headers": []}
    anyio.run(HealthRoutes(app, Readiness(), 1.0), scope, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 503
