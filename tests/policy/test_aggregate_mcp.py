"""The aggregation tool through the MCP SDK's real client: results, schemas, and one audit event
per refused pipeline (the whole hostile table, in one session)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.audit.read import read_events
from mongogate.config import Settings
from mongogate.demo import FIND_ORDERS, ORDER_STATS, demo_orders
from mongogate.server.app import build_server
from mongogate.server.preflight import StartupChecks
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings
from tests.policy.test_aggregate_hostile import HOSTILE, NO_COUNT

pytestmark = pytest.mark.anyio
NO_COUNT_TOOL = NO_COUNT.model_copy(update={"name": "stats_no_count"})


@pytest.fixture(scope="module")
def db_name(demo_db: str) -> str:
    """Every test here only reads: they share the module's database, seeded once (demo_db)."""
    return demo_db


def server_for(engine_uri: str, db_name: str, tmp: Path) -> tuple[Settings, Any]:
    """The demo tools. Here on the demo database; other modules pass a fresh database without the
    demo index (their calls are refused before any query, or test a database error), so a missing
    index is allowed (with its WARNING) rather than refused at start."""
    settings = make_settings(engine_uri, db_name, tmp)
    registry = ToolRegistry([FIND_ORDERS, ORDER_STATS, NO_COUNT_TOOL])
    return settings, build_server(settings, registry, checks=StartupChecks(allow_missing_indexes=True))


async def test_orders_and_total_per_status_this_year(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    _, server = server_for(engine_uri, db_name, tmp_path)
    pipeline = [
        {"$match": {"createdAt": {"$gte": "2026-01-01T00:00:00Z"}}},
        {"$group": {"_id": "$status", "orders": {"$count": {}}, "total": {"$sum": "$total"}}},
        {"$sort": {"total": -1}},
    ]
    async with Client(server) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        r = await c.call_tool("order_stats", {"pipeline": pipeline})
    assert not r.is_error, r.content
    out = r.structured_content
    assert out is not None and set(out) == {"documents", "returned", "limit", "truncated", "notice"}
    expected: dict[str, list[float]] = {}
    for d in demo_orders():
        if d["userId"] == "acme":
            expected.setdefault(d["status"], []).append(d["total"])
    got = {d["_id"]: (d["orders"], d["total"]) for d in out["documents"]}
    assert got == {s: (len(v), sum(v)) for s, v in expected.items()}
    totals = [d["total"] for d in out["documents"]]
    assert totals == sorted(totals, reverse=True)
    schema = tools["order_stats"].input_schema
    assert set(schema["properties"]) == {"pipeline", "limit"} and schema["additionalProperties"] is False
    assert "$dateTrunc" in json.dumps(schema) and "userId" not in json.dumps(schema)
    assert "internalNote" not in json.dumps(schema)
    assert tools["order_stats"].annotations is not None and tools["order_stats"].annotations.read_only_hint


async def test_each_hostile_pipeline_is_a_tool_error_with_one_audit_event(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings, server = server_for(engine_uri, db_name, tmp_path)
    seen = 0
    async with Client(server) as c:
        for case_id, pipeline, reason, path in HOSTILE:
            tool = NO_COUNT_TOOL.name if case_id == "disabled-stage" else "order_stats"
            r = await c.call_tool(tool, {"pipeline": pipeline})
            assert r.is_error, case_id
            text = r.content[0].text  # type: ignore[union-attr]
            assert text.startswith(f"[{reason}] {path}: "), (case_id, text)
            events = list(read_events(settings.audit_path))
            assert len(events) == seen + 1, case_id  # exactly one event per refused call
            e = events[-1]
            assert (e["event"], e["reason"], e["path"], e["tool"], e["tenant"]) == (
                "filter_rejected", reason, path, tool, "acme",
            ), case_id  # fmt: skip
            seen += 1


async def test_unknown_argument_and_bad_limit(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings, server = server_for(engine_uri, db_name, tmp_path)
    async with Client(server) as c:
        r = await c.call_tool("order_stats", {"pipeline": [], "tenant": "globex"})
        assert r.is_error and "[unknown_argument] tenant: " in r.content[0].text  # type: ignore[union-attr]
        r = await c.call_tool("order_stats", {"pipeline": [], "limit": 0})
        assert r.is_error and "limit_invalid" in r.content[0].text  # type: ignore[union-attr]
        r = await c.call_tool("order_stats", {"pipeline": [{"$sort": {"total": -1}}], "limit": 500})
        out = r.structured_content
        assert out is not None and out["limit"] == ORDER_STATS.max_limit and out["returned"] == 12
        assert all(set(d) <= {"number", "status", "total", "createdAt", "tags"} for d in out["documents"])
    reasons = [e["reason"] for e in read_events(settings.audit_path)]
    assert reasons == ["unknown_argument", "limit_invalid"]
