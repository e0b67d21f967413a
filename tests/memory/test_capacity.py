"""The embedded engine at size (issue 20.6): `check` and the start-up log report collection
sizes and, past `database.engine_size_warning`, what a load_context costs there; never a write
cost, since writes by `_id` are flat (issue 40: "an insert into it now costs about 252 ms")."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from pymongo import MongoClient
from pymongo.database import Database

from mongogate.config import load_settings
from mongogate.memory.capacity import LOAD_CURVE, load_ms_at, size_report
from mongogate.server.app import build_server
from tests.helpers import EXE, ROOT

pytestmark = pytest.mark.anyio


def test_cost_is_the_measured_curve_interpolated() -> None:
    for n, load in LOAD_CURVE:
        assert load_ms_at(n) == load
    assert LOAD_CURVE[1][1] < load_ms_at(3000) < LOAD_CURVE[2][1]
    assert load_ms_at(9000) > LOAD_CURVE[2][1]  # grows past the last point
    assert load_ms_at(1) == LOAD_CURVE[0][1]


def test_no_warning_names_a_write_cost() -> None:
    """Issue 40: the start-up log said a memory insert "costs about 252 ms" while inserts and
    updates by `_id` are flat on the engine (docs/decisions/engine-writes.md)."""
    _, warnings = size_report({"memories": 1130, "messages": 2400, "orders": 3000, "runs": 10}, 1000)
    assert len(warnings) == 3
    for line in warnings:
        assert "insert" not in line.split("(")[0] and "append now costs" not in line, line
        assert "stay flat" in line and "docs/DEPLOYMENT.md" in line
    [messages] = [w for w in warnings if "'messages'" in w]
    assert f"load_context(40) now reads it in about {load_ms_at(2400):.0f} ms" in messages
    [memories] = [w for w in warnings if "'memories'" in w]
    assert "costs" not in memories and "sorted or text read of it scans" in memories


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    """A data directory whose engine holds 8 messages and 2 sessions (threshold set to 5), once
    per module: both tests only read it (a server's start adds indexes, never documents)."""
    from mongogate.engine import client as engine_client

    data = tmp_path_factory.mktemp("capacity") / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env |= {"MONGOGATE_SERVER__DATA_DIR": str(data), "MONGOGATE_DATABASE__ENGINE_SIZE_WARNING": "5"}
    try:
        subprocess.run([*EXE, "engine", "start"], env=env, cwd=ROOT, check=True, capture_output=True)
        uri = engine_client.owner_uri(data)
        assert uri is not None
        client: MongoClient[dict[str, object]]
        with MongoClient(uri) as client:
            db: Database[dict[str, object]] = client.get_database("mongogate")
            db["messages"].insert_many([{"session_id": "s", "seq": i, "key": f"k{i}"} for i in range(8)])
            db["sessions"].insert_many([{"_id": "a"}, {"_id": "b"}])
        yield env, data
    finally:
        engine_client.stop(data)


@pytest.mark.embedded_engine
def test_check_reports_sizes_and_what_calls_cost_past_the_threshold(
    seeded: tuple[dict[str, str], Path],
) -> None:
    """Old code: `check` printed neither the sizes nor a warning."""
    env, _ = seeded
    r = subprocess.run([*EXE, "check"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    sizes = next(line for line in lines if line.startswith("embedded engine collections:"))
    assert "messages 8" in sizes and "sessions 2" in sizes
    warning = next(line for line in lines if line.startswith("WARNING collection 'messages'"))
    assert f"load_context(40) now reads it in about {load_ms_at(8):.0f} ms" in warning
    assert "appends stay flat" in warning
    assert "docs/DEPLOYMENT.md" in warning and "engine_size_warning = 5" in warning
    assert not any("'sessions'" in line for line in lines if line.startswith("WARNING"))  # 2 <= 5


@pytest.mark.embedded_engine
async def test_start_up_log_reports_sizes_and_warns(
    seeded: tuple[dict[str, str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    _, data = seeded
    settings = load_settings(
        None,
        server={"data_dir": str(data)},
        auth={"mode": "none", "tenant": "acme"},
        database={"engine_size_warning": 5},
    )
    caplog.set_level(logging.INFO, logger="mongogate.server.app")
    async with Client(build_server(settings)) as c:
        await c.list_tools()
    messages = [r.getMessage() for r in caplog.records if r.name == "mongogate.server.app"]
    assert any(m.startswith("embedded engine collections:") and "messages 8" in m for m in messages)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "'messages'" in r.getMessage()]
    assert len(warned) == 1 and "load_context(40)" in warned[0].getMessage()
