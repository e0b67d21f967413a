"""/metrics over real HTTP after a scripted session: exact counts, and no tenant label by default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from mongogate.config import Settings
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.server.metrics import metrics_of, samples
from mongogate.tools.registry import ToolRegistry
from tests.conftest import jwt_auth, make_settings
from tests.helpers import INITIALIZE
from tests.policy.specs import ORDERS as FIND_ORDERS  # the demo spec without its index

from . import rpc

pytestmark = pytest.mark.anyio
SPEC = FIND_ORDERS.model_copy(update={"required_scopes": ["orders:read"]})


@pytest.fixture
def served(engine_uri: str, db_name: str, tmp_path: Path) -> Iterator[tuple[str, Settings]]:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), server={"metrics": True})
    with BackgroundHttpServer(build_server(settings, ToolRegistry([SPEC]), transport="http")) as http:
        yield http.url, settings


def _scrape(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _get(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return values.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_count_exactly_what_a_scripted_session_did(served: tuple[str, Settings]) -> None:
    url, settings = served
    good = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, scopes=["orders:read"])
    unscoped = mint_dev_token(settings.auth, tenant="acme", ttl_s=600, scopes=[])
    async with httpx2.AsyncClient(timeout=30) as hc:
        sid = await rpc.open_session(hc, url, good)
        for _ in range(3):
            assert (
                rpc.result(await rpc.call_tool(hc, url, good, sid, "find_orders", {"filter": {}}))["isError"]
                is False
            )
        for _ in range(2):
            r = await rpc.call_tool(hc, url, good, sid, "find_orders", {"filter": {"$where": "1"}})
            assert rpc.result(r)["isError"] is True
        other = await rpc.open_session(hc, url, unscoped)
        assert rpc.result(await rpc.call_tool(hc, url, unscoped, other, "find_orders", {"filter": {}}))[
            "isError"
        ]
        assert (await hc.post(url, json=INITIALIZE[0], headers=rpc.headers(None))).status_code == 401
        for _ in range(2):
            r = await hc.post(url, json=INITIALIZE[0], headers=rpc.headers("not-a-token"))
            assert r.status_code == 401
        r = await hc.get(url.removesuffix("/mcp") + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    # no tenant label by default (the word itself is in the index budget metrics' help)
    assert 'tenant="' not in r.text and "acme" not in r.text
    m = _scrape(r.text)
    calls = "mongogate_tool_calls_total"
    assert _get(m, calls, tool="find_orders", outcome="ok") == 3
    assert _get(m, calls, tool="find_orders", outcome="operator_not_allowed") == 2
    assert _get(m, calls, tool="find_orders", outcome="unauthorized") == 1
    assert _get(m, "mongogate_tool_call_seconds_count", tool="find_orders") == 6
    assert _get(m, "mongogate_filter_rejections_total", reason="operator_not_allowed") == 2
    assert _get(m, "mongogate_filter_rejections_total", reason="unauthorized") == 1
    assert _get(m, "mongogate_auth_failures_total", reason="missing_token") == 1
    assert _get(m, "mongogate_auth_failures_total", reason="invalid_token") == 2
    assert _get(m, "mongogate_audit_fallbacks_total") == 0
    assert ("mongogate_audit_queue_depth", frozenset()) in m
    assert ("mongogate_lease_busy_total", frozenset()) not in m  # labelled by tool; none happened


async def test_tenant_labels_only_when_asked(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    server_cfg: dict[str, Any] = {"metrics": True, "metrics_tenant_labels": True}
    settings = make_settings(engine_uri, db_name, tmp_path, server=server_cfg)
    server = build_server(settings, ToolRegistry([FIND_ORDERS]))
    async with Client(server) as c:
        await c.call_tool("find_orders", {"filter": {}})
        with pytest.raises(MCPError):  # -32602, counted all the same
            await c.call_tool("no_such_tool", {})
    metrics = metrics_of(server)
    assert metrics is not None
    calls = {
        tuple(sorted(labels.items())): v
        for n, labels, v in samples(metrics)
        if n == "mongogate_tool_calls_total"
    }
    assert calls[(("outcome", "ok"), ("tenant", "acme"), ("tool", "find_orders"))] == 1
    assert any(("tool", "unknown") in k for k in calls)  # an unregistered name never becomes a label


async def test_metrics_are_off_by_default(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    server = build_server(settings, ToolRegistry([FIND_ORDERS]), transport="http", insecure_no_auth=True)
    assert metrics_of(server) is None
    with BackgroundHttpServer(server) as http:
        async with httpx2.AsyncClient(timeout=30) as hc:
            r = await hc.get(http.url.removesuffix("/mcp") + "/metrics")
    assert r.status_code == 404


async def test_the_recall_index_size_is_reported(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(
        engine_uri, db_name, tmp_path, server={"metrics": True}, memory={"long_term": {"index_budget_mb": 8}}
    )
    server = build_server(settings)
    async with Client(server) as c:
        before = metrics_of(server)
        assert before is not None
        assert _sample(before, "mongogate_recall_index_bytes") == 0
        await c.call_tool("remember", {"text": "The spare key is under the blue pot."})
        await c.call_tool("recall", {"query": "where is the spare key?"})
    metrics = metrics_of(server)
    assert metrics is not None
    assert _sample(metrics, "mongogate_recall_index_bytes") > 0
    assert _sample(metrics, "mongogate_recall_index_budget_bytes") == 8 * 1024 * 1024
    assert _sample(metrics, "mongogate_recall_index_scopes") == 1
    assert _sample(metrics, "mongogate_recall_index_refreshes_total", kind="rebuild") == 1


async def test_message_indexes_are_reported_on_the_one_index_budget(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """search_messages' indexes share recall's byte budget, and /metrics says how much each kind
    holds (issue 36: before, message vectors were a cache of their own, not reported)."""
    settings = make_settings(
        engine_uri, db_name, tmp_path, server={"metrics": True}, memory={"long_term": {"index_budget_mb": 8}}
    )
    server = build_server(settings)
    async with Client(server) as c:
        sid = (await c.call_tool("create_session", {})).structured_content["session_id"]
        await c.call_tool(
            "append", {"session_id": sid, "turn_id": "t1", "role": "user", "content": "PX-4410"}
        )
        await c.call_tool("remember", {"text": "The spare key is under the blue pot."})
        await c.call_tool("recall", {"query": "where is the spare key?"})
        found = await c.call_tool("search_messages", {"query": "PX-4410"})
        assert found.structured_content["messages"]
        metrics = metrics_of(server)
        assert metrics is not None
        messages = _sample(metrics, "mongogate_index_bytes", kind="messages")
        memories = _sample(metrics, "mongogate_index_bytes", kind="memories")
    assert messages > 0 and memories > 0
    assert _sample(metrics, "mongogate_index_budget_bytes") == 8 * 1024 * 1024
    # one tenant's share of it (memory.long_term.index_tenant_share, a quarter by default)
    assert _sample(metrics, "mongogate_index_tenant_share_bytes") == 2 * 1024 * 1024
    assert _sample(metrics, "mongogate_index_largest_tenant_bytes") == messages + memories
    assert _sample(metrics, "mongogate_index_unkept_total", kind="messages") == 0
    assert _sample(metrics, "mongogate_index_scopes", kind="messages") == 1
    assert _sample(metrics, "mongogate_message_derivations_total", what="derived") >= 1


def _sample(metrics: Any, name: str, **labels: str) -> float:
    return next(v for n, got, v in samples(metrics) if n == name and got == labels)
