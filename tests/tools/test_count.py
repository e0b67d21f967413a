"""`count: true` on find tools (with its cap), and the declared index: hint, check, serve refusal."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from pymongo import AsyncMongoClient
from pymongo.monitoring import CommandListener, CommandStartedEvent

from mongogate.audit.read import read_events
from mongogate.config import PolicySettings
from mongogate.demo import FIND_ORDERS, ORDERS_INDEX, demo_orders
from mongogate.errors import ConfigError
from mongogate.policy.execute import run_query
from mongogate.policy.query_indexes import create_index_command, index_status, missing_report
from mongogate.server.app import build_server
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry
from tests.conftest import Cli, make_settings

pytestmark = pytest.mark.anyio
Doc = dict[str, Any]
PAID = sum(1 for d in demo_orders() if d["userId"] == "acme" and d["status"] == "paid")


def server(engine_uri: str, demo_db: str, tmp: Path, **policy: Any) -> tuple[Any, Any]:
    """A server on the module's seeded demo orders (these tests only read them)."""
    settings = make_settings(engine_uri, demo_db, tmp, **({"policy": policy} if policy else {}))
    return settings, build_server(settings, ToolRegistry([FIND_ORDERS]))


async def test_count_true_returns_matched(engine_uri: str, demo_db: str, tmp_path: Path) -> None:
    _, srv = server(engine_uri, demo_db, tmp_path)
    async with Client(srv) as c:
        r = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 1, "count": True})
        assert not r.is_error, r.content
        out = r.structured_content
        assert out is not None and out["returned"] == 1 and out["truncated"] is True
        assert (out["matched"], out["matched_capped"]) == (PAID, False)
        plain = await c.call_tool("find_orders", {"filter": {"status": "paid"}})
        assert plain.structured_content is not None and "matched" not in plain.structured_content
        none = await c.call_tool("find_orders", {"filter": {"status": "nope"}, "count": True})
        assert none.structured_content is not None and none.structured_content["matched"] == 0


async def test_count_is_capped_at_policy_max_count(engine_uri: str, demo_db: str, tmp_path: Path) -> None:
    _, srv = server(engine_uri, demo_db, tmp_path, max_count=5)
    async with Client(srv) as c:
        r = await c.call_tool("find_orders", {"filter": {}, "limit": 2, "count": True})
        out = r.structured_content
        assert out is not None and (out["matched"], out["matched_capped"]) == (5, True)  # 12 orders
        r = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "count": True})
        out = r.structured_content
        assert out is not None and (out["matched"], out["matched_capped"]) == (PAID, False)


async def test_count_must_be_a_boolean_and_is_audited(engine_uri: str, demo_db: str, tmp_path: Path) -> None:
    settings, srv = server(engine_uri, demo_db, tmp_path)
    async with Client(srv) as c:
        r = await c.call_tool("find_orders", {"filter": {}, "count": "yes"})
        assert r.is_error and "[invalid_operand] count: " in r.content[0].text  # type: ignore[union-attr]
    assert [e["reason"] for e in read_events(settings.audit_path)] == ["invalid_operand"]


class Commands(CommandListener):
    def __init__(self) -> None:
        self.seen: list[Doc] = []

    def started(self, event: CommandStartedEvent) -> None:
        if event.command_name in ("find", "aggregate", "count"):
            self.seen.append(dict(event.command))

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


@pytest.fixture
async def orders(engine_uri: str, db_name: str) -> AsyncIterator[tuple[Any, Commands]]:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[commands])
    try:
        coll = client[db_name]["orders"]
        await coll.insert_many(demo_orders())
        await coll.create_index(list(ORDERS_INDEX), name="tenant_created")
        commands.seen.clear()
        yield coll, commands
    finally:
        await client.close()


async def test_find_and_count_ride_the_declared_index(orders: tuple[Any, Commands]) -> None:
    coll, commands = orders
    limits = PolicySettings(max_count=3)
    result = await run_query(
        coll, FIND_ORDERS, {"filter": {"total": {"$gt": 0}}, "count": True}, "acme", limits
    )
    assert (result.matched, result.matched_capped) == (3, True)
    find, count = commands.seen
    assert dict(find["hint"]) == {"userId": 1, "createdAt": -1}
    assert dict(count["hint"]) == {"userId": 1, "createdAt": -1}
    stages = count["pipeline"]  # count_documents: $match (the scoped filter), $limit cap + 1, $group
    assert stages[0]["$match"]["$and"][1] == {"userId": "acme"}
    assert {"$limit": 4} in stages and count["maxTimeMS"] == FIND_ORDERS.max_time_ms


async def test_index_status_and_the_command_to_create_it(orders: tuple[Any, Commands]) -> None:
    coll, _ = orders
    other = FIND_ORDERS.model_copy(update={"name": "by_total", "index": [("userId", 1), ("total", 1)]})
    bare = FIND_ORDERS.model_copy(update={"name": "bare", "index": None})
    elsewhere = FIND_ORDERS.model_copy(update={"name": "gone", "collection": "nothing_here"})
    statuses = await index_status(coll.database, [FIND_ORDERS, other, bare, elsewhere])
    assert [s.present for s in statuses] == [True, False, None, False]
    assert create_index_command(other) == 'db.getCollection("orders").createIndex({"userId": 1, "total": 1})'
    report = missing_report(statuses)
    assert report is not None and "by_total" in report and "gone" in report and "bare" not in report


def test_index_must_start_with_the_tenant_field() -> None:
    base = FIND_ORDERS.model_dump()
    with pytest.raises(ConfigError, match="must start with the tenant field"):
        QueryToolSpec(**{**base, "index": [["createdAt", -1], ["userId", 1]]})
    with pytest.raises(ConfigError, match="apply to kind"):
        QueryToolSpec(**{**base, "max_groups": 5})
    spec = QueryToolSpec(**{**base, "index": [["userId", 1]]})
    assert spec.index == [("userId", 1)]


def test_check_verifies_indexes_and_serve_refuses_a_missing_one(
    cli: Cli, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "tools.toml"
    config.write_text(
        "[[query_tools]]\n"
        'name = "by_total"\ndescription = "orders by total"\ncollection = "orders"\ntenant_field = "userId"\n'
        'projection = ["total"]\nfields = { total = "number" }\nindex = [["userId", 1], ["total", -1]]\n'
        "[[query_tools]]\n"
        'name = "stats"\nkind = "aggregate"\ndescription = "totals"\ncollection = "orders"\n'
        'tenant_field = "userId"\nprojection = ["total", "status"]\n'
        'fields = { total = "number", status = "string" }\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
    }
    r = cli(["check", "--config", str(config)], env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "query tool by_total: PROBLEM index" in r.stdout
    assert 'db.getCollection("orders").createIndex({"userId": 1, "total": -1})' in r.stdout
    assert "query tool stats: WARNING no `index` declared" in r.stdout
    r = cli(["serve", "--config", str(config)], env)  # stdio: the fixture runs it in a process
    assert r.returncode == 2, r.stderr
    assert "query tool 'by_total'" in r.stderr and "--allow-missing-indexes" in r.stderr
    assert 'db.getCollection("orders").createIndex({"userId": 1, "total": -1})' in r.stderr
    assert r.stdout == ""
