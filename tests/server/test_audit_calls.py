"""The audit log cannot be dodged or forged: the offending node is always logged, every refused
query-tool call leaves exactly one event, and log lines never carry raw control characters."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from mcp import Client

from mongogate.audit.read import read_events
from mongogate.config import Settings
from mongogate.demo import FIND_ORDERS
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry
from tests.conftest import DEV_SECRET, jwt_auth, make_settings

from . import rpc

pytestmark = pytest.mark.anyio
WIDE = QueryToolSpec(
    name="find_wide",
    description="Many fields.",
    collection="wide",
    tenant_field="tenant",
    projection=["f0"],
    fields={f"f{i}": "string" for i in range(60)},
)


async def test_offending_node_survives_trimming(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    hostile = {f"f{i}": "a" for i in range(50)} | {"$where": "sleep(5000) || true"}
    async with Client(build_server(settings, ToolRegistry([WIDE]))) as c:
        r = await c.call_tool("find_wide", {"filter": hostile})
        assert r.is_error
    [event] = list(read_events(settings.audit_path))
    assert event["reason"] == "operator_not_allowed" and event["path"] == "filter.$where"
    assert "$where" not in event["filter"]  # the logged filter is trimmed to 50 keys...
    assert event["trimmed"] == {"keys": 1}  # ...and says so
    assert event["offending"] == {
        "path": "filter.$where",
        "operator": "$where",
        "value": "sleep(5000) || true",
    }


@pytest.fixture(scope="module")
def scoped(engine_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    # without its index (nothing here creates it, and build_server would refuse to start)
    spec = FIND_ORDERS.model_copy(update={"required_scopes": ["orders:read"], "index": None})
    settings = make_settings(engine_uri, "t_audit_calls", tmp_path_factory.mktemp("a"), auth=jwt_auth())
    with BackgroundHttpServer(build_server(settings, ToolRegistry([spec]), transport="http")) as http:
        yield http.url, settings


def _events(settings: Settings, rid: str) -> list[dict[str, Any]]:
    return [e for e in read_events(settings.audit_path) if e.get("rpc_id") == rid]


@pytest.mark.parametrize(
    ("arguments", "scopes", "reason"),
    [
        pytest.param('{"$where": "sleep(5000)"}', ["orders:read"], "invalid_params", id="string-arguments"),
        pytest.param(["$where"], ["orders:read"], "invalid_params", id="list-arguments"),
        pytest.param({"filter": {}}, [], "unauthorized", id="missing-scope"),
        pytest.param(
            {"filter": {}, "sort": {f"k{i}": 1 for i in range(1000)}}, ["orders:read"], "invalid_input"
        ),
        pytest.param({"filter": {"$where": "1"}}, ["orders:read"], "operator_not_allowed", id="policy"),
    ],
)
async def test_every_refused_query_call_is_audited_once(
    scoped: tuple[str, Settings], arguments: Any, scopes: list[str], reason: str
) -> None:
    url, settings = scoped
    token = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, subject="alice", scopes=scopes)
    rid = int(time.monotonic_ns() % 1_000_000_000)
    async with httpx2.AsyncClient(timeout=30) as hc:
        sid = await rpc.open_session(hc, url, token)
        r = await rpc.call_tool(hc, url, token, sid, "find_orders", arguments, rid=rid)
    assert r.status_code == 200
    [message] = [m for m in rpc.messages(r) if m.get("id") == rid]
    if reason == "invalid_params":
        assert message["error"]["code"] == -32602
    else:
        assert message["result"]["isError"] is True
    events = _events(settings, str(rid))
    assert len(events) == 1, events
    assert (
        events[0]["reason"] == reason and events[0]["tenant"] == "acme" and events[0]["tool"] == "find_orders"
    )
    if reason == "invalid_input":  # the bounds name the argument: it is the offending node
        assert events[0]["offending"]["path"] == "sort" and events[0]["trimmed"] == {"keys": 950}
        assert events[0]["offending"]["value"]["k0"] == 1


async def test_control_characters_never_reach_a_log_line(
    scoped: tuple[str, Settings], caplog: pytest.LogCaptureFixture
) -> None:
    url, settings = scoped
    now = int(time.time())
    forged = "alice\n2026-01-01 00:00:00 INFO mongogate: tool find_orders served for acme/admin\r"
    claims = {
        "sub": forged,
        "tenant_id": "acme",
        "iss": "mongogate-test",
        "aud": "mongogate",
        "iat": now,
        "exp": now + 600,
        "scope": "orders:read",
    }
    token = jwt.encode(claims, DEV_SECRET, algorithm="HS256")
    before = settings.audit_path.read_text().count("\n") if settings.audit_path.exists() else 0
    with caplog.at_level(logging.DEBUG):
        async with httpx2.AsyncClient(timeout=30) as hc:
            sid = await rpc.open_session(hc, url, token)
            r = await rpc.call_tool(hc, url, token, sid, "find_orders", {"filter": {"$where": "1"}}, rid=99)
            assert rpc.result(r)["isError"] is True
    for record in caplog.records:
        message = record.getMessage()
        assert "\n" not in message and "\r" not in message, message
    assert any("alice\\n2026" in record.getMessage() for record in caplog.records)
    lines = settings.audit_path.read_text().splitlines()
    assert len(lines) == before + 1  # one event, one line
    event = json.loads(lines[-1])
    assert event["principal"] == forged.replace("\n", "\\n").replace("\r", "\\r")
    assert event["principal_id"] == forged  # the identity, JSON-escaped on its one line


async def test_a_bounds_refusal_is_audited_at_the_whole_path_it_named(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """The event's path is the value the bounds decided, not what a pattern could read back from
    the text (a key holding a space or a quote used to cut it short)."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    deep: Any = "x"
    for _ in range(200):
        deep = {"k": deep}
    async with Client(build_server(settings, ToolRegistry([WIDE]))) as c:
        r = await c.call_tool("find_wide", {"filter": {"it's a key": deep}})
        assert r.is_error
    text = r.content[0].text  # type: ignore[union-attr]
    assert text.startswith("[invalid_input] argument filter.it's a key.k")
    [event] = list(read_events(settings.audit_path))
    assert event["reason"] == "invalid_input"
    assert event["path"].startswith("filter.it's a key.k.k") and event["path"] in text
