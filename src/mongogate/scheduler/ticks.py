"""Running one claimed tick: under its hard deadline, on a thread when the agent blocks, then its
outcome (written at once through the claim store, or handed to the loop's next batched write)
and the agent's listeners."""

from __future__ import annotations

import logging
from typing import cast

import anyio
import anyio.to_thread
from pymongo.errors import PyMongoError

from mongogate.runs import Runs
from mongogate.scheduler.agents import Agent, BlockingTickFn, TickContext, TickFn
from mongogate.scheduler.claims import Outcomes
from mongogate.scheduler.documents import OutcomeDoc
from mongogate.scheduler.events import TickEvent, notify
from mongogate.scheduler.investigations import Investigations
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.store import ClaimStore

log = logging.getLogger(__name__)


async def _call(agent: Agent, ctx: TickContext) -> None:
    if agent.blocking:
        # A thread cannot be cancelled: at the deadline the tick is reported as timed out and
        # the loop moves on (abandon_on_cancel); the thread finishes on its own.
        fn = cast(BlockingTickFn, agent.tick)
        await anyio.to_thread.run_sync(fn, ctx, abandon_on_cancel=True)
    else:
        await cast(TickFn, agent.tick)(ctx)


class TickRunner:
    """Runs claimed ticks: the tick's context (the database, investigations, runs, the clock),
    its deadline, its outcome in the schedule (`ClaimStore.report`) and its listeners."""

    def __init__(self, store: ClaimStore, investigations: Investigations, runs: Runs) -> None:
        self.store = store
        self.investigations = investigations
        self.runs = runs

    async def ensure_indexes(self) -> None:
        """The indexes of what ticks write: investigations and runs."""
        await self.investigations.ensure_indexes()
        await self.runs.ensure_indexes()

    def context(self, agent: Agent, claim: Claim) -> TickContext:
        s = self.store
        return TickContext(
            agent=agent,
            db=s.db,
            worker_id=s.worker_id,
            scheduled_at=claim.scheduled_at,
            claimed_at=claim.claimed_at,
            next_run_at=claim.next_run_at or claim.scheduled_at,
            drift_s=claim.drift_s,
            investigations=self.investigations,
            runs=self.runs,
            log=log.getChild(agent.key),
            clock=s.clock,
        )

    async def run(
        self,
        agent: Agent,
        claim: Claim,
        stats: SchedulerStats | None = None,
        outcomes: Outcomes | None = None,
    ) -> str:
        """Run one claimed tick under its hard deadline; returns "ok", "error" or "timeout". Never raises.

        The outcome is written at once, or with `outcomes` (the worker loop's) added there for the
        loop's next write, which carries it with the claims of its next pass (`claims.py`)."""
        timeout = self.store.timeout_s(agent)
        ctx = self.context(agent, claim)
        drift = claim.drift_s
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
            log.error(
                "agent %s tick failed (due %s)", agent.key, claim.scheduled_at.isoformat(), exc_info=True
            )
        duration = anyio.current_time() - started
        if stats is not None:
            stats.ok += status == "ok"
            stats.failed += status == "error"
            stats.timed_out += status == "timeout"
        await self._report(agent, claim, status, error, duration, outcomes)
        event = TickEvent(
            agent.key,
            "success" if status == "ok" else "failure",
            claim.scheduled_at,
            self.store.worker_id,
            status,
            error,
            duration,
        )
        await notify(agent.on_success if status == "ok" else agent.on_failure, event)
        return status

    async def _report(
        self,
        agent: Agent,
        claim: Claim,
        status: str,
        error: str | None,
        duration: float,
        outcomes: Outcomes | None,
    ) -> None:
        outcome: OutcomeDoc = {
            "last_status": status,
            "last_error": error,
            "last_duration_s": round(duration, 6),
            "last_finished_at": self.store.clock.now(),
            "drift_s": round(claim.drift_s, 6),
            "last_scheduled_at": claim.scheduled_at,
            "last_run_at": claim.claimed_at,
            "last_worker": self.store.worker_id,
        }
        if outcomes is not None:
            outcomes.add(agent.key, claim.claim_id, outcome)
            return
        try:
            await self.store.report(agent.key, claim, outcome)
        except PyMongoError as e:
            log.warning("agent %s: could not record the tick outcome: %s", agent.key, e)
