"""Capacity said (issue 27, item 4): ticks due/s from the schedule against ticks run/s from the
workers' heartbeats, fleet-wide, and a warning when the fleet cannot keep up."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mongogate.clock import ManualClock
from mongogate.scheduler import fleet
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.worker_metrics import WorkerMetrics
from tests.scheduler.helpers import T0, Client, cfg, noop

pytestmark = pytest.mark.anyio


async def test_capacity_sums_the_live_workers_rates_against_the_due_rate(mongo: Client, db_name: str) -> None:
    db = mongo[db_name]
    clock = ManualClock(T0)
    agents = [Agent(f"a{i}", noop, 10) for i in range(20)]  # 2 ticks due per second
    s = Scheduler(db, agents, cfg(), "w1", clock=clock)
    await s.register()
    await fleet.announce(db, "w2", [a.key for a in agents], T0)
    await fleet.heartbeat(db, "w1", T0, 1.25)
    await fleet.heartbeat(db, "w2", T0, 0.75)
    cap = await s.capacity(await s.status())
    assert (cap.due_per_s, cap.run_per_s, cap.live_workers, cap.behind) == (2.0, 2.0, 2, False)
    assert "2.00 ticks due/s, 2.00 ticks run/s by 2 live worker(s)" in cap.line()
    assert "WARNING" not in cap.line()

    # a minute on, w2 is dead, w1 runs 1 tick/s, and the agents are more than an interval late
    clock.set(T0 + timedelta(seconds=90))
    await fleet.heartbeat(db, "w1", clock.now(), 1.0)
    cap = await s.capacity(await s.status())
    assert (cap.run_per_s, cap.live_workers, cap.behind) == (1.0, 1, True)
    assert "cannot keep up on this engine" in cap.line()


async def test_the_loop_reports_capacity_to_the_worker_metrics(mongo: Client, db_name: str) -> None:
    """Past a heartbeat the metrics hold the due rate, the fleet's run rate and whether it is behind."""
    import anyio

    db = mongo[db_name]
    clock = ManualClock(T0)
    s = Scheduler(db, [Agent(f"b{i}", noop, 4) for i in range(8)], cfg(), "w", clock=clock)
    metrics = WorkerMetrics()
    s.observer = metrics

    stop = anyio.Event()

    async def drive() -> None:
        # wait until the first pass claimed all 8, then pass a heartbeat
        while _ticks(metrics) < 8:
            await anyio.sleep(0.01)
        clock.advance(10)
        # the heartbeat's capacity report
        while _gauge(metrics, "mongogate_scheduler_ticks_due_per_second") == 0:
            await anyio.sleep(0.01)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive)
        await s.run(stop=stop)
    assert _gauge(metrics, "mongogate_scheduler_ticks_due_per_second") == 2.0  # 8 agents every 4 s
    # 8 claims over at least the 10 s since start
    assert 0 < _gauge(metrics, "mongogate_scheduler_ticks_run_per_second") <= 0.8
    # 10 s on the clock and nothing claimed since: slots at 4 and 8 s are unclaimed, 6 s (more than
    # the 4 s interval) late, and 0.8 run/s is below 2 due/s: the fleet is behind
    assert _gauge(metrics, "mongogate_scheduler_fleet_behind") == 1


def _ticks(metrics: WorkerMetrics) -> float:
    return sum(s.value for m in metrics.ticks.collect() for s in m.samples if s.name.endswith("_total"))


def _gauge(metrics: WorkerMetrics, name: str) -> float:
    """A gauge's value as /metrics shows it."""
    return metrics.registry.get_sample_value(name) or 0.0
