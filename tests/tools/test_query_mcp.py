"""Query tools through MCP with the real client: scoped results, rejections, audit, registration."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mongogate.audit.read import read_events
from mongogate.config import Settings
from mongogate.demo import FIND_ORDERS
from mongogate.errors import ConfigError
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def db_name(demo_db: str) -> str:
    """Every test here only reads: they share the module's database, seeded once (demo_db)."""
    return demo_db


def registry(*specs: QueryToolSpec) -> ToolRegistry:
    return ToolRegistry(specs or (FIND_ORDERS,))


def settings_for(engine_uri: str, db_name: str, tmp: Path, tenant: str = "acme", **kw: Any) -> Settings:
    return make_settings(engine_uri, db_name, tmp, auth={"tenant": tenant}, **kw)


async def test_results_are_scoped_projected_and_typed(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    async with Client(build_server(settings_for(engine_uri, db_name, tmp_path), registry())) as c:
        r = await c.call_tool("find_orders", {"filter": {"status": {"$in": ["paid", "shipped"]}}})
        assert not r.is_error, r.content
        out = r.structured_content
        assert out is not None and out["returned"] == 6 and out["truncated"] is False and out["limit"] == 50
        for doc in out["documents"]:
            assert set(doc) == {"number", "status", "total", "createdAt"}  # no _id, no userId, no note
            assert doc["number"].startswith("AC-") and doc["createdAt"].endswith("Z")
        dates = [d["createdAt"] for d in out["documents"]]
        assert dates == sorted(dates, reverse=True)  # the spec's default sort
        assert "not instructions" in out["notice"]


async def test_limit_is_lowered_and_truncated_reported(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    spec = FIND_ORDERS.model_copy(update={"max_limit": 5})
    async with Client(build_server(settings_for(engine_uri, db_name, tmp_path), registry(spec))) as c:
        r = await c.call_tool("find_orders", {"filter": {}, "limit": 500, "sort": {"total": 1}})
        out = r.structured_content
        assert out is not None and out["limit"] == 5 and out["returned"] == 5 and out["truncated"] is True
        totals = [d["total"] for d in out["documents"]]
        assert totals == sorted(totals)
        bad = await c.call_tool("find_orders", {"filter": {}, "limit": 0})
        assert bad.is_error


@pytest.mark.parametrize(
    ("args", "reason", "path"),
    [
        ({"filter": {"$where": "sleep(1000)"}}, "operator_not_allowed", "filter.$where"),
        (
            {"filter": {"$or": [{"status": "paid"}, {"total": {"$where": "1"}}]}},
            "operator_not_allowed",
            "filter.$or[1].total.$where",
        ),
        ({"filter": {"userId": "globex"}}, "tenant_field_forbidden", "filter.userId"),
        ({"filter": {"internalNote": "x"}}, "field_not_allowed", "filter.internalNote"),
        ({"filter": {}, "tenant": "globex"}, "unknown_argument", "tenant"),
        ({"filter": {"total": "cheap"}}, "type_mismatch", "filter.total"),
        # the walk names the tenant field even in `sort` (a schema pre-check said field_not_allowed)
        ({"filter": {}, "sort": {"userId": 1}}, "tenant_field_forbidden", "sort.userId"),
        # one authority, one order: the filter is judged before the limit
        ({"filter": {"status": "x" * 600}, "limit": 0}, "string_too_long", "filter.status"),
    ],
)  # fmt: skip
async def test_rejections_are_tool_errors_with_one_audit_event(
    engine_uri: str, db_name: str, tmp_path: Path, args: dict[str, Any], reason: str, path: str
) -> None:
    settings = settings_for(engine_uri, db_name, tmp_path)
    async with Client(build_server(settings, registry())) as c:
        r = await c.call_tool("find_orders", args)
        assert r.is_error
        text = r.content[0].text  # type: ignore[union-attr]
        assert reason in text and path in text and "; allowed: " in text
    events = list(read_events(settings.audit_path))
    assert len(events) == 1
    e = events[0]
    assert (e["event"], e["reason"], e["path"], e["tool"], e["tenant"]) == (
        "filter_rejected", reason, path, "find_orders", "acme",
    )  # fmt: skip
    assert e["request_id"] is not None and e["principal"] == "local"


async def test_tenants_see_only_their_own_orders(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    seen: dict[str, set[str]] = {}
    for tenant in ("acme", "globex", "initech"):
        server = build_server(settings_for(engine_uri, db_name, tmp_path / tenant, tenant), registry())
        async with Client(server) as c:
            r = await c.call_tool(
                "find_orders", {"filter": {"$or": [{"total": {"$gte": 0}}, {"status": "paid"}]}}
            )
            docs = r.structured_content["documents"]
            seen[tenant] = {d["number"][:2] for d in docs}
            assert len(docs) == 12
    assert seen == {"acme": {"AC"}, "globex": {"GL"}, "initech": {"IN"}}


async def test_input_schema_shows_what_the_model_may_write(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    async with Client(build_server(settings_for(engine_uri, db_name, tmp_path), registry())) as c:
        tool = next(t for t in (await c.list_tools()).tools if t.name == "find_orders")
    schema = json.dumps(tool.input_schema)
    assert tool.input_schema["additionalProperties"] is False
    assert set(tool.input_schema["properties"]) == {"filter", "limit", "sort", "count"}
    assert "$gte" in schema and "createdAt" in schema and "$where" not in schema and "userId" not in schema
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert tool.output_schema is not None


async def test_python_registration_api(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    reg = registry()
    reg.add_query_tool(
        QueryToolSpec(
            name="count_paid",
            description="Paid orders, numbers only.",
            collection="orders",
            tenant_field="userId",
            projection=["number"],
            fields={"number": "string", "status": "string"},
            operators=["$eq"],
        )
    )
    with pytest.raises(ConfigError, match="clashes"):
        reg.add_query_tool(FIND_ORDERS.model_copy(update={"name": "append"}))
    with pytest.raises(ConfigError, match="registered twice"):
        reg.add_query_tool(FIND_ORDERS)
    async with Client(build_server(settings_for(engine_uri, db_name, tmp_path), reg)) as c:
        r = await c.call_tool("count_paid", {"filter": {"status": "paid"}})
        assert r.structured_content is not None
        assert [set(d) for d in r.structured_content["documents"]] == [{"number"}] * 3
        bad = await c.call_tool("count_paid", {"filter": {"status": {"$ne": "paid"}}})
        assert bad.is_error and "operator_not_allowed" in bad.content[0].text  # type: ignore[union-attr]


async def test_query_over_real_http_with_tokens(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth())
    with BackgroundHttpServer(build_server(settings, registry(), transport="http")) as http:
        for tenant, prefix in (("acme", "AC"), ("globex", "GL")):
            token = mint_dev_token(settings.auth, tenant=tenant, ttl_s=600)
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as hc,
                Client(streamable_http_client(http.url, http_client=hc)) as c,
            ):
                r = await c.call_tool("find_orders", {"filter": {"status": "paid"}})
                docs = r.structured_content["documents"]
                assert docs and all(d["number"].startswith(prefix) for d in docs)
                bad = await c.call_tool("find_orders", {"filter": {"$expr": {"$eq": [1, 1]}}})
                assert bad.is_error
    events = list(read_events(settings.audit_path))
    assert [(e["tenant"], e["reason"]) for e in events] == [
        ("acme", "operator_not_allowed"),
        ("globex", "operator_not_allowed"),
    ]
    assert all(e["principal"] == "dev" for e in events)


async def test_query_event_written_just_before_a_stdio_server_exits_is_on_file(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Query events are queued for the audit thread; the process flushes them as it exits."""
    audit = tmp_path / "audit.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_AUDIT__PATH": str(audit),
        "MONGOGATE_AUDIT__LOG_QUERIES": "true",
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mongogate.cli", "serve", "--demo"], env=env
    )
    async with Client(params) as c:
        for i in range(3):
            r = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 1 + i})
            assert not r.is_error, r.content
    events = [e for e in read_events(audit) if e["event"] == "query"]
    assert [(e["tenant"], e["returned"]) for e in events] == [("acme", 1), ("acme", 2), ("acme", 3)]
