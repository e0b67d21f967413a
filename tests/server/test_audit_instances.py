"""One audit trail for every server: two server processes write `audit_events`, `mongogate audit`
shows each rejection once with its instance; a stopped sink database costs no request."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.audit.read import read_events
from mongogate.db import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.server.metrics import metrics_of, samples
from mongogate.tools.registry import ToolRegistry
from tests.conftest import Cli, make_settings
from tests.helpers import failure, http_servers, ok
from tests.policy.specs import ORDERS as FIND_ORDERS  # the demo spec without its index

pytestmark = pytest.mark.anyio


def _audit(cli: Cli, env: dict[str, str], *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`mongogate audit --json` (in-process: what it reads is under test, not a process)."""
    r = cli(["audit", "--json", *args], env)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    return lines[:-1], lines[-1]["summary"]


async def test_two_servers_write_one_trail_each_rejection_once(
    tmp_path: Path, engine_uri: str, db_name: str, cli: Cli
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_AUDIT__SINK": "mongodb",
    }

    def server(name: str) -> dict[str, str]:
        return env | {
            "MONGOGATE_SERVER__INSTANCE_ID": name,
            "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / name),
        }

    with http_servers((server("srv-a"), ["--demo"]), (server("srv-b"), ["--demo"])) as [url_a, url_b]:
        async with Client(url_a) as a, Client(url_b) as b:
            for i in range(3):
                assert (await failure(a, "find_orders", filter={"$where": str(i)})).startswith(
                    "[operator_not_allowed]"
                )
            for i in range(2):
                assert (await failure(b, "find_orders", filter={"$where": str(i)})).startswith(
                    "[operator_not_allowed]"
                )
            await ok(a, "find_orders", filter={})  # not an event (audit.log_queries is off)
    events, summary = _audit(cli, env | {"MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "reader")})
    assert Counter(e["instance"] for e in events) == {"srv-a": 3, "srv-b": 2}
    assert len({e["request_id"] for e in events}) == 5  # each rejection exactly once
    assert summary["rejected"] == 5 and summary["by_reason"] == {"operator_not_allowed": 5}
    assert summary["by_tenant"] == {"acme": 5} and summary["source"] == f"{db_name}.audit_events"
    only_b, _ = _audit(cli, env, "--instance", "srv-b", "--tool", "find_orders")
    assert len(only_b) == 2 and {e["instance"] for e in only_b} == {"srv-b"}
    assert not (tmp_path / "srv-a" / "audit.jsonl").exists()  # nothing fell back


async def test_a_stopped_sink_database_costs_no_request_and_events_fall_back_counted(
    tmp_path: Path, engine_uri: str, db_name: str
) -> None:
    """The read-write database (memory and the audit sink) is a private engine, stopped mid-run;
    queries go to the shared engine through query_uri and keep working."""
    private = EmbeddedEngine(tmp_path / "private")
    uri = private.start()
    try:
        settings = make_settings(
            engine_uri,
            db_name,
            tmp_path,
            database={"uri": uri, "query_uri": engine_uri, "timeout_ms": 300},
            audit={"sink": "mongodb", "log_queries": True},
            server={"metrics": True, "instance_id": "srv-a"},
        )
        server = build_server(settings, ToolRegistry([FIND_ORDERS]))
        async with Client(server) as c:
            await failure(c, "find_orders", filter={"$where": "before"})  # reaches the collection
            private.stop()
            for i in range(2):
                assert (await failure(c, "find_orders", filter={"$where": str(i)})).startswith(
                    "[operator_not_allowed]"
                )
            assert (await ok(c, "find_orders", filter={}))["documents"] == []
    finally:
        private.stop()
    on_file = list(read_events(settings.audit_path))
    assert [e["event"] for e in on_file] == ["filter_rejected", "filter_rejected", "query"]
    assert {e["instance"] for e in on_file} == {"srv-a"}
    metrics = metrics_of(server)
    assert metrics is not None
    assert [v for n, _, v in samples(metrics) if n == "mongogate_audit_fallbacks_total"] == [3.0]
