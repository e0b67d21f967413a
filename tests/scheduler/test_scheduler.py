"""The scheduler: every due tick runs exactly once across racing workers, cadence is fixed-rate,
restarts are spread within each agent's interval, and a hanging or failing tick never stops the loop.

Time is a ManualClock throughout: nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.errors import ConfigError
from mongogate.scheduler.agents import Agent, AgentRegistry, TickContext
from mongogate.scheduler.core import Scheduler
from tests.scheduler.helpers import T0, Client, cfg, noop

pytestmark = pytest.mark.anyio


class DrivenClock(ManualClock):
    """Moves only when the test says so; a loop that sleeps waits for the next move."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self._moved = anyio.Event()

    def set(self, value: datetime) -> None:
        super().set(value)
        self._moved.set()
        self._moved = anyio.Event()

    async def sleep(self, seconds: float) -> None:
        with anyio.move_on_after(0.05):  # only to bound idle polling; correctness never waits on it
            await self._moved.wait()


@dataclass(frozen=True)
class Tick:
    agent: str
    scheduled_at: datetime
    next_run_at: datetime
    worker: str


async def test_four_workers_over_fifty_agents_run_every_due_tick_exactly_once(
    engine_uri: str, db_name: str
) -> None:
    interval, rounds, workers = 2.0, 3, 4
    clock = DrivenClock(T0)
    ticks: list[Tick] = []
    per_slot: Counter[datetime] = Counter()
    round_done = [anyio.Event() for _ in range(rounds)]

    async def tick(ctx: TickContext) -> None:
        ticks.append(Tick(ctx.agent_key, ctx.scheduled_at, ctx.next_run_at, ctx.worker_id))
        per_slot[ctx.scheduled_at] += 1
        r = round((ctx.scheduled_at - T0).total_seconds() / interval)
        if per_slot[ctx.scheduled_at] == 50 and r < rounds:
            round_done[r].set()

    agents = [Agent(f"agent-{i:02d}", tick, interval) for i in range(50)]
    clients: list[Client] = [AsyncMongoClient(engine_uri, tz_aware=True) for _ in range(workers)]
    stop = anyio.Event()
    try:
        await Scheduler(clients[0][db_name], agents, cfg(), "seed", clock=clock).register()  # due at T0
        with anyio.fail_after(120):  # a hang guard only
            async with anyio.create_task_group() as tg:
                for n, c in enumerate(clients):  # each worker its own client: a real race in the database
                    s = Scheduler(c[db_name], agents, cfg(), f"w{n}", rng=random.Random(n), clock=clock)
                    tg.start_soon(functools.partial(s.run, stop=stop))
                for r in range(rounds):
                    clock.set(T0 + timedelta(seconds=r * interval))
                    await round_done[r].wait()
                stop.set()
        statuses = await Scheduler(clients[0][db_name], agents, cfg(), clock=clock).status()
    finally:
        for c in clients:
            await c.close()

    # exactly once: no slot of any agent ran twice, and every slot of every agent ran
    slots = Counter((t.agent, t.scheduled_at) for t in ticks)
    assert max(slots.values()) == 1, [k for k, n in slots.items() if n > 1][:5]
    by_agent: dict[str, list[Tick]] = defaultdict(list)
    for t in ticks:
        by_agent[t.agent].append(t)
    assert set(by_agent) == {a.key for a in agents}
    for key, runs in by_agent.items():
        runs.sort(key=lambda t: t.scheduled_at)
        assert [t.scheduled_at for t in runs] == [T0 + timedelta(seconds=r * interval) for r in range(rounds)]
        for prev, nxt in itertools.pairwise(runs):
            assert nxt.scheduled_at == prev.next_run_at, key
    # every claim that was made also ran: the schedule is exactly one slot past the last tick
    assert {s.agent_key: s.due_at for s in statuses} == {k: r[-1].next_run_at for k, r in by_agent.items()}
    assert all(s.state == "waiting" and s.missed_slots == 0 for s in statuses)
    # the workers really raced: more than one won ticks
    assert len(Counter(t.worker for t in ticks)) >= 2


