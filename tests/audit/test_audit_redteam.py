"""Red team for the audit record (issue 19, section 4): every way we found to hide a forbidden
operator from a refused call's event, through the SDK's real client and the real server. Each
attack must be refused, leave exactly one event, and that event must name the operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.audit.read import read_events
from mongogate.demo import FIND_ORDERS, ORDER_STATS
from mongogate.server.app import build_server
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings
from tests.server.test_audit_calls import WIDE

pytestmark = pytest.mark.anyio
WHERE = {"$where": "sleep(9000) || true"}


def _deep(node: Any, levels: int) -> Any:
    for _ in range(levels):
        node = {"$and": [node]}
    return node


# (tool, arguments, the name that must be listed)
ATTACKS: list[Any] = [
    pytest.param("find_wide", {"filter": {f"x{i}": 1 for i in range(60)} | WHERE}, "$where",
                 id="after-60-keys"),
    pytest.param("find_wide", {"filter": {"$or": [{"f1": "a"}] * 70 + [WHERE]}}, "$where", id="item-71"),
    pytest.param("find_wide", {"filter": _deep(WHERE, 20)}, "$where", id="below-the-copy-depth"),
    pytest.param("find_wide", {"filter": {"k" * 80 + "1": WHERE, "k" * 80 + "2": 1}}, "$where",
                 id="clipped-keys"),
    pytest.param("find_wide", {"filter": {"f1": "a"}, "sort": WHERE}, "$where", id="in-sort"),
    pytest.param("find_wide", {"filter": {"nosuch": 1, "f2": {"$in": [{"$function": {"body": "x"}}]}}},
                 "$function", id="function-in-a-value"),
    pytest.param("find_wide", {"filter": {f"$junk{i}": 1 for i in range(40)} | WHERE}, "$where",
                 id="behind-40-made-up-names"),
    pytest.param("find_wide", {"filter": WHERE, "sort": {f"k{i}": 1 for i in range(20_000)}}, "$where",
                 id="refused-by-the-bounds"),
    pytest.param(
        "find_wide", {"filter": "{\"$where\": 1}", "junk": [WHERE]}, "$where",
        id="filter-as-text-and-an-extra-argument",
    ),
    pytest.param("order_stats", {"pipeline": [{"$match": {}}] * 7 + [{"$match": WHERE}]}, "$where",
                 id="last-stage"),
    pytest.param("order_stats", {"pipeline": [{"$facet": {"a": [{"$match": WHERE}]}}]}, "$where",
                 id="inside-facet"),
    pytest.param("order_stats", {"pipeline": [{"$group": {"_id": None, "x": {"$accumulator": {}}}}]},
                 "$accumulator", id="accumulator"),
    pytest.param("order_stats",
                 {"pipeline": [{"$unionWith": {"coll": "x", "pipeline": [{"$match": WHERE}]}}]},
                 "$where", id="inside-unionWith"),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "args", "name"), ATTACKS)
async def test_the_operator_is_named_in_the_one_event(
    tool: str, args: dict[str, Any], name: str, engine_uri: str, demo_db: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, demo_db, tmp_path)  # the module's seeded orders: only read
    registry = ToolRegistry([WIDE, FIND_ORDERS, ORDER_STATS])
    async with Client(build_server(settings, registry)) as c:
        r = await c.call_tool(tool, args)
    assert r.is_error
    [event] = list(read_events(settings.audit_path))
    assert name in [f["name"] for f in event["forbidden"]], event["forbidden"]
