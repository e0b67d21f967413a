"""Red-team attacks over the MCP SDK's real client (in-process): each refused call is a tool
error with one audit event, and a database failure never shows the driver's text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.audit.read import read_events
from tests.policy.test_aggregate_mcp import server_for

pytestmark = pytest.mark.anyio
TZ = {"$dateTrunc": {"date": "$createdAt", "unit": "month", "timezone": "Europe/Paris"}}
# (tool, arguments, text the error starts with)
ATTACKS: list[tuple[str, dict[str, Any], str]] = [
    ("order_stats", {"pipeline": [{"$skip": 2**31}]}, "[invalid_operand] pipeline[0].$skip: "),
    ("order_stats", {"pipeline": [{"$count": "_id"}]}, "[output_name_invalid] pipeline[0].$count: "),
    ("order_stats", {"pipeline": [{"$group": {"_id": None, "s": {"$sum": 2**40}}}]}, "[out_of_range]"),
    ("order_stats", {"pipeline": [], "count": True}, "[unknown_argument]"),
    ("order_stats", {"pipeline": [{"$match": {}}], "limit": True}, "[limit_invalid]"),
    ("order_stats", {"pipeline": '[{"$match": {}}]'}, "[pipeline_invalid]"),
    ("find_orders", {"filter": {}, "count": 1}, "[invalid_operand]"),
    ("find_orders", {"filter": {}, "count": "true"}, "[invalid_operand]"),
    ("find_orders", {"filter": {}, "count": None}, "[invalid_operand]"),
    # caught by the argument bounds before any policy: an integer MongoDB cannot hold
    ("order_stats", {"pipeline": [{"$group": {"_id": 2**64}}]}, "[invalid_input] argument pipeline[0]"),
]


async def test_refusals_are_tool_errors_with_exactly_one_audit_event(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings, server = server_for(engine_uri, db_name, tmp_path)
    seen = 0
    async with Client(server) as c:
        for tool, args, start in ATTACKS:
            r = await c.call_tool(tool, args)
            text = r.content[0].text  # type: ignore[union-attr]
            assert r.is_error, (tool, args)
            events = [e for e in read_events(settings.audit_path) if e["event"] == "filter_rejected"]
            assert text.startswith(start), (args, text)
            seen += 1
            assert len(events) == seen, (args, text)


async def test_a_database_refusal_shows_no_driver_text(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """The embedded engine refuses any $dateTrunc timezone (the walk allows fixed ones): the model
    sees mongogate's sentence, never the engine's message or an exception class, and is not told
    to retry a pipeline that fails the same way every time."""
    _, server = server_for(engine_uri, db_name, tmp_path)
    async with Client(server) as c:
        r = await c.call_tool("order_stats", {"pipeline": [{"$group": {"_id": TZ, "n": {"$count": {}}}}]})
    text = r.content[0].text  # type: ignore[union-attr]
    # was "[storage_error] (retryable) ... retry in about 5 s": the same pipeline fails every time
    assert r.is_error and text.startswith("[storage_error] aggregation tool"), text
    assert "retrying it will not help" in text, text
    for leak in ("timezone is not supported", "OperationFailure", "errmsg", "Traceback", "mongoeco"):
        assert leak not in text, text
