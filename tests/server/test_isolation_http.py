"""Many callers at once over real HTTP: the tenant comes from each token, never from the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pymongo import AsyncMongoClient

from mongogate.demo import FIND_ORDERS, ORDERS_INDEX
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.registry import ToolRegistry
from mongogate.tools.state import AppState
from tests.conftest import jwt_auth, make_settings

pytestmark = pytest.mark.anyio
TENANTS = ("acme", "globex", "initech", "umbrella")


async def seed(state: AppState) -> None:
    docs = [
        {"userId": t, "number": f"{t}-{i}", "status": "paid", "total": float(i), "createdAt": None}
        for t in TENANTS
        for i in range(5)
    ]
    await state.db.memory["orders"].insert_many(docs)
    await state.db.memory["orders"].create_index(list(ORDERS_INDEX))  # the demo spec's hint


async def test_20_concurrent_clients_of_4_tenants(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    registry = ToolRegistry([FIND_ORDERS])
    registry.on_startup(seed)
    leaks: list[str] = []
    sessions: dict[str, tuple[str, str]] = {}

    async def client(n: int, url: str) -> None:
        tenant = TENANTS[n % 4]
        token = mint_dev_token(settings.auth, tenant=tenant, ttl_s=600, subject=f"client-{n}")
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
            Client(streamable_http_client(url, http_client=hc)) as c,
        ):

            async def call(tool: str, **args: Any) -> dict[str, Any]:
                r = await c.call_tool(tool, args)
                assert not r.is_error, r.content
                return r.structured_content or {}

            sid = (await call("create_session"))["session_id"]
            sessions[sid] = (tenant, f"client-{n}")
            for i in range(3):
                await call(
                    "append", session_id=sid, turn_id=f"t{i}", role="user", content=f"{tenant}/{n}/{i}"
                )
                found = await call("find_orders", filter={"total": {"$gte": 0}})
                leaks.extend(
                    d["number"] for d in found["documents"] if not d["number"].startswith(tenant + "-")
                )
                assert found["returned"] == 5
                ctx = await call("load_context", session_id=sid)
                leaks.extend(
                    m["content"] for m in ctx["messages"] if not m["content"].startswith(f"{tenant}/{n}/")
                )
            # another client's session (of another tenant) is not found
            other = next((s for s, (t, _) in sessions.items() if t != tenant), None)
            if other is not None:
                r = await c.call_tool("load_context", {"session_id": other})
                assert r.is_error and "not found" in r.content[0].text  # type: ignore[union-attr]

    with BackgroundHttpServer(build_server(settings, registry, transport="http")) as http:
        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(client, n, http.url)
    assert leaks == []
    async with AsyncMongoClient[dict[str, Any]](engine_uri) as mongo:
        msgs = await mongo[db_name]["messages"].find({}).to_list()
        owners = {sid: t for sid, (t, _) in sessions.items()}
        stored = {s["_id"]: s["tenant"] for s in await mongo[db_name]["sessions"].find({}).to_list()}
    assert len(msgs) == 60 and len(sessions) == 20
    for m in msgs:
        assert m["tenant"] == owners[m["session_id"]] == stored[m["session_id"]]
        assert m["content"].startswith(m["tenant"] + "/")


async def test_required_scopes_refuse_a_token_without_them(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    spec = FIND_ORDERS.model_copy(update={"required_scopes": ["orders:read"]})
    registry = ToolRegistry([spec])
    registry.on_startup(seed)
    with BackgroundHttpServer(build_server(settings, registry, transport="http")) as http:
        for scopes, allowed in (([], False), (["other"], False), (["orders:read"], True)):
            token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, scopes=scopes)
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
                Client(streamable_http_client(http.url, http_client=hc)) as c,
            ):
                r = await c.call_tool("find_orders", {"filter": {}})
                assert r.is_error is (not allowed)
                if not allowed:
                    text = r.content[0].text  # type: ignore[union-attr]
                    assert "requires scope(s) orders:read" in text
                # memory tools need no scope
                assert not (await c.call_tool("create_session", {})).is_error


async def test_dns_rebinding_protection_stays_on(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600)
    with BackgroundHttpServer(build_server(settings, transport="http")) as http:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc:
            body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            evil = await hc.post(
                http.url, json=body, headers={"Host": "evil.example", "Accept": "application/json"}
            )
            assert evil.status_code in (400, 403, 421), evil.status_code
            origin = await hc.post(http.url, json=body, headers={"Origin": "http://evil.example"})
            assert origin.status_code in (400, 403), origin.status_code
