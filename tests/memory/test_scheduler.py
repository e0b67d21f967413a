"""The scheduler: every due tick runs exactly once across racing workers, restarts are spread out,
and a hanging or failing tick never stops the loop."""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
import json
import logging
import random
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import SchedulerSettings
from mongogate.errors import ConfigError
from mongogate.memory.agents import Agent, AgentRegistry, TickContext, agents_from
from mongogate.memory.scheduler import Scheduler

Client = AsyncMongoClient[dict[str, Any]]


async def noop(ctx: TickContext) -> None:
    return None


#: found by the entry-point and module-reference tests
MODULE_AGENTS = [Agent("mod-a", noop, 5), Agent("mod-b", noop, 5)]


@dataclass(frozen=True)
class Tick:
    agent: str
    scheduled_at: datetime
    next_run_at: datetime
    worker: str


def test_four_workers_over_fifty_agents_run_every_due_tick_exactly_once(
    engine_uri: str, db_name: str
) -> None:
    # The embedded engine runs ~40 ticks/s (claim + outcome write); keep the load below that.
    interval, window, workers = 2.0, 4.5, 4
    ticks: list[Tick] = []
    errors: list[BaseException] = []

    async def tick(ctx: TickContext) -> None:
        ticks.append(Tick(ctx.agent_key, ctx.scheduled_at, ctx.next_run_at, ctx.worker_id))
        await anyio.sleep(0.005)

    agents = [Agent(f"agent-{i:02d}", tick, interval) for i in range(50)]
    cfg = SchedulerSettings(jitter_max_s=0, tick_timeout_s=5, idle_sleep_s=0.2)
    t0 = SYSTEM_CLOCK.now()

    async def seed() -> None:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            s = Scheduler(client[db_name], agents, cfg, "seed")
            await s.ensure_indexes()
            await s.register(now=t0)  # all 50 due at t0
        finally:
            await client.close()

    async def worker(n: int, start: threading.Barrier) -> None:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)  # each worker its own client
        try:
            await client.admin.command("ping")
            start.wait()
            await Scheduler(client[db_name], agents, cfg, f"w{n}").run(duration_s=window)
        finally:
            await client.close()

    def thread(n: int, start: threading.Barrier) -> None:
        try:
            asyncio.run(worker(n, start))
        except BaseException as e:
            errors.append(e)

    asyncio.run(seed())
    barrier = threading.Barrier(workers)
    threads = [threading.Thread(target=thread, args=(n, barrier)) for n in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    stopped = SYSTEM_CLOCK.now()
    assert not errors, errors

    # exactly once: no due time of any agent ran twice
    per_slot = Counter((t.agent, t.scheduled_at) for t in ticks)
    assert max(per_slot.values()) == 1, [k for k, n in per_slot.items() if n > 1][:5]
    # every due time ran: each claim's next due time is exactly the due time the next tick answered
    by_agent: dict[str, list[Tick]] = defaultdict(list)
    for t in ticks:
        by_agent[t.agent].append(t)
    assert set(by_agent) == {a.key for a in agents}
    for key, runs in by_agent.items():
        runs.sort(key=lambda t: t.scheduled_at)
        assert runs[0].scheduled_at == t0, key
        for prev, nxt in itertools.pairwise(runs):
            assert nxt.scheduled_at == prev.next_run_at, key
        # nothing due well before the end was left behind
        assert runs[-1].next_run_at > stopped - timedelta(seconds=interval + 1.5), key

    async def final_state() -> dict[str, datetime]:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            statuses = await Scheduler(client[db_name], agents, cfg).status()
            return {s.agent_key: s.next_run_at for s in statuses if s.next_run_at}
        finally:
            await client.close()

    # every claim that was made also ran (the schedule is exactly one interval past the last tick)
    final = asyncio.run(final_state())
    assert final == {key: runs[-1].next_run_at for key, runs in by_agent.items()}
    # the workers really raced: each won a share
    wins = Counter(t.worker for t in ticks)
    assert len(wins) == workers, wins
    # most agents came due a second time inside the window (all do, unless the machine is very busy)
    assert sum(len(runs) >= 2 for runs in by_agent.values()) >= 25, len(ticks)


@pytest.mark.anyio
async def test_restart_jitter_spreads_overdue_ticks(mongo: Client, db_name: str) -> None:
    claimed: list[float] = []
    started = anyio.current_time()

    async def tick(ctx: TickContext) -> None:
        claimed.append(anyio.current_time() - started)

    agents = [Agent(f"a{i}", tick, 3600) for i in range(30)]
    cfg = SchedulerSettings(jitter_max_s=2.0, tick_timeout_s=5, idle_sleep_s=0.1)
    db = mongo[db_name]
    first = Scheduler(db, agents, cfg, "old", rng=random.Random(1))
    await first.ensure_indexes()
    hour_ago = SYSTEM_CLOCK.now() - timedelta(hours=1)
    await first.register(now=hour_ago)  # a backlog: everything overdue by an hour

    now = SYSTEM_CLOCK.now()
    # two workers restart together; each overdue agent is moved once, not twice
    moved = await asyncio.gather(
        Scheduler(db, agents, cfg, "w1", rng=random.Random(2)).jitter_overdue(now),
        Scheduler(db, agents, cfg, "w2", rng=random.Random(3)).jitter_overdue(now),
    )
    assert sum(moved) >= 30
    due = [s.next_run_at for s in await first.status() if s.next_run_at]
    offsets = sorted((d - now).total_seconds() for d in due)
    assert len(offsets) == 30 and offsets[0] >= 0 and offsets[-1] <= 2.0
    quarters = Counter(min(int(o / 0.5), 3) for o in offsets)
    assert set(quarters) == {0, 1, 2, 3}, quarters  # spread over the whole window
    assert max(quarters.values()) <= 15

    # running them: the backlog fires over ~2 s instead of all at once
    started = anyio.current_time()
    await Scheduler(db, agents, SchedulerSettings(jitter_max_s=2.0, idle_sleep_s=0.1), "w3").run(
        duration_s=2.6
    )
    assert len(claimed) == 30
    assert max(claimed) - min(claimed) > 1.0
    assert sum(1 for c in claimed if c < 0.5) < 20

    # agents that are not overdue are left alone by a restart
    assert await Scheduler(db, agents, cfg, "w4").jitter_overdue() == 0


@pytest.mark.anyio
async def test_a_hanging_tick_is_cut_at_its_deadline_and_the_loop_goes_on(
    mongo: Client, db_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: Counter[str] = Counter()
    hang_durations: list[float] = []

    async def hang(ctx: TickContext) -> None:
        calls["hang"] += 1
        t = anyio.current_time()
        try:
            await anyio.sleep(60)
        finally:
            hang_durations.append(anyio.current_time() - t)

    async def steady(ctx: TickContext) -> None:
        calls["steady"] += 1

    async def broken(ctx: TickContext) -> None:
        calls["broken"] += 1
        raise ValueError("boom")

    registry = AgentRegistry([Agent("hang", hang, 0.2), Agent("steady", steady, 0.2)])
    registry.add(Agent("broken", broken, 0.2))
    cfg = SchedulerSettings(jitter_max_s=0, tick_timeout_s=0.3, idle_sleep_s=0.05)
    s = Scheduler(mongo[db_name], registry, cfg, "w")
    caplog.set_level(logging.WARNING, logger="mongogate.memory.scheduler")
    t = anyio.current_time()
    stats = await s.run(duration_s=1.5)
    elapsed = anyio.current_time() - t

    assert elapsed < 2.5  # the 60 s sleep never held the loop
    assert calls["hang"] >= 3 and calls["steady"] >= 5 and calls["broken"] >= 3, calls
    assert hang_durations and all(0.25 < d < 0.6 for d in hang_durations), hang_durations
    assert stats.timed_out == calls["hang"] and stats.failed == calls["broken"]
    timeouts = [r for r in caplog.records if r.levelno == logging.WARNING and "hang" in r.getMessage()]
    assert timeouts and "deadline" in timeouts[0].getMessage()
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failures and "agent broken tick failed" in failures[0].getMessage() and failures[0].exc_info

    status = {a.agent_key: a for a in await s.status()}
    assert status["hang"].last_status == "timeout" and "0.3 s deadline" in (status["hang"].last_error or "")
    assert status["broken"].last_status == "error" and status["broken"].last_error == "ValueError: boom"
    assert status["steady"].last_status == "ok" and status["steady"].last_error is None
    assert status["steady"].ticks == calls["steady"]
    assert all(a.drift_s is not None and a.drift_s >= 0 for a in status.values())


@pytest.mark.anyio
async def test_status_reports_drift_and_lag(mongo: Client, db_name: str) -> None:
    late = Agent("late", noop, 60)
    s = Scheduler(mongo[db_name], [late], SchedulerSettings(jitter_max_s=0), "w")
    await s.ensure_indexes()
    await s.register(now=SYSTEM_CLOCK.now() - timedelta(seconds=30))
    [before] = await s.status()
    assert before.lag_s >= 30 and before.last_run_at is None and before.ticks == 0
    claim = await s.claim(late)
    assert claim is not None and claim.drift_s >= 30
    assert await s.claim(late) is None  # not due again for 60 s
    assert await s.run_tick(late, claim) == "ok"
    [after] = await s.status()
    assert after.drift_s is not None and after.drift_s >= 30 and after.lag_s == 0
    assert after.ticks == 1 and after.last_worker == "w" and after.last_status == "ok"
    assert after.next_run_at is not None and after.last_run_at is not None
    assert (after.next_run_at - after.last_run_at).total_seconds() == 60


@pytest.mark.anyio
async def test_a_stop_event_ends_the_loop(mongo: Client, db_name: str) -> None:
    stop = anyio.Event()

    async def stopper(ctx: TickContext) -> None:
        stop.set()

    s = Scheduler(mongo[db_name], [Agent("stopper", stopper, 0.1)], SchedulerSettings(jitter_max_s=0), "w")
    with anyio.fail_after(5):
        stats = await s.run(stop=stop)
    assert stats.claimed == 1 and stats.ok == 1


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
    assert reg.load_ref("tests.memory.test_scheduler:MODULE_AGENTS") == 2
    f = tmp_path / "my_agents.py"
    f.write_text(
        "from mongogate.memory.agents import AgentRegistry\n"
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
        reg.load_ref("tests.memory.test_scheduler:MISSING")

    eps = [
        importlib.metadata.EntryPoint("shop", "tests.memory.test_scheduler:noop_agent", "mongogate.agents")
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
    from mongogate.worker import worker_main

    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n'
        f'[server]\ndata_dir = "{tmp_path / "data"}"\n'
        "[scheduler]\njitter_max_s = 0\ntick_timeout_s = 1\nidle_sleep_s = 0.1\n"
    )
    agents = tmp_path / "fleet.py"
    agents.write_text(
        "from mongogate.memory.scheduler import AgentRegistry\n"
        "agents = AgentRegistry()\n"
        "@agents.agent('pinger', every=0.2)\n"
        "async def pinger(ctx):\n"
        "    await ctx.db['pings'].insert_one({'at': ctx.scheduled_at})\n"
        "@agents.agent('grumpy', every=0.2)\n"
        "async def grumpy(ctx):\n"
        "    raise RuntimeError('no coffee')\n"
    )
    base = ["--config", str(cfg)]
    assert worker_main([*base, "--agents", f"{agents}:agents", "--no-entry-points", "--duration", "1"]) == 0
    assert worker_main([*base, "--status"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["agent", "next", "run"]
    rows = {line.split()[0]: line for line in table[1:]}
    assert set(rows) == {"grumpy", "pinger"}
    assert "RuntimeError: no coffee" in rows["grumpy"] and " ok" in rows["pinger"]

    assert worker_main([*base, "--status", "--json"]) == 0
    status = {d["agent_key"]: d for d in map(json.loads, capsys.readouterr().out.splitlines())}
    assert status["pinger"]["ticks"] >= 3 and status["pinger"]["last_status"] == "ok"
    assert status["grumpy"]["last_error"] == "RuntimeError: no coffee"

    assert worker_main([*base, "--no-entry-points"]) == 2
    assert "no agents to run" in capsys.readouterr().err


@pytest.mark.anyio
async def test_the_example_agents_run(mongo: Client, db_name: str) -> None:
    registry = AgentRegistry()
    registry.load_ref(str(Path(__file__).parents[2] / "examples" / "agents.py") + ":agents")
    assert registry.keys() == ["heartbeat", "stale-runs", "message-digest"]
    db = mongo[db_name]
    s = Scheduler(db, registry, SchedulerSettings(jitter_max_s=0), "w")
    await s.ensure_indexes()
    await s.register()
    hour_ago = SYSTEM_CLOCK.now() - timedelta(hours=1)
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

    clock = [SYSTEM_CLOCK.now()]

    async def tick(key: str) -> str:
        agent = registry.get(key)
        assert agent is not None
        clock[0] += timedelta(hours=1)  # a later tick each time, so it is always due
        claim = await s.claim(agent, clock[0])
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
