"""Red team of the worker loop's stop: the second SIGINT/SIGTERM cancels the running ticks
(`scheduler/worker.py` cancels the scope `run` runs in). The worker must still leave the claiming
fleet, as the first signal's cooperative stop does: otherwise the others keep it in their split
and leave its agents' ticks unclaimed until its heartbeat is `takeover_s` old.

Time is a ManualClock; the only wait is the hang guard."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from mongogate.clock import ManualClock
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.documents import TICKS_PER_S, WORKERS_COLLECTION
from mongogate.scheduler.worker import WorkerReport, run_scheduler
from tests.scheduler.helpers import T0, Client, cfg

pytestmark = pytest.mark.anyio


async def test_a_worker_cancelled_mid_tick_leaves_the_claiming_fleet(mongo: Client, db_name: str) -> None:
    started = anyio.Event()
    never = anyio.Event()

    async def hang(ctx: TickContext) -> None:
        started.set()
        await never.wait()

    s = Scheduler(mongo[db_name], [Agent("a", hang, 60)], cfg(concurrency=1), "w", clock=ManualClock(T0))
    with anyio.fail_after(60):  # a hang guard only
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await s.run(stop=anyio.Event())

            tg.start_soon(run)
            await started.wait()
            claiming = await mongo[db_name][WORKERS_COLLECTION].find_one({"_id": "w"})
            assert claiming is not None and TICKS_PER_S in claiming  # it claims
            tg.cancel_scope.cancel()  # the second signal
    left = await mongo[db_name][WORKERS_COLLECTION].find_one({"_id": "w"})
    assert left is not None and TICKS_PER_S not in left, left


async def test_the_second_signal_ends_run_scheduler_with_a_report(mongo: Client, db_name: str) -> None:
    """`mongogate worker`'s two-signal stop, with real signals to this process (the test runs in
    the main thread, where `run_scheduler` listens): the first stops claiming, the second cancels
    the hanging tick, and `run_scheduler` returns its report (it raised UnboundLocalError: the
    cancelled `run` never assigned its stats)."""
    started = anyio.Event()
    never = anyio.Event()

    async def hang(ctx: TickContext) -> None:
        started.set()
        await never.wait()

    s = Scheduler(mongo[db_name], [Agent("a", hang, 60)], cfg(concurrency=1), "w", clock=ManualClock(T0))
    stop = anyio.Event()
    report: list[WorkerReport] = []
    with anyio.fail_after(60):  # a hang guard only
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                report.append(await run_scheduler(s, stop=stop))

            tg.start_soon(run)
            await started.wait()
            os.kill(os.getpid(), signal.SIGTERM)
            await stop.wait()  # the first signal: stop claiming, let the tick finish
            os.kill(os.getpid(), signal.SIGTERM)  # the second: cancel it
    assert len(report) == 1 and report[0].stats is None  # cancelled before it counted them
    left = await mongo[db_name][WORKERS_COLLECTION].find_one({"_id": "w"})
    assert left is not None and TICKS_PER_S not in left, left
