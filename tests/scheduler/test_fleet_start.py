"""A fleet that starts (issue 27, item 3): a stable per-agent offset spreads agents sharing an
interval over it, the same in every worker and after a restart, and SIGTERM stops a worker in
the middle of registering its agents (a real process, killed by signal, waited on by its log)."""

from __future__ import annotations

import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from mongogate.clock import ManualClock
from mongogate.errors import ConfigError
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import SCHEDULE_COLLECTION, Scheduler
from mongogate.scheduler.kinds import stable_offset_s
from tests.scheduler.helpers import T0, Client, cfg, noop, spawn_worker

ROOT = Path(__file__).parents[2]


async def _first_slots(
    mongo: Client, db_name: str, agents: list[Agent], at: timedelta
) -> dict[str, datetime]:
    s = Scheduler(mongo[db_name], agents, cfg(spread=True), "w", clock=ManualClock(T0 + at))
    await s.ensure_indexes()
    await s.register()
    coll = mongo[db_name][SCHEDULE_COLLECTION]
    return {d["_id"]: d["due_at"] async for d in coll.find({}, {"due_at": 1})}


@pytest.mark.anyio
async def test_agents_sharing_an_interval_are_spread_over_it(mongo: Client, db_name: str) -> None:
    agents = [Agent(f"agent-{i:04d}", noop, 60) for i in range(300)]
    slots = await _first_slots(mongo, db_name, agents, timedelta(0))
    offsets = sorted((v - T0).total_seconds() for v in slots.values())
    assert all(0 <= o < 60 for o in offsets)
    # spread, not bunched: every 6 s tenth of the minute holds some agents, none holds a third
    tenths = [sum(1 for o in offsets if k * 6 <= o < (k + 1) * 6) for k in range(10)]
    assert min(tenths) > 0 and max(tenths) < 100, tenths


@pytest.mark.anyio
async def test_the_offset_is_stable_across_restarts_and_workers(mongo: Client, db_name: str) -> None:
    """A fresh fleet started at another time puts every agent on the same phase of its interval."""
    agents = [Agent(f"agent-{i:03d}", noop, 60) for i in range(50)]
    first = await _first_slots(mongo, db_name, agents, timedelta(0))
    await mongo[db_name][SCHEDULE_COLLECTION].drop()
    later = await _first_slots(mongo, db_name, agents, timedelta(hours=5, seconds=17.5))
    for key, slot in first.items():
        moved = (later[key] - slot).total_seconds()
        assert moved % 60 == 0, (key, moved)  # same phase, whole intervals apart
    assert stable_offset_s("agent-007", 60) == stable_offset_s("agent-007", 60)
    # a restart of the same fleet keeps what is stored (one read, no write)
    s = Scheduler(mongo[db_name], agents, cfg(spread=True), "w2", clock=ManualClock(T0 + timedelta(days=1)))
    assert await s.register() == 0


@pytest.mark.anyio
async def test_offset_s_pins_an_agents_phase(mongo: Client, db_name: str) -> None:
    agents = [Agent("pinned", noop, 60, offset_s=12.5), Agent("zero", noop, 60, offset_s=0)]
    slots = await _first_slots(mongo, db_name, agents, timedelta(seconds=20))
    base = T0
    assert slots["pinned"] == base + timedelta(seconds=72.5)  # the next :12.5 after T0 + 20 s
    assert slots["zero"] == base + timedelta(seconds=60)
    # pinned applies with spread off too; the others are due at registration
    two = [Agent("pinned2", noop, 60, offset_s=5), Agent("now", noop, 60)]
    s = Scheduler(mongo[db_name], two, cfg(), "w", clock=ManualClock(T0 + timedelta(seconds=20)))
    await s.register()
    coll = mongo[db_name][SCHEDULE_COLLECTION]
    stored = {d["_id"]: d["due_at"] async for d in coll.find({"_id": {"$in": ["pinned2", "now"]}})}
    assert stored["pinned2"] == base + timedelta(seconds=65)
    assert stored["now"] == base + timedelta(seconds=20)


def test_offset_s_must_fall_within_the_interval() -> None:
    for bad in (-1, 60, 61):
        with pytest.raises(ConfigError, match="offset_s"):
            Agent("a", noop, 60, offset_s=bad)
    with pytest.raises(ConfigError, match="offset_s"):
        Agent("c", noop, cron="* * * * *", tz="UTC", offset_s=1)


AGENTS = """
from mongogate.scheduler import Agent

async def tick(ctx):
    return None

agents = [Agent(f"agent-{i:05d}", tick, 60) for i in range(3000)]
"""


def test_sigterm_during_registration_stops_the_worker(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """The worker logs that it is registering, is sent SIGTERM, and exits without finishing
    registration (fewer schedule documents than agents) and without claiming anything."""
    proc = spawn_worker(tmp_path, engine_uri, db_name, AGENTS, "sigterm")
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the observable event: registration has begun
            lines.append(line)
            if "registering 3000 agents" in line:
                break
        else:
            pytest.fail("the worker never began registering:\n" + "".join(lines))
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        code = proc.wait(timeout=60)  # a failure bound only: a hung worker fails, not a slow one
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    log = "".join(lines) + rest
    assert code == 0, log
    assert "stopped during set-up" in log, log
    print(f"SIGTERM to exit: {took:.3f} s")

    import pymongo

    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(engine_uri)
    try:
        coll = client[db_name][SCHEDULE_COLLECTION]
        assert coll.count_documents({}) < 3000  # stopped mid-registration
        assert coll.count_documents({"open": {"$exists": True, "$ne": {}}}) == 0  # nothing claimed
    finally:
        client.close()
