"""Every claimed tick that does not finish is counted and shown (issue 19, section 6).

A real worker process claims a tick of a 1 s agent with a 4 s timeout and is killed mid-tick
(it stops itself right after the tick has started, so the kill lands before any deadline can
fire). Another worker then carries on, driven by a ManualClock from the moment of the kill:
the lost tick is shown while its claim is live, then counted as abandoned exactly once,
whether or not the agent allows its ticks to overlap (max_running 1, the default, or 3).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import SYSTEM_CLOCK, ManualClock
from mongogate.config import SchedulerSettings
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.core import Scheduler
from mongogate.scheduler.slots import REPORT_GRACE
from tests.scheduler.helpers import Client, kill_once_frozen, noop, spawn_worker, stopped

ROOT = Path(__file__).parents[2]

AGENTS = """
import os, signal
from mongogate.scheduler import Agent

async def flaky(ctx):
    await ctx.db["started"].insert_one({"slot": ctx.scheduled_at, "worker": ctx.worker_id})
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen mid-tick until the test kills it

agents = [Agent("flaky", flaky, 1, timeout_s=4{extra})]
"""


@pytest.mark.parametrize("max_running", [None, 3])
def test_a_tick_lost_with_a_killed_worker_is_shown_then_counted_once(
    engine_uri: str, db_name: str, tmp_path: Path, max_running: int | None
) -> None:
    extra = "" if max_running is None else f", max_running={max_running}"
    settings = "jitter_max_s = 0\nspread = false\nidle_sleep_s = 0.1\n"
    kill_once_frozen(
        spawn_worker(tmp_path, engine_uri, db_name, AGENTS.replace("{extra}", extra), "doomed", settings)
    )

    async def carry_on() -> None:
        client: Client = AsyncMongoClient(engine_uri, tz_aware=True)
        try:
            db = client[db_name]
            [marker] = await db["started"].find({}).to_list()
            assert marker["worker"] == "doomed"
            clock = ManualClock(SYSTEM_CLOCK.now())
            rules: dict[str, Any] = {} if max_running is None else {"max_running": max_running}
            agent = Agent("flaky", noop, 1, timeout_s=4, **rules)
            settings = SchedulerSettings(jitter_max_s=0, spread=False)
            s = Scheduler(db, [agent], settings, "survivor", clock=clock)
            [st] = await s.status()
            assert st.state == "running" and st.running_worker == "doomed"  # shown while its claim is live
            deadline = st.running_deadline
            assert deadline is not None
            claims = []
            abandoned_seen = False
            for _ in range(40):  # 20 s of clock time: past deadline + grace of the lost tick
                clock.advance(0.5)
                [st] = await s.status()
                if st.state == "abandoned":
                    abandoned_seen = True
                    assert st.abandoned == 1 and st.running_worker == "doomed"
                if (c := await s.claim(agent)) is not None:
                    claims.append(c)
                    assert await s.run_tick(agent, c) == "ok"
            [st] = await s.status()
        finally:
            await client.close()
        assert clock.now() > deadline + REPORT_GRACE
        # the lost tick is counted exactly once, by one claim, and stays counted
        assert st.abandoned == 1 and st.state in ("waiting", "late") and st.running_worker is None
        assert sum(c.abandoned for c in claims) == 1
        # every claim is accounted for: the survivor's ran, the doomed one is the abandoned one
        assert st.ticks == len(claims) + 1
        # no slot ran twice: the survivor never answered the doomed worker's slot
        assert marker["slot"].replace(tzinfo=None) not in {
            c.scheduled_at.replace(tzinfo=None) for c in claims
        }
        if max_running is None:
            # ticks never overlap: nothing was claimed until the lost claim expired
            assert abandoned_seen and all(c.claimed_at >= deadline + REPORT_GRACE for c in claims)
        else:
            assert any(c.claimed_at < deadline for c in claims)  # overlapping was allowed

    anyio.run(carry_on)


def test_the_stopped_check_reads_proc() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"])
    try:
        for _ in range(600):
            if stopped(proc.pid):
                break
            time.sleep(0.05)
        assert stopped(proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
