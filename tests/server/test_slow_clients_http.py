"""The connection layer holds against slow clients: head and body deadlines, a connection cap
(503 beyond it) and keep-alive limits, over real sockets.

No wall-clock margins: waits are for events (a socket reaching EOF, the server's connection
count); socket timeouts only guard against a hang.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2

from mongogate.server.app import build_server
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import make_settings

from . import rpc

HANG_GUARD_S = 120.0
INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
)


@contextmanager
def serving(engine_uri: str, tmp: Path, **server: Any) -> Iterator[BackgroundHttpServer]:
    settings = make_settings(engine_uri, "t_slow", tmp, server=server)
    mcp = build_server(settings, transport="http", insecure_no_auth=True)
    with BackgroundHttpServer(mcp, settings=settings.server) as http:
        yield http


def wait_until(what: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not what():
        assert time.monotonic() < deadline, "hang guard"
        time.sleep(0.01)


def connect(http: BackgroundHttpServer, payload: bytes) -> socket.socket:
    s = socket.create_connection((http.host, http.port), timeout=HANG_GUARD_S)
    if payload:
        s.sendall(payload)
    return s


def read_to_eof(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def head(http: BackgroundHttpServer, *, length: int | None = None, complete: bool = True) -> bytes:
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: {http.host}:{http.port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + ("\r\n\r\n" if complete else "\r\n")).encode()


def normal_client_is_served(http: BackgroundHttpServer) -> None:
    with httpx2.Client(timeout=HANG_GUARD_S) as c:
        r = c.post(http.url, content=INIT, headers=rpc.headers(None))
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        r = c.post(
            http.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_session"}},
            headers=rpc.headers(None, sid),
        )
        assert rpc.result(r).get("isError") is not True


def test_stalled_connections_do_not_block_others(engine_uri: str, tmp_path: Path) -> None:
    """100 stalled connections stay open (long deadline) while a normal client is served."""
    limits: dict[str, Any] = {"header_timeout_s": 300, "body_timeout_s": 300, "max_connections": 500}
    limits["max_pending_heads_per_address"] = 1000  # all from 127.0.0.1: test_conn_budget_http.py
    with serving(engine_uri, tmp_path, **limits) as http, ExitStack() as stack:
        for i in range(100):
            payload = head(http, complete=False) if i % 2 else head(http, length=len(INIT)) + INIT[:-1]
            stack.enter_context(connect(http, payload))
        wait_until(lambda: http.open_connections >= 100)
        normal_client_is_served(http)
        assert http.open_connections >= 100  # they were all still open meanwhile


def test_stalled_connections_are_closed_by_the_deadlines(engine_uri: str, tmp_path: Path) -> None:
    """60 heads that never finish and 40 bodies missing their last byte are all closed."""
    limits: dict[str, Any] = {"header_timeout_s": 0.5, "body_timeout_s": 0.5, "max_connections": 500}
    with serving(engine_uri, tmp_path, **limits, max_pending_heads_per_address=1000) as http:
        started = time.monotonic()
        heads = [connect(http, head(http, complete=False)) for _ in range(30)]
        silent = [connect(http, b"") for _ in range(30)]
        bodies = [connect(http, head(http, length=len(INIT)) + INIT[:-1]) for _ in range(40)]
        for s in heads + silent:
            assert read_to_eof(s).startswith(b"HTTP/1.1 408")
        for s in bodies:
            answer = read_to_eof(s)
            assert answer.startswith(b"HTTP/1.1 408") and b"server.body_timeout_s" in answer
        took = time.monotonic() - started
        for s in heads + silent + bodies:
            s.close()
        wait_until(lambda: http.open_connections == 0)
        normal_client_is_served(http)
    print(f"100 stalled connections closed {took:.2f} s after they were opened (deadlines 0.5 s)")


def test_connection_cap_answers_503(engine_uri: str, tmp_path: Path) -> None:
    with serving(
        engine_uri, tmp_path, header_timeout_s=300, max_connections=20, max_pending_heads_per_address=1000
    ) as http:
        stalled = [connect(http, head(http, complete=False)) for _ in range(25)]
        wait_until(lambda: http.open_connections >= 25)
        with httpx2.Client(timeout=HANG_GUARD_S) as c:
            r = c.post(http.url, content=INIT, headers=rpc.headers(None))
        assert r.status_code == 503
        for s in stalled:
            s.close()
        wait_until(lambda: http.open_connections == 0)
        normal_client_is_served(http)


def test_keep_alive_request_budget(engine_uri: str, tmp_path: Path) -> None:
    with serving(engine_uri, tmp_path, keep_alive_max_requests=2) as http:
        s = connect(http, b"")
        ping = head(http, length=len(INIT)) + INIT
        s.sendall(ping + ping)  # two requests on one connection, then it is closed
        answer = read_to_eof(s)
        assert answer.count(b"HTTP/1.1 200") == 2 and b"connection: close" in answer.lower()
        s.close()
