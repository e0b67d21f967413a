"""Agents: the registry, where agents come from, the example agents, and the worker command."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from mongogate.cli import build_parser, main
from mongogate.clock import ManualClock
from mongogate.config import SchedulerSettings
from mongogate.errors import ConfigError
from mongogate.scheduler.agents import Agent, AgentRegistry, TickContext, agents_from
from mongogate.scheduler.core import Scheduler
from tests.scheduler.helpers import Client, noop

#: found by the entry-point and module-reference tests
MODULE_AGENTS = [Agent("mod-a", noop, 5), Agent("mod-b", noop, 5)]


def test_registry_rejects_bad_agents_and_duplicates() -> None:
    reg = AgentRegistry()

    @reg.agent("digest", every=60, timeout_s=5)
    async def digest(ctx: TickContext) -> None:
        return None

    agent = reg.get("digest")
    assert agent is not None and agent.poll_interval_s == 60 and agent.timeout_s == 5 and len(reg) == 1
    with pytest.raises(ConfigError, match="registered twice"):
        reg.add(Agent("digest", noop, 1))
    with pytest.raises(ConfigError, match="non-empty string"):
        Agent("", noop, 1)
    with pytest.raises(ConfigError, match="poll_interval_s must be a positive"):
        Agent("x", noop, 0)
    with pytest.raises(ConfigError, match="not an Agent"):
        agents_from("nope", "test")
    assert [a.key for a in agents_from(lambda: MODULE_AGENTS, "test")] == ["mod-a", "mod-b"]


def test_agents_load_from_references_and_entry_points(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reg = AgentRegistry()
    assert reg.load_ref("tests.scheduler.test_agents:MODULE_AGENTS") == 2
    f = tmp_path / "my_agents.py"
    f.write_text(
        "from mongogate.scheduler import AgentRegistry\n"
        "agents = AgentRegistry()\n"
        "@agents.agent('from-file', every=30)\n"
        "async def tick(ctx):\n"
        "    pass\n"
    )
    assert reg.load_ref(f"{f}:agents") == 1 and "from-file" in reg
    with pytest.raises(ConfigError, match="must look like"):
        reg.load_ref("no_colon")
    with pytest.raises(ConfigError, match="could not import"):
        reg.load_ref("no.such.module:x")
    with pytest.raises(ConfigError, match="has no attribute"):
        reg.load_ref("tests.scheduler.test_agents:MISSING")

    eps = [
        importlib.metadata.EntryPoint("shop", "tests.scheduler.test_agents:noop_agent", "mongogate.agents")
    ]
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group: eps if group == "mongogate.agents" else []
    )
    fresh = AgentRegistry()
    assert fresh.load_entry_points() == 1 and fresh.keys() == ["ep-agent"]


def noop_agent() -> Agent:
    return Agent("ep-agent", noop, 10)


def test_worker_command_runs_agents_then_reports_status(
    engine_uri: str, db_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n'
        f'[server]\ndata_dir = "{tmp_path / "data"}"\n'
        "[scheduler]\njitter_max_s = 0\nspread = false\ntick_timeout_s = 5\nidle_sleep_s = 0.1\n"
    )
    agents = tmp_path / "fleet.py"
    agents.write_text(
        "from mongogate.scheduler import AgentRegistry\n"
        "agents = AgentRegistry()\n"
        "@agents.agent('pinger', every=3600)\n"
        "async def pinger(ctx):\n"
        "    await ctx.db['pings'].insert_one({'at': ctx.scheduled_at})\n"
        "@agents.agent('grumpy', every=3600)\n"
        "async def grumpy(ctx):\n"
        "    raise RuntimeError('no coffee')\n"
    )
    base = ["worker", "--config", str(cfg)]
    # both are due at once, and a run's first pass always happens: one tick each, however slow the machine
    assert main([*base, "--agents", f"{agents}:agents", "--no-entry-points", "--duration", "0.1"]) == 0
    assert main([*base, "--status"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["agent", "state", "due", "next"]
    assert table[-1].startswith("capacity: ")  # the table, then ticks due/s against run/s (issue 27)
    rows = {line.split()[0]: line for line in table[1:-1]}
    assert set(rows) == {"grumpy", "pinger"}
    assert "RuntimeError: no coffee" in rows["grumpy"] and " ok " in rows["pinger"]

    assert main([*base, "--status", "--json"]) == 0
    status = {d["agent_key"]: d for d in map(json.loads, capsys.readouterr().out.splitlines())}
    assert status["pinger"]["ticks"] == 1 and status["pinger"]["last_status"] == "ok"
    assert status["pinger"]["state"] == "waiting" and status["pinger"]["running_worker"] is None
    assert status["grumpy"]["last_error"] == "RuntimeError: no coffee"

    assert main([*base, "--no-entry-points"]) == 2
    assert "no agents to run" in capsys.readouterr().err


def test_worker_help_shows_the_settings_default_and_the_scheduler_never_imports_the_cli() -> None:
    worker = build_parser()._subparsers._group_actions[0].choices["worker"]  # type: ignore[union-attr,index]
    text = worker.format_help()
    default = SchedulerSettings.model_fields["concurrency"].default
    assert f"scheduler.concurrency, {default})" in " ".join(text.split())
    code = "import sys, mongogate.scheduler.worker; sys.exit('mongogate.cli' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


@pytest.mark.anyio
async def test_the_example_agents_run(mongo: Client, db_name: str) -> None:
    registry = AgentRegistry()
    registry.load_ref(str(Path(__file__).parents[2] / "examples" / "agents.py") + ":agents")
    assert registry.keys() == ["heartbeat", "stale-runs", "message-digest"]
    db = mongo[db_name]
    clock = ManualClock()
    s = Scheduler(db, registry, SchedulerSettings(jitter_max_s=0, spread=False), "w", clock=clock)
    await s.ensure_indexes()
    await s.register()
    hour_ago = clock.now() - timedelta(hours=1)
    await db["runs"].insert_one(
        {
            "_id": "acme:import",
            "tenant": "acme",
            "run_id": "import",
            "version": 7,
            "status": "running",
            "locked_by": "dead-worker",
            "locked_until": hour_ago,
            "updated_at": hour_ago,
            "next_seq": 7,
        }
    )
    await db["messages"].insert_many([{"tenant": t, "content": "hi"} for t in ("acme", "acme", "globex")])

    async def tick(key: str) -> str:
        agent = registry.get(key)
        assert agent is not None
        clock.advance(3600)  # a later tick each time, so it is always due
        claim = await s.claim(agent)
        assert claim is not None
        return await s.run_tick(agent, claim)

    assert [await tick(a.key) for a in registry] == ["ok", "ok", "ok"]
    [item] = await s.investigations.list_items("acme")
    assert item.trigger_signature == "stale-run:import" and item.details == {"run_id": "import", "version": 7}
    assert await tick("stale-runs") == "ok"  # seen again: still one item
    assert len(await s.investigations.list_items("acme")) == 1
    digest = await db["runs"].find_one({"tenant": "_system"})
    assert digest is not None and digest["status"] == "completed"
    assert digest["state"]["counts"] == {"acme": 2, "globex": 1}

    await db["runs"].update_one({"_id": "acme:import"}, {"$set": {"status": "completed"}})
    assert await tick("stale-runs") == "ok"
    assert await s.investigations.list_items("acme") == []
    closed = await s.investigations.list_items("acme", statuses=("closed",))
    assert [c.resolution for c in closed] == ["run is completed"]
