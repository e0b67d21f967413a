"""server.max_sessions_per_principal: one token cannot hold thousands of MCP sessions (issue 19).

Raw JSON-RPC on protocol 2025-06-18 (the sessions with `Mcp-Session-Id`). Opening one more
session than the cap ends that principal's least recently used idle one (404 from then on);
with every session busy (a request in flight, held by a failpoint tool) it is refused with 429
`[busy] (retryable)`. Other principals are never touched. No wall-clock margins: "least
recently used" is the order of requests, "busy" a call the failpoint holds.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.tools import Tool

from mongogate.config import Settings
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.base import Call, ToolInput, make_tool
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings
from tests.helpers import INITIALIZE

from . import rpc

pytestmark = pytest.mark.anyio
PING = {"jsonrpc": "2.0", "id": 7, "method": "ping"}


class Hold:
    def __init__(self) -> None:
        self.entered = 0
        self.go = threading.Event()

    def tools(self, _settings: Settings) -> list[Tool]:
        async def hold(call: Call, _args: ToolInput) -> dict[str, Any]:
            self.entered += 1
            await anyio.to_thread.run_sync(self.go.wait, abandon_on_cancel=True)
            return {"ok": True}

        return [make_tool(name="hold", description="test failpoint", input_model=ToolInput, handler=hold)]


def _serve(engine_uri: str, db_name: str, tmp: Path, hold: Hold) -> tuple[BackgroundHttpServer, Settings]:
    settings = make_settings(
        engine_uri, db_name, tmp, auth=jwt_auth(), server={"max_sessions_per_principal": 2}
    )
    registry = ToolRegistry(run_tools=False)
    registry.add_tools(hold.tools)
    server = BackgroundHttpServer(
        build_server(settings, registry, transport="http"), settings=settings.server
    )
    return server.start(), settings


async def _ping(hc: httpx2.AsyncClient, url: str, token: str, sid: str) -> int:
    return (await hc.post(url, json=PING, headers=rpc.headers(token, sid))).status_code


async def test_one_more_session_ends_the_least_recently_used_idle_one_of_that_principal_only(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    hold = Hold()
    server, settings = _serve(engine_uri, db_name, tmp_path, hold)
    alice = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="alice")
    bob = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="bob")
    try:
        async with httpx2.AsyncClient(timeout=60) as hc:
            url = server.url
            b1 = await rpc.open_session(hc, url, bob)
            a1 = await rpc.open_session(hc, url, alice)
            a2 = await rpc.open_session(hc, url, alice)
            assert await _ping(hc, url, alice, a1) == 200  # a1 used last: a2 is the least recent
            a3 = await rpc.open_session(hc, url, alice)  # over the cap of 2: a2 ends
            assert await _ping(hc, url, alice, a2) == 404
            assert await _ping(hc, url, alice, a1) == 200 and await _ping(hc, url, alice, a3) == 200
            assert await _ping(hc, url, bob, b1) == 200  # another principal is never touched
            for _ in range(20):  # a token opening sessions in a loop keeps at most 2
                await rpc.open_session(hc, url, alice)
            alive = [s for s in (a1, a3) if await _ping(hc, url, alice, s) == 200]
            assert alive == [] and await _ping(hc, url, bob, b1) == 200
    finally:
        hold.go.set()
        server.stop()


async def test_with_every_session_busy_one_more_is_refused_busy(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    hold = Hold()
    server, settings = _serve(engine_uri, db_name, tmp_path, hold)
    alice = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="alice")
    try:
        async with httpx2.AsyncClient(timeout=60) as hc:
            url = server.url
            sessions = [await rpc.open_session(hc, url, alice) for _ in range(2)]
            held: list[httpx2.Response] = []

            async def busy(sid: str) -> None:
                held.append(await rpc.call_tool(hc, url, alice, sid, "hold", {}))

            async with anyio.create_task_group() as tg:
                for sid in sessions:
                    tg.start_soon(busy, sid)
                while hold.entered < 2:  # polled: both sessions now have a call in flight
                    await anyio.sleep(0.005)
                r = await hc.post(url, json=INITIALIZE[0], headers=rpc.headers(alice))
                assert r.status_code == 429 and r.headers["retry-after"] == "1"
                text = r.json()["error"]["message"]
                assert text.startswith("[busy] (retryable) ")
                assert "server.max_sessions_per_principal = 2" in text
                # a client of the newest protocol keeps no session: the cap never refuses it
                async with (
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice}"}, timeout=60) as hc2,
                    Client(streamable_http_client(url, http_client=hc2)) as modern,
                ):
                    assert not (await modern.call_tool("list_sessions", {})).is_error
                hold.go.set()
            assert [h.status_code for h in held] == [200, 200]
            assert [await _ping(hc, url, alice, s) for s in sessions] == [200, 200]  # neither was ended
    finally:
        hold.go.set()
        server.stop()


async def test_requests_of_another_principal_naming_a_session_never_make_it_busy(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Another tenant holds requests naming alice's idle sessions (heads sent, bodies withheld):
    they are not alice's, so her sessions stay idle and her next one ends the least recently used.
    Before, each such request counted against alice's session before anyone checked its sender,
    and her next initialize was refused 429."""
    hold = Hold()
    server, settings = _serve(engine_uri, db_name, tmp_path, hold)
    alice = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="alice")
    mallory = mint_dev_token(settings.auth, tenant="evil", ttl_s=600, subject="mallory")
    withheld: list[socket.socket] = []
    try:
        async with httpx2.AsyncClient(timeout=60) as hc:
            url = server.url
            a1, a2 = [await rpc.open_session(hc, url, alice) for _ in range(2)]
            for sid in (a1, a2):
                for _ in range(3):  # a head and half a body each, never finished
                    withheld.append(_withheld(server, mallory, sid))
            # the heads are parsed (their requests are running, waiting for their bodies) ...
            while server.budget.pending("127.0.0.1"):
                await anyio.sleep(0.005)
            # ... and one whole request of mallory's, sent after them, is answered after them
            assert await _ping(hc, url, mallory, a1) == 404  # not hers: as an unknown session
            r = await hc.post(url, json=INITIALIZE[0], headers=rpc.headers(alice))
            assert r.status_code == 200, r.text  # before: 429, both of alice's sessions "busy"
            assert await _ping(hc, url, alice, a1) == 404  # the least recently used one ended
            assert await _ping(hc, url, alice, a2) == 200
    finally:
        for s in withheld:
            s.close()
        server.stop()


def _withheld(server: BackgroundHttpServer, token: str, sid: str) -> socket.socket:
    body = json.dumps(PING).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Type: application/json\r\n"
        f"Accept: {rpc.ACCEPT}\r\nMCP-Protocol-Version: {rpc.PROTOCOL}\r\nMcp-Session-Id: {sid}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    s = socket.create_connection((server.host, server.port), timeout=60)
    s.sendall(head + body[: len(body) // 2])
    return s
