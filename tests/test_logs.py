"""Structured logs: one request id in the error text, the audit event and the log line; the CLI
honours server.log_level / log_format, and the worker logs one INFO line per tick by default."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from pymongo import MongoClient

from mongogate.audit.store import COLLECTION, read_events_db
from mongogate.cli import main
from mongogate.logs import configure
from mongogate.server.app import build_server
from mongogate.tools.registry import ToolRegistry
from tests.conftest import make_settings
from tests.helpers import failure, free_port
from tests.policy.specs import ORDERS as FIND_ORDERS  # the demo spec without its index


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


@pytest.mark.anyio
async def test_a_storage_error_carries_one_request_id_in_text_audit_and_json_log(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(
        engine_uri,
        db_name,
        tmp_path,
        database={"query_uri": f"mongodb://127.0.0.1:{free_port()}", "timeout_ms": 200},  # queries fail
        audit={"sink": "mongodb"},
        server={"instance_id": "srv-a"},
    )
    stream = io.StringIO()
    configure("INFO", "json", stream)
    # the query database is down from the start; this test is about a call's storage error (a
    # database lost after start-up), so the start-up checks, which would refuse, are skipped
    async with Client(build_server(settings, ToolRegistry([FIND_ORDERS]), checks=None)) as c:
        text = await failure(c, "find_orders", filter={})
    assert text.startswith("[storage_error] (retryable)"), text
    match = re.search(r"\(request ([0-9a-f]{16})\)", text)
    assert match is not None, text
    rid = match.group(1)

    client: MongoClient[dict[str, Any]]
    with MongoClient(engine_uri, tz_aware=True) as client:
        events = [e for e in read_events_db(client[db_name][COLLECTION]) if e["request_id"] == rid]
    assert len(events) == 1 and events[0]["reason"] == "storage_error" and events[0]["instance"] == "srv-a"

    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [line for line in lines if line["request_id"] == rid]
    failed = [line for line in mine if line["logger"] == "mongogate.tools.base"]
    assert failed and failed[0]["level"] == "WARNING" and "storage_error" in failed[0]["message"]
    assert failed[0]["tenant"] == "acme" and failed[0]["tool"] == "find_orders"
    [summary] = [line for line in mine if line["logger"] == "mongogate.calls"]
    assert summary["outcome"] == "storage_error" and isinstance(summary["ms"], float)
    assert set(summary) >= {
        "ts",
        "level",
        "logger",
        "message",
        "request_id",
        "tenant",
        "tool",
        "outcome",
        "ms",
    }


def _worker_config(tmp_path: Path, engine_uri: str, db_name: str, extra: str = "") -> tuple[Path, Path]:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n'
        f'[server]\ndata_dir = "{tmp_path / "data"}"\n{extra}'
        "[scheduler]\njitter_max_s = 0\nspread = false\ntick_timeout_s = 5\nidle_sleep_s = 0.1\n"
    )
    agents = tmp_path / "fleet.py"
    agents.write_text(
        "from mongogate.scheduler import AgentRegistry\n"
        "agents = AgentRegistry()\n"
        "@agents.agent('pinger', every=3600)\n"
        "async def pinger(ctx):\n"
        "    pass\n"
    )
    return cfg, agents


def _run_worker(cfg: Path, agents: Path) -> int:
    # a due agent's first tick always runs, however short the duration
    return main(
        [
            "worker",
            "--config",
            str(cfg),
            "--agents",
            f"{agents}:agents",
            "--no-entry-points",
            "--duration",
            "0.1",
        ]
    )


def test_the_worker_logs_one_info_line_per_tick_without_v(
    engine_uri: str, db_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, agents = _worker_config(tmp_path, engine_uri, db_name)
    assert _run_worker(cfg, agents) == 0
    ticks = [line for line in capsys.readouterr().err.splitlines() if "agent pinger tick" in line]
    assert len(ticks) == 1 and " ok in " in ticks[0] and "INFO" in ticks[0], ticks


def test_server_log_level_and_format_are_honoured(
    engine_uri: str, db_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, agents = _worker_config(tmp_path, engine_uri, db_name, 'log_level = "WARNING"\n')
    assert _run_worker(cfg, agents) == 0  # set explicitly: the worker's INFO lines are quiet
    assert "agent pinger tick" not in capsys.readouterr().err
    extra = 'log_level = "INFO"\nlog_format = "json"\n'
    cfg, agents = _worker_config(tmp_path, engine_uri, db_name + "b", extra)  # a fresh schedule: due again
    assert _run_worker(cfg, agents) == 0
    assert logging.getLogger().level == logging.INFO
    lines: list[dict[str, Any]] = [
        json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")
    ]
    [tick] = [x for x in lines if "agent pinger tick" in x["message"]]
    assert tick["level"] == "INFO" and tick["logger"] == "mongogate.scheduler.loop"
