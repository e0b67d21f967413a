"""DNS-rebinding protection on every address the server binds: bad Host -> 421, bad Origin -> 403."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mongogate.config import ServerSettings
from mongogate.errors import ConfigError
from mongogate.server.app import build_server
from mongogate.server.guards import HostOriginGuard
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import make_settings

from . import rpc


async def noop_app(scope: Any, receive: Any, send: Any) -> None:
    return None


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": rpc.PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.fixture(params=["127.0.0.1", "127.0.0.2", "::1"], scope="module")
def served(
    request: pytest.FixtureRequest, engine_uri: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """An unauthenticated loopback server (what --insecure-no-auth runs) on each address."""
    host: str = request.param
    settings = make_settings(engine_uri, "t_host", tmp_path_factory.mktemp("h"))
    server = build_server(settings, transport="http", insecure_no_auth=True)
    with BackgroundHttpServer(
        server, host=host, settings=settings.server.model_copy(update={"host": host})
    ) as http:
        yield http.url


def _post(url: str, **headers: str) -> int:
    with httpx2.Client(timeout=30) as c:
        return c.post(url, json=INIT, headers=rpc.headers(None, **headers)).status_code


def test_bad_host_421_bad_origin_403(served: str) -> None:
    port = served.rsplit(":", 1)[1].split("/")[0]
    assert _post(served) == 200  # the bound host:port, as the client sends it
    assert _post(served, Host=f"localhost:{port}") == 200
    assert _post(served, Host="evil.example") == 421
    assert _post(served, Host=f"evil.example:{port}") == 421  # a rebinding attacker's name
    assert _post(served, Host="localhost:1") == 421  # another port
    assert _post(served, Origin=f"http://localhost:{port}") == 200
    assert _post(served, Origin="http://evil.example") == 403
    assert _post(served, Origin=f"http://evil.example:{port}") == 403
    assert _post(served, Origin="null") == 403


def test_configured_names_behind_a_proxy(engine_uri: str, tmp_path: Path) -> None:
    settings = make_settings(
        engine_uri,
        "t_host_proxy",
        tmp_path,
        server={"allowed_hosts": ["mcp.example.com"], "allowed_origins": ["https://app.example.com"]},
    )
    server = build_server(settings, transport="http", insecure_no_auth=True)
    with BackgroundHttpServer(server, settings=settings.server) as http:
        assert _post(http.url, Host="mcp.example.com") == 200
        assert _post(http.url, Host="MCP.example.com:443", Origin="https://app.example.com") == 200
        assert _post(http.url, Host="mcp.example.org") == 421
        assert _post(http.url, Origin="https://evil.example.com") == 403


def test_wildcard_bind_needs_names() -> None:
    with pytest.raises(ConfigError, match=r"server.allowed_hosts"):
        HostOriginGuard(noop_app, ServerSettings(host="0.0.0.0"))
    guard = HostOriginGuard(noop_app, ServerSettings(host="0.0.0.0", public_url="https://mcp.example.com"))
    assert guard.host_allowed("mcp.example.com", "8000", "http")
    assert guard.origin_allowed("https://mcp.example.com", "8000")
    assert not guard.host_allowed("evil.example", "8000", "http")
    assert HostOriginGuard(lambda *a: None, ServerSettings(host="0.0.0.0", allowed_hosts=["*"])).host_allowed(  # type: ignore[arg-type]
        "anything", "1", "http"
    )
