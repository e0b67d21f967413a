"""The worker loop: scan for due ticks, claim them, run them within the concurrency limit.

Every wait is a sleep on the scheduler's clock that a stop wakes early; due decisions read the
same clock, so a ManualClock drives the whole loop in tests.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import anyio
from pymongo import ASCENDING
from pymongo.errors import PyMongoError

from mongogate.clock import Clock, as_utc
from mongogate.errors import StorageError
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.slots import Claim
from mongogate.values import Doc

if TYPE_CHECKING:
    from mongogate.scheduler.core import Scheduler
    from mongogate.scheduler.worker_metrics import WorkerMetrics

log = logging.getLogger("mongogate.scheduler.core")

#: what a claim needs to read from a schedule document
CLAIM_FIELDS = {"agent_key": 1, "next_run_at": 1, "due_at": 1}


@dataclass
class SchedulerStats:
    claimed: int = 0
    #: claims lost to another worker (or no longer due): the cost of racing
    lost: int = 0
    ok: int = 0
    failed: int = 0
    timed_out: int = 0
    #: slots passed over by this worker's claims (catch-up policy "skip")
    missed_slots: int = 0
    max_drift_s: float = 0.0
    by_agent: dict[str, int] = field(default_factory=dict)


def _dt(value: object) -> datetime | None:
    return as_utc(value) if isinstance(value, datetime) else None


async def upcoming(
    s: Scheduler, now: datetime, batch: int
) -> tuple[list[tuple[Agent, Doc]], datetime | None]:
    """Known agents due now (earliest first, at most `batch`) as read, and the next due time."""
    due: list[tuple[Agent, Doc]] = []
    cursor = s.coll.find({}, CLAIM_FIELDS, sort=[("next_run_at", ASCENDING)])
    async with cursor:
        async for d in cursor:
            agent = s.agents.get(d.get("agent_key", ""))
            at = _dt(d.get("next_run_at"))
            if agent is None or at is None:
                continue  # another deployment's agent, or a broken document: not ours to run
            if at > now:
                return due, at
            due.append((agent, d))
            if len(due) >= batch:
                break
    return due, None


async def nap(clock: Clock, seconds: float, stop: anyio.Event) -> None:
    """Sleep on the injected clock, waking early when `stop` is set."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await clock.sleep(seconds)
        tg.cancel_scope.cancel()


async def run_loop(s: Scheduler, stop: anyio.Event, duration_s: float | None) -> SchedulerStats:
    """Claim and run due ticks until `stop` is set or `duration_s` passes; running ticks then finish.

    Stopping is cooperative, between claims, so a claimed tick is never abandoned by the loop.
    """
    stats = SchedulerStats()
    await s.ensure_indexes()
    await s.register()
    await s.jitter_overdue()
    # The duration counts from the end of set-up, and the first pass over due ticks always
    # runs: what a short run does never depends on how long set-up took.
    end = None if duration_s is None else s.clock.now() + timedelta(seconds=duration_s)
    first_pass = True
    log.info("worker %s: running %d agents", s.worker_id, len(s.agents))
    slots = anyio.Semaphore(s.concurrency)
    idle = s.settings.idle_sleep_s
    stale_after = max(2, s.concurrency // 2)

    def left() -> float:
        return math.inf if end is None else (end - s.clock.now()).total_seconds()

    def done() -> bool:
        return stop.is_set() or (not first_pass and left() <= 0)

    observer: WorkerMetrics | None = getattr(s, "observer", None)

    async def tick(agent: Agent, claim: Claim) -> None:
        started = anyio.current_time()
        try:
            status = await s.run_tick(agent, claim, stats)
        finally:
            slots.release()
        seconds = anyio.current_time() - started
        # One line per tick: the worker's heartbeat in its log (INFO, the worker's default level).
        log.info(
            "agent %s tick %s: %s in %.3f s, claimed %.3f s after its slot%s",
            agent.key,
            claim.scheduled_at.isoformat(),
            status,
            seconds,
            claim.drift_s,
            f", {claim.missed_slots} slot(s) skipped" if claim.missed_slots else "",
        )
        if observer is not None:
            observer.finished(agent.key, status, seconds, claim.next_run_at, s.clock.now())

    async with anyio.create_task_group() as tg:
        while not done():
            wait = idle
            try:
                now = s.clock.now()
                due, next_at = await upcoming(s, now, batch=max(4 * s.concurrency, 64))
                if observer is not None:
                    for agent, seen in due:
                        if (at := _dt(seen.get("next_run_at"))) is not None:
                            observer.due(agent.key, (now - at).total_seconds())
                s.rng.shuffle(due)  # workers racing over the same backlog collide less
                claimed = lost = 0
                for agent, seen in due:
                    if lost >= stale_after:
                        break  # other workers are draining this snapshot: look again
                    await slots.acquire()
                    if done():
                        slots.release()
                        break
                    try:
                        claim = await s.claim(agent, s.clock.now(), seen)
                    except BaseException:
                        slots.release()
                        raise
                    if claim is None:
                        slots.release()
                        lost += 1
                        stats.lost += 1
                        continue
                    claimed += 1
                    lost = 0
                    stats.claimed += 1
                    stats.missed_slots += claim.missed_slots
                    stats.by_agent[agent.key] = stats.by_agent.get(agent.key, 0) + 1
                    stats.max_drift_s = max(stats.max_drift_s, claim.drift_s)
                    if observer is not None:
                        observer.claimed(agent.key, claim.drift_s, claim.missed_slots)
                    tg.start_soon(tick, agent, claim)
                if due:
                    # More may be due already; if others won everything, yield briefly.
                    wait = 0.0 if claimed else 0.01
                elif next_at is not None:
                    wait = min(idle, max((next_at - s.clock.now()).total_seconds(), 0.0))
            except (PyMongoError, StorageError) as e:
                log.warning("worker %s: schedule unreachable (%s); retrying in %g s", s.worker_id, e, idle)
            first_pass = False
            wait = min(wait, left())
            if wait > 0:
                await nap(s.clock, wait, stop)
            else:
                await anyio.sleep(0)
    log.info(
        "worker %s: stopped after %d ticks (%d failed, %d timed out, %d slots skipped)",
        s.worker_id,
        stats.claimed,
        stats.failed,
        stats.timed_out,
        stats.missed_slots,
    )
    return stats