async def test_cadence_is_fixed_rate_and_does_not_slip(mongo: Client, db_name: str) -> None:
    """Each slot is the previous slot plus the interval, however late each claim is."""
    clock = ManualClock(T0)
    agent = Agent("steady", noop, 2, max_running=64)  # claims only, no tick runs: let them stay open
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.ensure_indexes()
    await s.register()
    for i in range(100):
        clock.set(T0 + timedelta(seconds=2 * i, milliseconds=9))  # every claim 9 ms late
        claim = await s.claim(agent)
        assert claim is not None, i
        assert claim.scheduled_at == T0 + timedelta(seconds=2 * i)
        assert claim.next_run_at == T0 + timedelta(seconds=2 * (i + 1))  # no cumulative slip
        assert claim.drift_s == pytest.approx(0.009) and claim.missed_slots == 0
        assert await s.claim(agent) is None  # once per slot
    [st] = await s.status()
    assert st.ticks == 100 and st.missed_slots == 0 and st.due_at == T0 + timedelta(seconds=200)


async def test_missed_slots_are_skipped_and_counted(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    agent = Agent("a", noop, 2, max_running=64)  # claims only
    s = Scheduler(mongo[db_name], [agent], cfg(), "w", clock=clock)
    await s.register()
    assert (c := await s.claim(agent)) is not None and c.next_run_at == T0 + timedelta(seconds=2)
    clock.set(T0 + timedelta(seconds=7.5))  # slots 2, 4 and 6 have passed
    claim = await s.claim(agent)
    assert claim is not None
    # one run for the oldest missed slot, then on to the next future slot; 4 and 6 are skipped
    assert claim.scheduled_at == T0 + timedelta(seconds=2) and claim.drift_s == 5.5
    assert claim.missed_slots == 2 and claim.next_run_at == T0 + timedelta(seconds=8)
    assert await s.claim(agent) is None
    [st] = await s.status()
    assert st.missed_slots == 2 and st.due_at == T0 + timedelta(seconds=8) and st.lag_s == 0


async def test_catch_up_all_runs_every_missed_slot(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    agent = Agent("a", noop, 2, max_running=64)  # claims only
    s = Scheduler(mongo[db_name], [agent], cfg(catch_up="all"), "w", clock=clock)
    await s.register()
    clock.set(T0 + timedelta(seconds=7.5))
    answered = []
    while (claim := await s.claim(agent)) is not None:
        answered.append((claim.scheduled_at - T0).total_seconds())
        assert claim.missed_slots == 0
    assert answered == [0, 2, 4, 6]
    [st] = await s.status()
    assert st.missed_slots == 0 and st.due_at == T0 + timedelta(seconds=8)


async def test_restart_jitter_is_bounded_by_each_agents_interval(mongo: Client, db_name: str) -> None:
    clock = ManualClock(T0)
    fast = [Agent(f"fast{i}", noop, 2 + i % 2) for i in range(20)]  # 2-3 s intervals
    slow = [Agent(f"slow{i}", noop, 3600) for i in range(30)]
    agents = fast + slow
    settings = cfg(jitter_max_s=60)
    db = mongo[db_name]
    first = Scheduler(db, agents, settings, "old", clock=clock)
    await first.ensure_indexes()
    hour_ago = T0 - timedelta(hours=1)
    await first.register(now=hour_ago)  # a backlog: everything overdue by an hour

    # two workers restart together; each overdue agent is moved once, not twice
    moved = [
        await Scheduler(db, agents, settings, f"w{n}", rng=random.Random(n), clock=clock).jitter_overdue()
        for n in (1, 2)
    ]
    assert moved == [50, 0]
    status = {st.agent_key: st for st in await first.status()}
    for a in agents:
        st = status[a.key]
        assert st.next_run_at is not None
        offset = (st.next_run_at - T0).total_seconds()
        # no agent waits more than one interval (nor more than jitter_max_s) beyond its slot
        assert 0 <= offset <= min(60, a.poll_interval_s or 0), (a.key, offset)
        assert st.due_at == hour_ago and st.lag_s == 3600  # the slot is kept: lag is not hidden
    offsets = sorted((status[a.key].next_run_at - T0).total_seconds() for a in slow)  # type: ignore[operator]
    quarters = Counter(min(int(o / 15), 3) for o in offsets)
    assert set(quarters) == {0, 1, 2, 3}, quarters  # spread over the whole window
    # agents that are not overdue are left alone by a restart
    assert await Scheduler(db, agents, settings, "w3", clock=clock).jitter_overdue() == 0


async def test_a_hanging_tick_is_cut_at_its_deadline_and_the_loop_goes_on(
    mongo: Client, db_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: Counter[str] = Counter()
    stop = anyio.Event()
    never = anyio.Event()

    async def hang(ctx: TickContext) -> None:
        calls["hang"] += 1
        await never.wait()

    async def steady(ctx: TickContext) -> None:
        calls["steady"] += 1
        if calls["steady"] >= 5 and calls["hang"] >= 3 and calls["broken"] >= 3:
            stop.set()

    async def broken(ctx: TickContext) -> None:
        calls["broken"] += 1
        raise ValueError("boom")

    registry = AgentRegistry([Agent("hang", hang, 1), Agent("steady", steady, 1)])
    registry.add(Agent("broken", broken, 1))
    # The deadline is the event loop's timer (a real 0.05 s); nothing asserts how long anything took.
    s = Scheduler(mongo[db_name], registry, cfg(tick_timeout_s=0.05), "w", clock=ManualClock(T0))
    caplog.set_level(logging.WARNING, logger="mongogate.scheduler")
    with anyio.fail_after(60):  # a hang guard only
        stats = await s.run(stop=stop)

    assert calls["hang"] >= 3 and calls["steady"] >= 5 and calls["broken"] >= 3, calls
    assert stats.timed_out == calls["hang"] and stats.failed == calls["broken"]
    timeouts = [r for r in caplog.records if r.levelno == logging.WARNING and "hang" in r.getMessage()]
    assert timeouts and "deadline" in timeouts[0].getMessage()
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failures and "agent broken tick failed" in failures[0].getMessage() and failures[0].exc_info

    status = {a.agent_key: a for a in await s.status()}
    assert status["hang"].last_status == "timeout" and "0.05 s deadline" in (status["hang"].last_error or "")
    assert status["broken"].last_status == "error" and status["broken"].last_error == "ValueError: boom"
    assert status["steady"].last_status == "ok" and status["steady"].last_error is None
    assert status["steady"].ticks == calls["steady"]
    assert all(a.state != "abandoned" and a.running_worker is None for a in status.values())


async def test_a_stop_event_ends_the_loop(mongo: Client, db_name: str) -> None:
    stop = anyio.Event()

    async def stopper(ctx: TickContext) -> None:
        stop.set()

    s = Scheduler(mongo[db_name], [Agent("stopper", stopper, 0.1)], cfg(), "w", clock=ManualClock(T0))
    with anyio.fail_after(30):
        stats = await s.run(stop=stop)
    assert stats.claimed == 1 and stats.ok == 1


async def test_a_short_run_always_makes_its_first_pass(mongo: Client, db_name: str) -> None:
    """--duration counts from the end of set-up, and the due ticks of the first pass always run."""
    ran: list[str] = []

    async def tick(ctx: TickContext) -> None:
        ran.append(ctx.agent_key)

    agents = [Agent(f"a{i}", tick, 3600) for i in range(5)]
    stats = await Scheduler(mongo[db_name], agents, cfg(), "w", clock=ManualClock(T0)).run(duration_s=0.001)
    assert sorted(ran) == [a.key for a in agents] and stats.claimed == 5


async def test_concurrency_comes_from_the_setting_unless_overridden(mongo: Client, db_name: str) -> None:
    db = mongo[db_name]
    assert Scheduler(db, [], cfg(concurrency=3)).concurrency == 3
    assert Scheduler(db, [], cfg(concurrency=3), concurrency=5).concurrency == 5
    with pytest.raises(ConfigError, match="at least 1"):
        Scheduler(db, [], cfg(), concurrency=0)
