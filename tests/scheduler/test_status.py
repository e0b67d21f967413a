"""`worker --status` tells the truth: running ticks with their deadline, abandoned ticks, lag from
the original slot, missed slots; and it works beside a process that owns the embedded engine."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import SYSTEM_CLOCK, ManualClock
from mongogate.config import DatabaseSettings
from mongogate.db import Database
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.slots import REPORT_GRACE
from tests.scheduler.helpers import T0, Client, cfg, config_file, noop

pytestmark = pytest.mark.anyio


async def test_status_shows_a_running_tick_with_its_deadline_then_an_abandoned_one(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0)
    agent = Agent("job", noop, 60)
    s = Scheduler(mongo[db_name], [agent], cfg(), "w1", clock=clock)
    await s.register()
    first = await s.claim(agent)
    assert first is not None and await s.run_tick(agent, first) == "ok"

    clock.set(T0 + timedelta(seconds=60))
    claim = await s.claim(agent)  # this tick's worker dies: it never reports
    assert claim is not None
    clock.advance(10)
    [st] = await s.status()
    assert st.state == "running" and st.running_worker == "w1"
    assert st.running_since == T0 + timedelta(seconds=60)
    assert st.running_deadline == T0 + timedelta(seconds=90)  # claimed + tick_timeout_s
    assert st.last_status == "ok"  # the previous tick's outcome, not this one's

    # past the deadline and the grace for writing the outcome: the worker is gone
    clock.set(T0 + timedelta(seconds=90) + REPORT_GRACE + timedelta(milliseconds=1))
    [st] = await s.status()
    assert st.state == "abandoned" and st.abandoned == 1 and st.running_worker == "w1"

    # another worker takes the next slot; the abandoned tick stays counted
    clock.set(T0 + timedelta(seconds=120))
    other = Scheduler(mongo[db_name], [agent], cfg(), "w2", clock=clock)
    nxt = await other.claim(agent)
    assert nxt is not None and await other.run_tick(agent, nxt) == "ok"
    [st] = await s.status()
    assert st.state == "waiting" and st.abandoned == 1 and st.running_worker is None
    assert st.last_status == "ok" and st.last_worker == "w2" and st.ticks == 3


async def test_status_measures_lag_and_drift_from_the_original_slot(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    agent = Agent("late", noop, 60)
    s = Scheduler(mongo[db_name], [agent], cfg(jitter_max_s=60), "w", rng=random.Random(4), clock=clock)
    await s.register(now=T0 - timedelta(seconds=30))
    [before] = await s.status()
    assert before.state == "late" and before.lag_s == 30 and before.ticks == 0

    assert await s.jitter_overdue() == 1  # a restart pushes the start out...
    clock.advance(4)
    [st] = await s.status()
    assert st.next_run_at is not None and st.next_run_at > T0
    assert st.due_at == T0 - timedelta(seconds=30) and st.lag_s == 34  # ...but not the lag

    clock.set(st.next_run_at)
    claim = await s.claim(agent)
    assert claim is not None and claim.scheduled_at == T0 - timedelta(seconds=30)
    assert claim.drift_s == (st.next_run_at - claim.scheduled_at).total_seconds() > 30
    # still on the agent's grid: the first slot after the claim (a slot jitter pushed past is counted)
    grid = [T0 + timedelta(seconds=30 + 60 * k) for k in range(3)]
    assert claim.next_run_at == min(g for g in grid if g > st.next_run_at)
    assert claim.missed_slots == (1 if st.next_run_at >= grid[0] else 0)
    assert await s.run_tick(agent, claim) == "ok"
    [after] = await s.status()
    assert after.drift_s == claim.drift_s and after.lag_s == 0 and after.state == "waiting"
    assert after.ticks == 1 and after.last_worker == "w" and after.last_status == "ok"


@pytest.mark.embedded_engine
def test_worker_status_works_beside_the_engine_owner(tmp_path: Path) -> None:
    """`worker --status` in another process while this one uses the embedded engine's data dir."""
    import anyio

    from mongogate.engine import client as engine_client

    data = tmp_path / "data"
    cfg_file = tmp_path / "mongogate.toml"
    cfg_file.write_text(f'[database]\nname = "beside"\n[server]\ndata_dir = "{data}"\n')

    async def main() -> subprocess.CompletedProcess[str]:
        owner = Database(DatabaseSettings(name="beside"), data)
        await owner.open()
        try:
            assert owner.engine_state is not None  # the shared engine process of this data dir
            info = json.loads((data / "engine.json").read_text())
            assert info["pid"] == owner.engine_state.pid != os.getpid()
            assert (data / "engine.json").stat().st_mode & 0o777 == 0o600
            s = Scheduler(owner.memory, [Agent("pinger", noop, 5)], cfg(), "w")
            await s.register(now=SYSTEM_CLOCK.now() - timedelta(hours=1))  # overdue: "late"
            return await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [sys.executable, "-m", "mongogate.cli", "worker", "--config", str(cfg_file), "--status"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env={**os.environ, "PYTHONPATH": _pythonpath()},
                )
            )
        finally:
            await owner.close()

    try:
        done = anyio.run(main)
    finally:
        assert engine_client.stop(data)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # only the table: no INFO lines, no engine notices
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["agent", "state", "due"]
    assert lines[1].split()[:2] == ["pinger", "late"]
    assert not (data / "engine.json").exists()  # removed when the engine stopped


