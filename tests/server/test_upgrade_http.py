"""An `Upgrade` request is plain HTTP on the guarded path (uvicorn ws="none", server/http.py):
a token, Host and Origin are checked as on any request, the connection keeps serving after it,
and a client repeating it writes nothing to the log at WARNING."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings

from . import rpc
from .test_host_origin_http import INIT

UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def test_an_upgrade_is_checked_like_any_request_and_logs_nothing(
    engine_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(engine_uri, "t_upgrade", tmp_path, auth=jwt_auth())
    server = build_server(settings, ToolRegistry(), transport="http")
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
    with (
        caplog.at_level(logging.WARNING),
        BackgroundHttpServer(server) as http,
        httpx2.Client(timeout=30) as hc,
    ):
        caplog.clear()  # the start's own warnings (the engine enforces no roles, ...)

        def post(tok: str | None, **extra: str) -> int:
            return hc.post(http.url, json=INIT, headers=rpc.headers(tok, **UPGRADE, **extra)).status_code

        assert post(token) == 200  # served as the plain request it also is
        assert post(None) == 401
        assert post("not-a-token") == 401
        assert post(token, Origin="http://evil.example") == 403
        assert post(token, Host="evil.example") == 421
        assert [post(None) for _ in range(20)] == [401] * 20
        # the same connection, an upgrade then a plain request pipelined: both answered
        where = urlsplit(http.url)
        assert where.hostname is not None and where.port is not None
        raw = (
            f"GET {where.path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in UPGRADE.items())
            + f"\r\nGET /healthz HTTP/1.1\r\nHost: {where.netloc}\r\nConnection: close\r\n\r\n"
        )
        with socket.create_connection((where.hostname, where.port), timeout=30) as s:
            s.sendall(raw.encode())
            got = b""
            while chunk := s.recv(65536):
                got += chunk
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", got) == [b"401", b"200"]
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m.split(" (")[0] for m in warned] == [  # the guard's refusals only, none per upgrade
        "refused a request from Origin 'http://evil.example'",
        "refused a request for Host 'evil.example'",
    ]
