"""`subscriptions/listen` (protocol 2026-07-28): mongogate publishes no events, so it serves no
listen stream (issue 36).

Before, the SDK served one for every request: a response that never ends, held by a token per
connection, outside the session cap (no `Mcp-Session-Id` on this revision), the stateless rule
(which refused GET only) and the tenant limit (which counted tool, prompt and resource calls).
One token holding every connection with them left every other tenant 503. Now a listen is a
JSON-RPC error at once (-32601, saying why), `server/discover` advertises no capability that
would be delivered on one, and the connection it came on is idle, so a new connection takes its
place when the budget is full. Through the SDK's own client and raw HTTP; the waits are for
events (every attempt answered), never margins.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mongogate.config import Settings
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests.conftest import jwt_auth, make_settings

from . import rpc

pytestmark = pytest.mark.anyio
ATTEMPTS = 25
NOT_OFFERED = "mongogate publishes no events"


@contextlib.asynccontextmanager
async def serving(
    engine_uri: str, db_name: str, tmp: Path, **server: Any
) -> AsyncIterator[tuple[BackgroundHttpServer, Settings]]:
    settings = make_settings(engine_uri, db_name, tmp, auth=jwt_auth(), server=server)
    http = BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server)
    await anyio.to_thread.run_sync(http.start)
    try:
        yield http, settings
    finally:
        await anyio.to_thread.run_sync(http.stop)


def sdk_client(url: str, token: str) -> tuple[httpx2.AsyncClient, Client]:
    """At most 4 connections (below the budget of 12 with another tenant's beside them), none
    reused: a kept-alive connection the server closes (its keep-alive timeout, or to make room)
    just as the client sends its next request on it fails that POST with a ReadError the SDK's
    client does not retry, and ends the client. Any keep-alive close races a client so; CI saw
    such a ReadError here once, on a loaded machine (docs/decisions/http-and-transports.md)."""
    limits = httpx2.Limits(max_connections=4, max_keepalive_connections=0)
    hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60, limits=limits)
    return hc, Client(streamable_http_client(url, http_client=hc))


async def other_tenant_is_served(url: str, token: str) -> None:
    hc, client = sdk_client(url, token)
    async with hc, client:
        assert not (await client.call_tool("list_sessions", {})).is_error


async def test_raw_listen_streams_of_one_token_hold_no_connection(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """25 listen requests of one token against a budget of 12 connections, each kept open by its
    client: none is a stream, and another tenant is served while they are all still open."""
    async with serving(engine_uri, db_name, tmp_path, max_connections=12) as (http, settings):
        evil = mint_dev_token(settings.auth, tenant="evil", ttl_s=600, subject="mallory")
        acme = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="alice")
        answers: list[tuple[int, bytes]] = []
        done = anyio.Event()
        limits = httpx2.Limits(max_connections=ATTEMPTS * 2, max_keepalive_connections=ATTEMPTS * 2)
        async with httpx2.AsyncClient(timeout=60, limits=limits) as hc:

            async def listen(i: int, answered: anyio.Event) -> None:
                body = rpc.modern_request(
                    "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, rid=i
                )
                headers = rpc.modern_headers(evil, body)
                async with hc.stream("POST", http.url, json=body, headers=headers) as r:
                    chunks = r.aiter_bytes()  # kept: leaving the loop would close the response
                    first = await anext(chunks, b"")  # a stream's first frame, or a whole answer
                    answers.append((r.status_code, first))
                    answered.set()
                    await done.wait()  # held open, as an attacker holds it

            async with anyio.create_task_group() as tg:
                for i in range(ATTEMPTS):  # one after the other, each holding on: every one that
                    answered = anyio.Event()  # found a free connection kept it
                    tg.start_soon(listen, i, answered)
                    await answered.wait()
                try:
                    await other_tenant_is_served(http.url, acme)
                finally:
                    done.set()
        streams = [a for a in answers if a[0] == 200]
        assert streams == []  # before: every one that got a connection was a stream, the rest 503
        refused = [a for a in answers if a[0] == 404]
        assert refused and all(b'"code":-32601' in a[1] and NOT_OFFERED.encode() in a[1] for a in refused)
        assert {a[0] for a in answers} <= {404, 503}  # 503: the budget was full at that moment


async def test_sdk_listen_is_refused_and_discover_advertises_nothing_it_would_deliver(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with serving(engine_uri, db_name, tmp_path, max_connections=12) as (http, settings):
        evil = mint_dev_token(settings.auth, tenant="evil", ttl_s=600, subject="mallory")
        acme = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="alice")
        hc, client = sdk_client(http.url, evil)
        async with hc, client:
            assert client.protocol_version == rpc.MODERN
            caps = client.server_capabilities
            assert caps is not None and caps.tools is not None and caps.resources is not None
            assert caps.prompts is not None
            assert not caps.tools.list_changed and not caps.prompts.list_changed
            assert not caps.resources.list_changed and not caps.resources.subscribe
            errors: list[MCPError] = []

            async def listen() -> None:
                try:
                    async with client.listen(tools_list_changed=True, resources_list_changed=True):
                        raise AssertionError("a listen stream was opened")
                except MCPError as e:
                    errors.append(e)

            async with anyio.create_task_group() as tg:
                for _ in range(ATTEMPTS):
                    tg.start_soon(listen)
            assert len(errors) == ATTEMPTS
            assert all(e.error.code == -32601 and NOT_OFFERED in e.error.message for e in errors)
            await other_tenant_is_served(http.url, acme)
        async with httpx2.AsyncClient(timeout=60) as raw:  # the same answer to a raw discover
            r = await rpc.modern(raw, http.url, evil, "server/discover")
            found = r.json()["result"]["capabilities"]
            assert found["resources"] == {"subscribe": False, "listChanged": False}
            assert found["tools"] == {"listChanged": False} and found["prompts"] == {"listChanged": False}
