"""Managing a running fleet through the database: pause, resume, run-now, remove, and orphaned
schedule documents (reported, never claimed, parked out of the scan, pruned).

Time is a ManualClock; "a worker read the document before the pause" is a real stale read
passed to a real claim, so the race is decided by the database, not by timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.cli import main
from mongogate.clock import SYSTEM_CLOCK, ManualClock
from mongogate.errors import InvalidInput, NotFound
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.manage import Schedules
from mongogate.scheduler.slots import CLAIM_FIELDS
from tests.scheduler.helpers import T0, Client, cfg, config_file, noop
from tests.scheduler.test_scan import Finds

pytestmark = pytest.mark.anyio


async def test_pause_lets_the_tick_in_flight_finish_and_claims_nothing_until_resumed(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0)
    agent = Agent("sync", noop, 10)
    db = mongo[db_name]
    w1 = Scheduler(db, [agent], cfg(), "w1", clock=clock)
    w2 = Scheduler(db, [agent], cfg(), "w2", clock=clock)
    ops = Schedules(db, worker_ttl_s=60)
    await w1.register()
    in_flight = await w1.claim(agent)
    assert in_flight is not None
    clock.set(T0 + timedelta(seconds=10))
    await w1.run_tick(agent, in_flight)
    claimed = await w1.claim(agent)  # the 10 s tick is in flight when the operator pauses
    assert claimed is not None
    assert await w1.run_tick(agent, claimed) == "ok"
    clock.set(T0 + timedelta(seconds=20))
    stale = await db["agent_schedule"].find_one({"_id": "sync"}, CLAIM_FIELDS)  # w2's scan, before the pause
    assert await ops.pause("sync", clock.now(), "ops@host") is True
    assert await ops.pause("sync", clock.now(), "ops@host") is False  # already paused
    assert await w2.claim(agent, clock.now(), stale) is None  # the stale read cannot win
    for _ in range(6):
        clock.advance(10)
        assert await w1.claim(agent) is None and await w2.claim(agent) is None
    [st] = await w1.status()
    assert st.state == "paused" and st.paused and st.last_status == "ok" and st.next_run_at is None
    assert st.due_at == T0 + timedelta(seconds=20)  # the slot it stopped at
    # resume: one run for the slot it stopped at, the slots missed while paused are counted
    assert await ops.resume("sync", clock.now()) is True
    assert await ops.resume("sync", clock.now()) is False
    back = await w2.claim(agent)
    assert back is not None and back.scheduled_at == T0 + timedelta(seconds=20) and back.missed_slots == 6
    with pytest.raises(NotFound, match="no schedule for agent 'nope'"):
        await ops.pause("nope", clock.now(), "ops")


async def test_run_now_runs_one_extra_tick_and_keeps_the_agents_slots(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0 + timedelta(hours=5))
    agent = Agent("nightly", noop, cron="0 3 * * *", tz="UTC")
    db = mongo[db_name]
    s = Scheduler(db, [agent], cfg(), "w", clock=clock)
    ops = Schedules(db, worker_ttl_s=60)
    await s.register()
    assert await s.claim(agent) is None  # next slot is tomorrow 03:00
    await ops.run_now("nightly", clock.now(), "ops")
    clock.advance(0.2)
    manual = await s.claim(agent)
    assert manual is not None and manual.manual and manual.scheduled_at == T0 + timedelta(hours=5)
    assert manual.next_run_at == T0 + timedelta(days=1, hours=3)
    assert await s.run_tick(agent, manual) == "ok"
    assert await s.claim(agent) is None  # once
    [st] = await s.status()
    assert st.due_at == st.next_run_at == T0 + timedelta(days=1, hours=3) and st.ticks == 1
    # paused: run-now still runs one tick, and the agent stays paused
    await ops.pause("nightly", clock.now(), "ops")
    await ops.run_now("nightly", clock.now(), "ops")
    again = await s.claim(agent)
    assert again is not None and again.manual
    await s.run_tick(agent, again)
    [st] = await s.status()
    assert st.state == "paused" and st.next_run_at is None and st.due_at == T0 + timedelta(days=1, hours=3)


async def test_remove_refuses_an_agent_a_running_worker_registers_unless_forced(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0)
    db = mongo[db_name]
    await Scheduler(db, [Agent("live", noop, 5)], cfg(), "w", clock=clock).register()
    ops = Schedules(db, worker_ttl_s=60)
    clock.advance(42)  # the worker exited 42 s ago: it still counts as running for 18 s more
    with pytest.raises(InvalidInput) as refused:
        await ops.remove("live", clock.now())
    # it says when that worker was last seen and which setting decides how long it counts
    said = str(refused.value)
    assert "registered by a worker last seen 42 s ago (2030-01-01T00:00:00Z)" in said, said
    assert "scheduler.worker_ttl_s (60 s)" in said, said
    await ops.remove("live", clock.now(), force=True)
    assert await db["agent_schedule"].count_documents({}) == 0
    with pytest.raises(NotFound):
        await ops.remove("live", clock.now(), force=True)


#: more than one scan batch (64): parking pages through them
ORPHANS = 100


async def test_orphans_are_never_claimed_leave_the_bounded_scan_and_are_pruned(
    engine_uri: str, db_name: str
) -> None:
    clock = ManualClock(T0)
    finds = Finds()
    client: Client = AsyncMongoClient(engine_uri, tz_aware=True, event_listeners=[finds])
    ran: list[str] = []

    async def tick(ctx: TickContext) -> None:
        ran.append(ctx.agent_key)

    try:
        db = client[db_name]
        gone = [Agent(f"gone-{i:03d}", tick, 2) for i in range(ORPHANS)]
        # the previous deployment, last seen an hour ago, had ORPHANS more agents
        await Scheduler(db, [Agent("keep", tick, 2), *gone], cfg(), "old", clock=clock).register(
            now=T0 - timedelta(hours=1)
        )
        s = Scheduler(db, [Agent("keep", tick, 2)], cfg(concurrency=2), "new", clock=clock)
        finds.finds.clear()
        stats = await s.run(duration_s=1)
        assert ran and set(ran) == {"keep"}  # orphans are never claimed
        assert stats.orphans_parked == ORPHANS
        scans = [(cmd, n) for cmd, n in finds.finds if "sort" in cmd]
        assert scans and all(0 < cmd.get("limit", 0) <= 64 and n <= 64 for cmd, n in scans), scans[:2]
        # parked: out of the scan for good, and reported as orphaned
        assert (
            await db["agent_schedule"].count_documents({"next_run_at": None, "orphaned_at": {"$ne": None}})
            == ORPHANS
        )
        states = {st.agent_key: st.state for st in await s.status()}
        assert sum(v == "orphaned" for v in states.values()) == ORPHANS and states["keep"] != "orphaned"
        ops = Schedules(db, worker_ttl_s=60)
        assert len((await ops.prune(clock.now(), dry_run=True)).removed) == ORPHANS
        pruned = await ops.prune(clock.now())
        assert len(pruned.removed) == ORPHANS and pruned.busy == []
        assert [st.agent_key for st in await s.status()] == ["keep"]
        # an orphan registered again comes back on its schedule
        await Scheduler(db, [Agent("keep", tick, 2)], cfg(), "new", clock=clock).register()
    finally:
        await client.close()


async def test_a_parked_orphan_that_is_registered_again_is_claimed_again(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    db = mongo[db_name]
    a, b = Agent("a", noop, 2), Agent("b", noop, 2)
    await Scheduler(db, [a, b], cfg(), "old", clock=clock).register(now=T0 - timedelta(hours=1))
    await Scheduler(db, [a], cfg(), "new", clock=clock).run(duration_s=0.001)
    [doc] = await db["agent_schedule"].find({"_id": "b"}).to_list()
    assert doc["next_run_at"] is None and doc["orphaned_at"] is not None
    back = Scheduler(db, [a, b], cfg(), "newer", clock=clock)
    await back.register()
    claim = await back.claim(b)
    assert claim is not None and claim.scheduled_at == T0 - timedelta(hours=1)


def test_schedule_commands_through_the_command_line(
    engine_uri: str, db_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import anyio

    cfg_file = config_file(tmp_path, engine_uri, db_name)
    now = SYSTEM_CLOCK.now()

    async def seed() -> None:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            db = client[db_name]
            old = [Agent("digest", noop, 60), Agent("retired", noop, 60)]
            await Scheduler(db, old, cfg(), "old").register(now=now - timedelta(hours=1))
            await Scheduler(db, [Agent("digest", noop, 60)], cfg(), "live").register(now=now)
        finally:
            await client.close()

    anyio.run(seed)
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(Path(__file__).parents[2])) if p)
    done = subprocess.run(
        [sys.executable, "-m", "mongogate.cli", "schedule", "pause", "digest", "--config", str(cfg_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0 and done.stdout == "digest: paused\n" and done.stderr == "", done.stderr
    base = ["--config", str(cfg_file)]
    assert main(["schedule", "list", *base]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["digest"][1] == "paused" and rows["retired"][1] == "orphaned"
    assert rows["digest"][2:4] == ["every", "60s"]
    assert main(["schedule", "list", "--json", "--state", "orphaned", *base]) == 0
    [listed] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["agent_key"] == "retired" and listed["state"] == "orphaned"
    assert main(["schedule", "resume", "digest", *base]) == 0
    assert main(["schedule", "run-now", "digest", *base]) == 0
    assert main(["schedule", *base, "run-now", "digest"]) == 0  # --config before the action too
    capsys.readouterr()
    assert main(["schedule", "run-now", "retired", *base]) == 2  # nothing would run it
    assert main(["schedule", "remove", "digest", *base]) == 2  # a live worker registers it
    err = capsys.readouterr().err
    assert "orphaned (no worker registers it)" in err and "registered by a worker last seen" in err
    assert main(["schedule", "prune", "--dry-run", *base]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "would remove 1 orphaned schedule document(s)",
        "  retired",
    ]
    assert main(["schedule", "prune", *base]) == 0
    assert capsys.readouterr().out.startswith("removed 1 orphaned")
    assert main(["worker", "--status", "--state", "orphaned", *base]) == 0
    assert "no agents are scheduled" in capsys.readouterr().out


async def test_prune_keeps_a_parked_orphan_registered_again_while_it_runs(
    mongo: Client, db_name: str
) -> None:
    """A worker that starts during a prune (a rolling deploy) registers a parked orphan again
    after prune read it: the delete is conditional on the document still being parked, so the
    agent keeps its schedule. Old code: deleted it, and the new worker never ran it (nothing
    re-creates a schedule document before that worker's next start)."""
    clock = ManualClock(T0)
    db = mongo[db_name]
    a, b = Agent("a", noop, 2), Agent("b", noop, 2)
    await Scheduler(db, [a, b], cfg(), "old", clock=clock).register(now=T0 - timedelta(hours=1))
    await Scheduler(db, [a], cfg(), "new", clock=clock).run(duration_s=0.001)  # parks b
    back = Scheduler(db, [a, b], cfg(), "newer", clock=clock)
    schedules = Schedules(db, cfg().worker_ttl_s)
    real = schedules.coll

    class StartsAWorkerFirst:
        """The schedule collection, with the worker's start between prune's read and its delete."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        async def delete_many(self, *args: Any, **kwargs: Any) -> Any:
            await back.register()
            return await real.delete_many(*args, **kwargs)

    schedules.coll = StartsAWorkerFirst()  # type: ignore[assignment]
    pruned = await schedules.prune(T0)
    assert pruned.removed == []  # and not reported as removed
    claim = await back.claim(b)
    assert claim is not None and claim.scheduled_at == T0 - timedelta(hours=1)
