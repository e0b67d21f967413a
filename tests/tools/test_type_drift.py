"""Drifted documents never break a validating client: a value of the wrong type is returned as
null, the result says so (`type_mismatches`), one log line names it, `/metrics` counts it.

The SDK's client validates every structured result against the tool's output schema (as the
MCP Inspector does), so these tests fail the way a real client fails when a result is wrong.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from mcp import Client
from pymongo import AsyncMongoClient

from mongogate.policy.render import Renderer
from mongogate.server.app import build_server
from mongogate.server.metrics import metrics_of, samples
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

TICKETS = QueryToolSpec(
    name="find_tickets",
    description="The caller's tickets",
    collection="tickets",
    tenant_field="org",
    projection=["title", "priority", "opened", "labels"],
    fields={"title": "string", "priority": "int", "opened": "date", "labels": "string"},
    sort={"priority": 1},
)
TICKET_STATS = TICKETS.model_copy(update={"name": "ticket_stats", "kind": "aggregate", "sort": None})
OPENED = datetime(2026, 3, 1, tzinfo=UTC)


async def _seed(mongo: AsyncMongoClient[dict[str, Any]], db_name: str) -> None:
    docs = [
        {"org": "acme", "title": f"t{i}", "priority": i, "opened": OPENED, "labels": ["a", "b"]}
        for i in range(1, 4)
    ]
    docs.append(
        {"org": "acme", "title": "drifted", "priority": "high", "opened": "2026-03-01", "labels": "x"}
    )
    docs.append({"org": "globex", "title": "other", "priority": "low", "opened": OPENED})
    await mongo[db_name]["tickets"].insert_many(docs)


def _server(engine_uri: str, db_name: str, tmp: Path) -> Any:
    settings = make_settings(engine_uri, db_name, tmp, server={"metrics": True})
    return build_server(settings, ToolRegistry([TICKETS, TICKET_STATS]))


def _drift_total(server: Any, tool: str) -> float:
    metrics = metrics_of(server)
    assert metrics is not None
    return sum(
        v
        for name, labels, v in samples(metrics)
        if name == "mongogate_type_mismatches_total" and labels.get("tool") == tool
    )


async def test_find_result_with_a_drifted_document_passes_a_validating_client(
    engine_uri: str,
    db_name: str,
    tmp_path: Path,
    mongo: AsyncMongoClient[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    await _seed(mongo, db_name)
    server = _server(engine_uri, db_name, tmp_path)
    caplog.set_level(logging.INFO, logger="mongogate.query")
    async with Client(server) as c:
        r = await c.call_tool("find_tickets", {"filter": {}})  # old code: RuntimeError from the client
        assert not r.is_error, r.content
        out = r.structured_content
        assert out is not None and out["returned"] == 4
        drifted = next(d for d in out["documents"] if d["title"] == "drifted")
        assert drifted == {"title": "drifted", "priority": None, "opened": None, "labels": "x"}
        assert out["type_mismatches"] == {"priority": 1, "opened": 1}
        good = [d for d in out["documents"] if d["title"] != "drifted"]
        assert [d["priority"] for d in good] == [1, 2, 3] and all(d["labels"] == ["a", "b"] for d in good)
        assert all(d["opened"] == "2026-03-01T00:00:00Z" for d in good)
        # a result with nothing drifted says nothing about it
        clean = await c.call_tool("find_tickets", {"filter": {"priority": {"$lte": 3}}})
        assert clean.structured_content is not None and "type_mismatches" not in clean.structured_content
        await c.call_tool("find_tickets", {"filter": {}})
    lines = [r for r in caplog.records if r.name == "mongogate.query"]
    assert len(lines) == 2  # one per call that nulled values, never one per document
    assert lines[0].levelno == logging.WARNING and lines[1].levelno == logging.INFO  # not a flood
    assert "priority (int): 1" in lines[0].getMessage() and "find_tickets" in lines[0].getMessage()
    ids = [getattr(r, "request_id", None) for r in lines]
    assert all(isinstance(i, str) and len(i) == 16 for i in ids) and ids[0] != ids[1]
    assert _drift_total(server, "find_tickets") == 4  # two calls, two nulled values each


async def test_aggregate_result_nulls_drifted_values_and_says_so(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: AsyncMongoClient[dict[str, Any]]
) -> None:
    await _seed(mongo, db_name)
    server = _server(engine_uri, db_name, tmp_path)
    async with Client(server) as c:
        # $max over an int field: BSON orders strings after numbers, so "high" would win
        r = await c.call_tool(
            "ticket_stats",
            {"pipeline": [{"$group": {"_id": None, "top": {"$max": "$priority"}, "n": {"$count": {}}}}]},
        )
        assert not r.is_error, r.content
        out = r.structured_content
        assert out is not None and out["documents"] == [{"_id": None, "top": None, "n": 4}]
        assert out["type_mismatches"] == {"top": 1}
        # the documents themselves, unchanged by a group: the same nulling as a find tool
        r = await c.call_tool("ticket_stats", {"pipeline": [{"$sort": {"title": 1}}]})
        out = r.structured_content
        assert out is not None and out["type_mismatches"] == {"priority": 1, "opened": 1}
        assert out["documents"][0]["title"] == "drifted" and out["documents"][0]["priority"] is None
        assert out["documents"][1]["priority"] == 1
        # group keys carry the field's type too
        r = await c.call_tool("ticket_stats", {"pipeline": [{"$group": {"_id": "$priority"}}]})
        out = r.structured_content
        assert out is not None and out["type_mismatches"] == {"_id": 1}
        assert sorted((d["_id"] for d in out["documents"]), key=str) == [1, 2, 3, None]
    assert _drift_total(server, "ticket_stats") == 4


def test_renderer_nulls_nested_and_array_values_of_the_wrong_type() -> None:
    spec = QueryToolSpec(
        name="t",
        description="d",
        collection="c",
        tenant_field="org",
        projection=["a.b", "ids", "n"],
        fields={"a.b": "int", "ids": "objectId", "n": "number"},
    )
    render = Renderer(spec)
    oid = ObjectId()
    bad: list[str] = []
    assert render({"a": {"b": "x"}, "ids": [oid, oid], "n": True}, bad) == {
        "a": {"b": None},
        "ids": [str(oid), str(oid)],
        "n": None,
    }
    assert bad == ["a.b", "n"]
    bad = []
    assert render({"a": {"b": 2.0}, "ids": [oid, "nope"], "n": 1.5}, bad) == {
        "a": {"b": 2.0},
        "ids": None,
        "n": 1.5,
    }
    assert bad == ["ids"]
