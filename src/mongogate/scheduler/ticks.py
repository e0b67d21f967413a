"""Running one claimed tick: under its hard deadline, on a thread when the agent blocks, then one
outcome write and the agent's listeners."""

from __future__ import annotations

import logging
from typing import cast

import anyio
import anyio.to_thread
from pymongo.errors import PyMongoError

from mongogate.scheduler.agents import Agent, BlockingTickFn, TickContext, TickFn
from mongogate.scheduler.events import TickEvent, notify
from mongogate.scheduler.host import TickHost
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.values import Doc

log = logging.getLogger("mongogate.scheduler.core")


async def _call(agent: Agent, ctx: TickContext) -> None:
    if agent.blocking:
        # A thread cannot be cancelled: at the deadline the tick is reported as timed out and
        # the loop moves on (abandon_on_cancel); the thread finishes on its own.
        fn = cast(BlockingTickFn, agent.tick)
        await anyio.to_thread.run_sync(fn, ctx, abandon_on_cancel=True)
    else:
        await cast(TickFn, agent.tick)(ctx)


async def run_tick(s: TickHost, agent: Agent, claim: Claim, stats: SchedulerStats | None = None) -> str:
    """Run one claimed tick under its hard deadline; returns "ok", "error" or "timeout". Never raises."""
    timeout = s.timeout_s(agent)
    drift = claim.drift_s
    ctx = TickContext(
        agent=agent,
        db=s.db,
        worker_id=s.worker_id,
        scheduled_at=claim.scheduled_at,
        claimed_at=claim.claimed_at,
        next_run_at=claim.next_run_at or claim.scheduled_at,
        drift_s=drift,
        investigations=s.investigations,
        runs=s.runs,
        log=logging.getLogger(f"mongogate.scheduler.core.{agent.key}"),
        clock=s.clock,
    )
    if drift > max(agent.nominal_s, 1.0):
        log.info("agent %s is lagging: tick claimed %.3f s after its slot", agent.key, drift)
    else:
        log.debug("agent %s tick claimed %.3f s after its slot", agent.key, drift)
    started = anyio.current_time()
    status, error = "ok", None
    try:
        # The deadline is enforced by the event loop's timer (a cancel scope): it must fire
        # even when nothing else moves, so it is not read from the injected clock.
        with anyio.move_on_after(timeout) as scope:
            await _call(agent, ctx)
        if scope.cancel_called:
            status = "timeout"
            error = f"tick exceeded its {timeout:g} s deadline and was cancelled"
            log.warning("agent %s: %s (due %s)", agent.key, error, claim.scheduled_at.isoformat())
    except Exception as e:
        status, error = "error", f"{type(e).__name__}: {e}"[:1000]
        log.error("agent %s tick failed (due %s)", agent.key, claim.scheduled_at.isoformat(), exc_info=True)
    duration = anyio.current_time() - started
    if stats is not None:
        stats.ok += status == "ok"
        stats.failed += status == "error"
        stats.timed_out += status == "timeout"
    await _report(s, agent, claim, status, error, duration)
    event = TickEvent(
        agent.key,
        "success" if status == "ok" else "failure",
        claim.scheduled_at,
        s.worker_id,
        status,
        error,
        duration,
    )
    await notify(agent.on_success if status == "ok" else agent.on_failure, event)
    return status


async def _report(
    s: TickHost, agent: Agent, claim: Claim, status: str, error: str | None, duration: float
) -> None:
    """Record the outcome and close this claim, in one write by `_id` (the engine's fast path).
    Unsetting this claim's own key in `open` leaves overlapping ticks' claims alone."""
    outcome: Doc = {
        "last_status": status,
        "last_error": error,
        "last_duration_s": round(duration, 6),
        "last_finished_at": s.clock.now(),
        "drift_s": round(claim.drift_s, 6),
        "last_scheduled_at": claim.scheduled_at,
        "last_run_at": claim.claimed_at,
        "last_worker": s.worker_id,
    }
    try:
        with anyio.CancelScope(shield=True):
            await s.coll.update_one(
                {"_id": agent.key}, {"$set": outcome, "$unset": {f"open.{claim.claim_id}": ""}}
            )
    except PyMongoError as e:
        log.warning("agent %s: could not record the tick outcome: %s", agent.key, e)
