"""The audit record cannot be dodged (issue 19, section 4): every refused call's event lists every
forbidden operator and stage present anywhere in what the model sent, whatever the logged copy
trims; two keys clipped to the same text never merge; a database failure is its own event type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.audit.log import AuditLog
from mongogate.audit.read import read_events, summarize
from mongogate.server.app import build_server
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings
from tests.policy.test_aggregate_mcp import server_for
from tests.server.test_audit_calls import WIDE

pytestmark = pytest.mark.anyio


def _names(event: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {f["name"]: (f["path"], f["count"]) for f in event["forbidden"]}


async def _refused(engine_uri: str, db_name: str, tmp_path: Path, tool: str, args: dict[str, Any]) -> Any:
    if tool == "find_wide":
        settings = make_settings(engine_uri, db_name, tmp_path)
        server = build_server(settings, ToolRegistry([WIDE]))
    else:
        settings, server = server_for(engine_uri, db_name, tmp_path)
    async with Client(server) as c:
        r = await c.call_tool(tool, args)
    assert r.is_error
    [event] = list(read_events(settings.audit_path))
    return event, r.content[0].text  # type: ignore[union-attr]


async def test_where_after_fifty_unknown_keys_is_listed(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Was: refused at the first unknown field, the copy cut at 50 keys: `$where` nowhere."""
    hostile = {f"x{i}": "a" for i in range(50)} | {"$where": "sleep(5000) || true"}
    event, _ = await _refused(engine_uri, db_name, tmp_path, "find_wide", {"filter": hostile})
    assert event["path"] == "filter.x0" and "$where" not in event["filter"]
    assert _names(event) == {"$where": ("filter.$where", 1)}


async def test_function_in_a_find_behind_another_refusal_is_listed(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    fn = {"$function": {"body": "function() { sleep(9000); return true }", "args": [], "lang": "js"}}
    hostile = {"nosuch": 1, "f1": {"$eq": "a"}, "$and": [{"f2": "b"}, {"$expr": fn}]}
    event, _ = await _refused(engine_uri, db_name, tmp_path, "find_wide", {"filter": hostile})
    assert event["path"] == "filter.nosuch"
    assert _names(event) == {
        "$expr": ("filter.$and[1].$expr", 1),
        "$function": ("filter.$and[1].$expr.$function", 1),
    }


async def test_keys_clipped_to_the_same_text_never_merge(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Was: both keys clipped to 64 characters; the second overwrote the first in the copy."""
    a, b = "k" * 64 + "A", "k" * 64 + "B"
    hostile = {a: {"$where": "1"}, b: 1}
    event, _ = await _refused(engine_uri, db_name, tmp_path, "find_wide", {"filter": hostile})
    assert len(event["filter"]) == 2
    assert {v if isinstance(v, int) else "obj" for v in event["filter"].values()} == {1, "obj"}
    [(name, (path, count))] = _names(event).items()
    assert name == "$where" and path.endswith(".$where") and count == 1


async def test_where_in_a_later_pipeline_stage_is_listed(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    pipeline = [
        {"$lookup": {"from": "users", "localField": "userId", "foreignField": "_id", "as": "u"}},
        {"$group": {"_id": "$status", "n": {"$count": {}}}},
        {"$match": {"$or": [{"n": 1}, {"$where": "sleep(9000)"}]}},
        {"$out": "stolen"},
    ]
    event, _ = await _refused(engine_uri, db_name, tmp_path, "order_stats", {"pipeline": pipeline})
    assert event["path"].startswith("pipeline[0]")
    assert _names(event) == {
        "$lookup": ("pipeline[0].$lookup", 1),
        "$where": ("pipeline[2].$match.$or[1].$where", 1),
        "$out": ("pipeline[3].$out", 1),
    }


async def test_a_forbidden_name_in_another_argument_is_listed(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    args = {"filter": {"nosuch": 1}, "sort": {"$where": 1}}
    event, _ = await _refused(engine_uri, db_name, tmp_path, "find_wide", args)
    assert event["filter"] == {"nosuch": 1} and _names(event) == {"$where": ("sort.$where", 1)}


async def test_a_bounds_refusal_lists_what_it_never_looked_at(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Refused by the argument bounds (tools/bounds.py) before the tool ran: still listed."""
    args = {"filter": {"$where": "1"}, "sort": {f"k{i}": 1 for i in range(1000)}}
    event, text = await _refused(engine_uri, db_name, tmp_path, "find_wide", args)
    assert text.startswith("[invalid_input]") and event["reason"] == "invalid_input"
    assert _names(event) == {"$where": ("filter.$where", 1)}


def test_the_list_is_bounded_and_counts_what_it_cut(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", redact_values=False, max_value_chars=64, stream=None)
    hostile = {"$and": [{f"$op{i}": 1} for i in range(40)] + [{"$op0": 2}]}
    event = log.filter_rejected(
        tool="find_orders",
        tenant="acme",
        principal="alice",
        reason="operator_not_allowed",
        path="filter.$and[0].$op0",
        filter=hostile,
        request_id="r",
    )
    assert len(event["forbidden"]) == 32 and event["forbidden_cut"] == 8
    assert event["forbidden"][0] == {"name": "$op0", "path": "filter.$and[0].$op0", "count": 2}
    assert "$and" not in _names(event)  # an operator some tool may allow is not forbidden by default


def test_the_scan_sees_past_any_depth(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", redact_values=False, max_value_chars=64, stream=None)
    deep: dict[str, Any] = {"$where": "1"}
    for _ in range(5000):  # far deeper than the copy's 12 levels or Python's recursion limit
        deep = {"$and": [deep]}
    event = log.filter_rejected(
        tool="t", tenant="a", principal=None, reason="too_deep", path="filter", filter=deep, request_id=None
    )
    assert [f["name"] for f in event["forbidden"]] == ["$where"] and event["trimmed"]["deep"] == 1


async def test_a_storage_error_is_its_own_event_type(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """Was: a database failure was written as a `filter_rejected` with reason storage_error."""
    settings, server = server_for(engine_uri, db_name, tmp_path)
    tz = {"$dateTrunc": {"date": "$createdAt", "unit": "month", "timezone": "Europe/Paris"}}
    async with Client(server) as c:
        r = await c.call_tool("order_stats", {"pipeline": [{"$group": {"_id": tz, "n": {"$count": {}}}}]})
        assert r.is_error and r.content[0].text.startswith("[storage_error]")  # type: ignore[union-attr]
        r = await c.call_tool("order_stats", {"pipeline": [{"$out": "x"}]})
        assert r.is_error
    events = list(read_events(settings.audit_path))
    assert [e["event"] for e in events] == ["storage_error", "filter_rejected"]
    assert events[0]["reason"] == "storage_error" and events[0]["forbidden"] == []
    s = summarize(events)
    assert (s["rejected"], s["storage_errors"]) == (1, 1) and s["by_reason"] == {"stage_forbidden": 1}
