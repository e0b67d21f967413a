"""Cron and one-off schedules keep the interval's guarantees: fixed slots, catch-up, exactly one claim
per slot across racing workers, and `worker --status` shows each agent's next slot.

Time is a ManualClock; the races are real: each worker has its own client and they claim at once.
"""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.slots import Claim
from tests.scheduler.helpers import T0, Client, cfg, noop

pytestmark = pytest.mark.anyio


async def race(schedulers: list[Scheduler], agent: Agent) -> list[Claim]:
    """Every worker claims the agent at the same moment (the tasks start together)."""
    won: list[Claim] = []
    go = anyio.Event()

    async def one(s: Scheduler) -> None:
        await go.wait()
        if (c := await s.claim(agent)) is not None:
            won.append(c)

    async with anyio.create_task_group() as tg:
        for s in schedulers:
            tg.start_soon(one, s)
        await anyio.sleep(0)
        go.set()
    return won


async def test_a_cron_agent_runs_each_slot_exactly_once_across_racing_workers(
    engine_uri: str, db_name: str
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=30))  # registered between slots
    agent = Agent("digest", noop, cron="*/5 * * * *", tz="Europe/Paris")
    clients: list[Client] = [AsyncMongoClient(engine_uri, tz_aware=True) for _ in range(3)]
    try:
        workers = [Scheduler(c[db_name], [agent], cfg(), f"w{i}", clock=clock) for i, c in enumerate(clients)]
        await workers[0].register()
        [st] = await workers[0].status()
        # a new cron agent waits for its first slot: it does not run at registration
        assert st.due_at == T0 + timedelta(minutes=5) and st.state == "waiting"
        assert st.schedule == "cron */5 * * * * Europe/Paris"
        assert await race(workers, agent) == []
        answered = []
        for k in range(1, 5):
            clock.set(T0 + timedelta(minutes=5 * k, milliseconds=7))
            won = await race(workers, agent)
            assert len(won) == 1, k  # exactly one of three workers
            assert won[0].next_run_at == T0 + timedelta(minutes=5 * (k + 1))
            answered.append(won[0].scheduled_at)
            assert await workers[k % 3].run_tick(agent, won[0]) == "ok"
        assert answered == [T0 + timedelta(minutes=5 * k) for k in range(1, 5)]
        # a 22-minute outage: one run for the oldest missed slot, the rest counted (coalesce)
        clock.set(T0 + timedelta(minutes=42))
        [late] = await race(workers, agent)
        assert late.scheduled_at == T0 + timedelta(minutes=25) and late.missed_slots == 3
        assert late.next_run_at == T0 + timedelta(minutes=45)
        [st] = await workers[0].status()
        assert st.state == "running" and st.due_at == T0 + timedelta(minutes=45) and st.missed_slots == 3
    finally:
        for c in clients:
            await c.close()


async def test_a_one_off_agent_runs_once_then_is_done(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    at = T0 + timedelta(hours=1)
    agent = Agent("migrate", noop, at=at)
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.register()
    [st] = await s.status()
    assert (
        st.state == "waiting"
        and st.due_at == at
        and st.schedule == f"at {at.isoformat(timespec='milliseconds')}"
    )
    assert await s.claim(agent) is None  # not yet
    clock.set(at + timedelta(seconds=3))
    claim = await s.claim(agent)
    assert claim is not None and claim.scheduled_at == at and claim.next_run_at is None
    assert await s.run_tick(agent, claim) == "ok"
    clock.advance(86400)
    assert await s.claim(agent) is None
    [st] = await s.status()
    assert st.state == "done" and st.due_at is None and st.ticks == 1 and st.last_status == "ok"
    # a restart does not re-arm it (the schedule is unchanged), a new time does
    assert await s.register() == 0
    later = Agent("migrate", noop, at=T0 + timedelta(days=3))
    assert await Scheduler(mongo[db_name], [later], cfg(), "w", clock=clock).register() == 1
    [st] = await s.status()
    assert st.state == "waiting" and st.due_at == T0 + timedelta(days=3)


async def test_changing_an_agents_schedule_kind_starts_it_over_at_the_first_slot(
    mongo: Client, db_name: str
) -> None:
    clock = ManualClock(T0 + timedelta(minutes=1))
    db = mongo[db_name]
    await Scheduler(db, [Agent("a", noop, 60)], cfg(), "w", clock=clock).register()
    nightly = Agent("a", noop, cron="0 3 * * *", tz="UTC")
    assert await Scheduler(db, [nightly], cfg(), "w", clock=clock).register() == 1
    [st] = await Scheduler(db, [nightly], cfg(), "w", clock=clock).status()
    assert st.due_at == T0 + timedelta(hours=3) and st.schedule == "cron 0 3 * * * UTC"
