"""The embedded engine at size (issue 20.6): `check` and the start-up log report collection
sizes and, past `database.engine_size_warning`, what an append and a load_context cost there."""

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
from mongogate.memory.capacity import COST_CURVE, cost_at
from mongogate.server.app import build_server
from tests.helpers import EXE, ROOT

pytestmark = pytest.mark.anyio


def test_cost_is_the_measured_curve_interpolated() -> None:
    for n, append, load, insert in COST_CURVE:
        assert (cost_at(n).append_ms, cost_at(n).load_ms, cost_at(n).insert_ms) == (append, load, insert)
    mid = cost_at(3000)
    assert COST_CURVE[1][1] < mid.append_ms < COST_CURVE[2][1]
    assert cost_at(9000).append_ms > COST_CURVE[2][1]  # grows past the last point
    assert cost_at(1).append_ms == COST_CURVE[0][1]


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
    expected = cost_at(8)
    assert f"append now costs about {expected.append_ms:.0f} ms" in warning
    assert f"load_context(40) about {expected.load_ms:.0f} ms" in warning
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