async def test_overlapping_ticks_finishing_out_of_order_are_not_reported_as_running(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0)
    agent = Agent("slow", noop, 1, max_running=2)  # allowed to overlap its next slot
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.register()
    first = await s.claim(agent)
    clock.advance(1)
    second = await s.claim(agent)  # the first is still running: the ticks overlap
    assert first is not None and second is not None
    await s.run_tick(agent, first)
    [st] = await s.status()
    assert st.state == "running" and st.running_since == second.claimed_at  # the second still runs
    await s.run_tick(agent, second)
    await s.run_tick(agent, first)  # a late outcome of the older tick does not revive it
    clock.advance(3600)
    [st] = await s.status()
    assert st.state == "late" and st.abandoned == 0 and st.running_worker is None


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(Path(__file__).parents[2])) if p)


def _cli(args: list[str], cfg_file: Path) -> subprocess.CompletedProcess[str]:
    path = _pythonpath()
    return subprocess.run(
        [sys.executable, "-m", "mongogate.cli", *args, "--config", str(cfg_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


def test_worker_status_prints_only_its_table_and_nothing_on_stderr(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    import anyio

    cfg_file = config_file(tmp_path, engine_uri, db_name)

    async def seed() -> None:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            s = Scheduler(client[db_name], [Agent("pinger", noop, 5)], cfg(), "w")
            await s.register(now=SYSTEM_CLOCK.now() - timedelta(hours=1))
        finally:
            await client.close()

    anyio.run(seed)
    done = _cli(["worker", "--status"], cfg_file)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["agent", "state", "due"] and lines[1].split()[:2] == ["pinger", "late"]
    # then the capacity (issue 27): 1/5 tick due per second, none run (no worker alive), an hour late
    assert lines[2] == "capacity: 0.20 ticks due/s, 0.00 ticks run/s by 0 live worker(s)"
    assert lines[3].startswith("WARNING: the fleet cannot keep up on this engine")
    assert len(lines) == 4


async def test_status_filters_by_state_and_pattern_and_summarises_a_large_fleet(
    mongo: Client, db_name: str
) -> None:
    import io

    from mongogate.scheduler.status import print_status, select

    clock = ManualClock(T0)
    db = mongo[db_name]
    fleet = [Agent(f"billing-{i:02d}", noop, 60) for i in range(20)] + [Agent("search", noop, 60)]
    fleet += [Agent(f"mail-{i:02d}", noop, 3600, max_running=2) for i in range(10)]
    s = Scheduler(db, fleet, cfg(), "w", clock=clock)
    await s.register(now=T0 - timedelta(seconds=90))  # every agent is late
    for a in fleet[20:]:
        claim = await s.claim(a)
        assert claim is not None
        await s.run_tick(a, claim)  # search and mail-* are waiting again
    statuses = await s.status()
    assert {st.state for st in statuses} == {"late", "waiting"}
    late = select(statuses, ["late"])
    assert [st.agent_key for st in late] == [f"billing-{i:02d}" for i in range(20)]
    assert [st.agent_key for st in select(statuses, (), "mail-0[12]")] == ["mail-01", "mail-02"]
    assert select(statuses, ["orphaned"], "billing-*") == []
    out = io.StringIO()
    print_status(statuses, out)  # 31 agents: one screen
    text = out.getvalue().splitlines()
    assert text[0] == "31 agents: 20 late, 11 waiting" and len(text) < 25
    assert "max lag 90.000 s" in text[1]
    out = io.StringIO()
    print_status(select(statuses, (), "billing-*"), out, summary=False)
    assert len(out.getvalue().splitlines()) == 21  # the header and 20 rows
