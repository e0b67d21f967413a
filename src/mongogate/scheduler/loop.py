"""The worker loop: scan a bounded batch of due ticks, claim them in batches, run them within the
concurrency limit.

Each pass reads a bounded batch in due order (`scan.py`). Documents that cannot be claimed now
(another worker's agent, `max_running` ticks in flight) do not block the ones behind them: when a
whole batch is like that, the next pass starts after it. Due documents of agents no worker
registers are parked.

Claims go out in rounds (`claims.py`): a round holds as many concurrency slots as are free
(waiting for the first), and one write claims that many due ticks and records the outcomes of
the ticks that finished since the last write; the won ticks then run in the slots held for them.
After a pass that claimed, the next one starts no sooner than `CLAIM_EVERY_S` after it, so what
falls due meanwhile is claimed together: at 1,000 agents every 60 s a worker sends a scan and a
write a few times a second instead of a claim, an outcome and a scan per tick. A backlog (a
full batch) is drained pass after pass without that wait.

The loop (`WorkerLoop`) drives the lower pieces it is given: the claim store (`store.ClaimStore`:
registration, claims, parking) and the tick runner (`ticks.TickRunner`). A concurrency slot is
taken and given back only by `async with loop.slot()`, in the task that runs the claimed tick
(`_run_claimed`): it holds the slot from before its claim is written until its tick ends, and a
claim that lost, or a write that failed, ends it (no path can keep a slot). Every wait is a sleep
on the store's clock that a stop wakes early; due decisions read the same clock, so a
ManualClock drives the loop in tests.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Protocol

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus
from pymongo.errors import PyMongoError

from mongogate.clock import Clock
from mongogate.errors import StorageError
from mongogate.scheduler import documents as sd
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.claims import Outcomes, Planned
from mongogate.scheduler.events import TickEvent, notify
from mongogate.scheduler.pulse import Pulse
from mongogate.scheduler.scan import Scan, park_orphans, scan
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.store import ClaimStore
from mongogate.scheduler.ticks import TickRunner
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: after a pass that claimed, the next one waits at least this long (what falls due meanwhile is
#: claimed in one write): a quarter of a second of lag at most, for a write per quarter second
#: (0.5 s gave 0.38 commands per tick and lag p50 0.4-0.8 s at 1,000 agents every 60 s; on a busy
#: machine a pass takes about that long anyway: docs/decisions/scheduler-claims.md)
CLAIM_EVERY_S = 0.25


class _Handoff:
    """A slot held for a claim being written: the loop gives it the claim (None: lost) once known."""

    def __init__(self) -> None:
        self._given = anyio.Event()
        self.claim: Claim | None = None

    def give(self, claim: Claim | None) -> None:
        """The first answer counts (a round gives every held slot an answer on every path)."""
        if not self._given.is_set():
            self.claim = claim
            self._given.set()

    async def wait(self) -> Claim | None:
        await self._given.wait()
        return self.claim


class LoopObserver(Protocol):
    """What the loop reports as it goes (`worker_metrics.WorkerMetrics` is one): lag, claims, ticks."""

    def due(self, agent: str, lag_s: float) -> None: ...
    def claimed(self, agent: str, drift_s: float, missed_slots: int) -> None: ...
    def lost_ticks(self, agent: str, misfired: int, abandoned: int) -> None: ...
    def capacity(self, due_per_s: float, run_per_s: float, behind: bool) -> None: ...
    def finished(
        self, agent: str, status: str, seconds: float, next_run_at: datetime | None, now: datetime
    ) -> None: ...


async def nap(clock: Clock, seconds: float, stop: anyio.Event) -> None:
    """Sleep on the injected clock, waking early when `stop` is set."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await clock.sleep(seconds)
        tg.cancel_scope.cancel()


class WorkerLoop:
    """Claim and run due ticks of the store's agents until stopped; `run` once per loop."""

    def __init__(
        self,
        store: ClaimStore,
        ticks: TickRunner,
        *,
        concurrency: int,
        observer: LoopObserver | None = None,
    ) -> None:
        self.store = store
        self.ticks = ticks
        self.observer = observer
        self.clock = store.clock
        self.stats = SchedulerStats()
        #: outcomes of finished ticks, written with the next round's claims (or alone)
        self.outcomes = Outcomes()
        settings = store.settings
        self._slots = anyio.Semaphore(concurrency)
        self.idle = settings.idle_sleep_s
        self.stale_after = max(2, concurrency // 2)
        self.batch = max(4 * concurrency, 64)
        self._stop = anyio.Event()
        self._end: datetime | None = None
        self._first_pass = True
        self.pulse = Pulse(store, None if observer is None else observer.capacity)
        self._after: tuple[datetime, object] | None = None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of `concurrency` slots, held for the block: the only way one is taken or given back."""
        async with self._slots:
            yield

    def left(self) -> float:
        return math.inf if self._end is None else (self._end - self.clock.now()).total_seconds()

    def done(self) -> bool:
        return self._stop.is_set() or (not self._first_pass and self.left() <= 0)

    # ---------------------------------------------------------------- the run

    async def run(self, stop: anyio.Event, duration_s: float | None) -> SchedulerStats:
        """Claim and run due ticks until `stop` is set or `duration_s` passes; running ticks then finish.

        Stopping is cooperative, between claims, so a claimed tick is never abandoned by the loop.
        """
        self._stop = stop
        worker = self.store.worker_id
        if not await self._set_up():
            log.info("worker %s: stopped during set-up (nothing claimed)", worker)
            return self.stats
        # The duration counts from the end of set-up, and the first pass over due ticks always
        # runs: what a short run does never depends on how long set-up took.
        self._end = None if duration_s is None else self.clock.now() + timedelta(seconds=duration_s)
        log.info("worker %s: running %d agents", worker, len(self.store.agents))
        try:  # a rate: this worker claims (unrecorded, the others only race with it for a while)
            await self.pulse.start(self.clock.now())
        except StorageError as e:
            log.warning("worker %s: could not record that it claims (%s)", worker, e)
        try:
            async with anyio.create_task_group() as tg:
                while not self.done():
                    wait = await self._pass(tg)
                    self._first_pass = False
                    wait = min(wait, self.left())
                    if wait > 0:
                        await nap(self.clock, wait, stop)
                    else:
                        await anyio.sleep(0)
        finally:  # cancelled too (the second signal): the finished ticks' outcomes are written and
            # the others take this worker's share at once
            with anyio.CancelScope(shield=True):
                try:
                    await self._flush()
                except StorageError as e:
                    log.warning("worker %s: tick outcomes not recorded (%s)", worker, e)
                with contextlib.suppress(PyMongoError, StorageError):
                    await self.pulse.leave()
        st = self.stats
        log.info(
            "worker %s: stopped after %d ticks (%d failed, %d timed out, %d slots skipped, "
            "%d abandoned found)",
            worker,
            st.claimed,
            st.failed,
            st.timed_out,
            st.missed_slots,
            st.abandoned,
        )
        return st

    async def _set_up(self) -> bool:
        """Indexes, registration, start-up jitter and the first lag series; False when the stop came
        first. A stop cancels set-up at its next await (registration included), so SIGTERM is
        honoured at once: every set-up write is idempotent (upserts by `_id`, conditional moves), so
        a worker stopped halfway leaves nothing another worker's registration does not finish."""
        done = False
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await self._stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            store = self.store
            await store.ensure_indexes()
            await self.ticks.ensure_indexes()
            log.info("worker %s: registering %d agents", store.worker_id, len(store.agents))
            started = self.clock.now()
            await store.register(started)
            # Only what was overdue when registration began: a new agent's first slot is on its own
            # phase (or due at once with spread off), and one that fell due while registering ran
            # long is on time, not a backlog to spread (one conditional write each on this engine).
            await store.jitter_overdue(started)
            if self.observer is not None:
                await self._initial_lag(self.observer, self.clock.now())
            done = True
            tg.cancel_scope.cancel()
        return done and not self._stop.is_set()

    async def _initial_lag(self, observer: LoopObserver, now: datetime) -> None:
        """A lag series for every registered agent from the start, so one that never runs can be
        alerted on."""
        seen: dict[str, datetime | None] = {}
        async for d in self.store.coll.find({}, {sd.DUE_AT: 1}):
            seen[str(d[sd.ID])] = sd.due_at(d)
        for key in [a.key for a in self.store.agents]:
            due = seen.get(key)
            observer.due(key, (now - due).total_seconds() if due is not None else 0.0)

    # ---------------------------------------------------------------- one pass

    async def _pass(self, tg: TaskGroup) -> float:
        """One scan and its claims; returns how long to wait before the next pass."""
        try:
            now = self.clock.now()
            part = await self.pulse.split(now)
            found = await scan(self.store, now, self.batch, self._after, part)
            self.stats.scans += 1
            if self._after is None:
                first = found.due[0] if found.due else None
                self.pulse.oldest = (sd.due_at(first) or sd.next_run_at(first)) if first else None
            await self.pulse.beat(now, self.stats.claimed)
            parked, due = await self._due(found, now)
            ready = [
                (a, d)
                for a, d in due
                if part.may_claim(a.key, sd.next_run_at(d), now)
                and not self.store.busy(a, d, now, self.outcomes.finished(a.key))
            ]
            self.store.rng.shuffle(ready)  # workers racing over the same backlog collide less
            claimed, lost, raced = await self._claim(tg, ready)
            return self._next_wait(found, now, claimed, lost, parked, raced)
        except (PyMongoError, StorageError) as e:
            log.warning(
                "worker %s: schedule unreachable (%s); retrying in %g s", self.store.worker_id, e, self.idle
            )
            return self.idle

    async def _due(self, found: Scan, now: datetime) -> tuple[int, list[tuple[Agent, Doc]]]:
        """Park the due documents of unknown agents; the others with their agent (their lag to the
        observer). Returns how many were parked, and the due (agent, document) pairs."""
        agents = self.store.agents
        unknown = [d for d in found.due if agents.get(str(d.get(sd.AGENT_KEY, ""))) is None]
        parked = await park_orphans(self.store, unknown, now) if unknown else 0
        self.stats.orphans_parked += parked
        due = [(a, d) for d in found.due if (a := agents.get(str(d.get(sd.AGENT_KEY, "")))) is not None]
        if self.observer is not None:
            for agent, seen in due:
                if (at := sd.due_at(seen) or sd.next_run_at(seen)) is not None:
                    self.observer.due(agent.key, (now - at).total_seconds())
        return parked, due

    def _next_wait(
        self, found: Scan, now: datetime, claimed: int, lost: int, parked: int, raced: bool
    ) -> float:
        """How long to wait after this pass, and where the next one starts (`_look_behind`)."""
        moved = bool(claimed or lost or parked)
        self._after = _look_behind(found, now, moved)
        if found.due and (found.full or raced) and (moved or self._after is not None):
            # More may be due behind this batch; if others won everything, yield briefly.
            # A batch that was not full held every due document: this worker took its
            # share, so it waits for the next due time (a pass costs a scan of the engine).
            return 0.0 if claimed or parked or self._after is not None else 0.01
        wait = self.idle
        if found.next_at is not None:
            wait = min(self.idle, max((found.next_at - self.clock.now()).total_seconds(), 0.0))
        if claimed:  # what falls due in the next moments is claimed together, in one write
            wait = max(wait, CLAIM_EVERY_S - (self.clock.now() - now).total_seconds())
        return wait

    # ---------------------------------------------------------------- claims and ticks

    async def _claim(self, tg: TaskGroup, ready: list[tuple[Agent, Doc]]) -> tuple[int, int, bool]:
        """Claim the ready ticks in rounds of one write each (`_round`). Returns the claims won and
        lost, and whether this stopped early because other workers are draining the same snapshot
        (a round lost every claim, `stale_after` lost in all). With nothing to claim, the finished
        ticks' outcomes are written alone."""
        claimed = lost = 0
        wrote = False
        todo = ready
        while todo and not self.done():
            held = await self._hold(tg, todo)
            if not held:
                break  # stopped while waiting for a slot
            todo = todo[len(held) :]
            won, tried = await self._round(tg, held)
            wrote = wrote or tried > 0
            claimed += won
            lost += tried - won
            self.stats.lost += tried - won
            if tried and not won and lost >= self.stale_after:
                return claimed, lost, True  # other workers are draining this snapshot: look again
        if not wrote:
            await self._flush()
        return claimed, lost, False

    async def _hold(self, tg: TaskGroup, todo: list[tuple[Agent, Doc]]) -> list[tuple[_Handoff, Agent, Doc]]:
        """A slot for each of the first ticks of `todo`: as many as are free, waiting for the first
        one only (none when the loop stops meanwhile). Each is held by the task that will run the tick."""
        held: list[tuple[_Handoff, Agent, Doc]] = []
        for agent, seen in todo:
            if held and self._slots.value == 0:
                break
            handoff = await tg.start(self._run_claimed, agent)
            if handoff is None:
                break
            held.append((handoff, agent, seen))
        return held

    async def _round(self, tg: TaskGroup, held: list[tuple[_Handoff, Agent, Doc]]) -> tuple[int, int]:
        """One write: the claims of the held ticks (planned at this moment) and the outcomes waiting,
        then each held slot its answer, on every path (a failed write: none won, the outcomes wait
        for the next one). Returns the claims won and tried."""
        try:
            now = self.clock.now()
            planned: list[tuple[_Handoff, Agent, Planned]] = []
            for handoff, agent, seen in held:
                p = self.store.plan(agent, seen, now, self.outcomes.finished(agent.key))
                if p is not None:
                    planned.append((handoff, agent, p))
            if not planned:
                return 0, 0
            outcomes = self.outcomes.take()
            try:
                won = await self.store.claim_batch([p for _, _, p in planned], outcomes)
            except BaseException:
                self.outcomes.put_back(outcomes)
                raise
            for handoff, agent, p in planned:
                if p.claim.claim_id in won:
                    self._count(tg, agent, p.claim)
                    handoff.give(p.claim)
            return len(won), len(planned)
        finally:
            for handoff, _, _ in held:
                handoff.give(None)

    async def _flush(self) -> None:
        """Write the finished ticks' outcomes that wait (one command), when no claim carries them."""
        outcomes = self.outcomes.take()
        if not outcomes:
            return
        try:
            await self.store.claim_batch([], outcomes)
        except BaseException:
            self.outcomes.put_back(outcomes)
            raise

    async def _run_claimed(self, agent: Agent, *, task_status: TaskStatus[_Handoff | None]) -> None:
        """In a slot, held from before the claim is written: wait for the claim (None: lost), run
        the tick. Reports None at once when the loop was stopped while it waited for the slot."""
        async with self.slot():
            if self.done():
                task_status.started(None)
                return
            handoff = _Handoff()
            task_status.started(handoff)
            claim = await handoff.wait()
            if claim is None or claim.skipped:
                return
            await anyio.lowlevel.checkpoint()  # the loop goes on (and the missed events start) first
            started = anyio.current_time()
            status = await self.ticks.run(agent, claim, self.stats, self.outcomes)
        self._finished(agent, claim, status, anyio.current_time() - started)

    def _count(self, tg: TaskGroup, agent: Agent, claim: Claim) -> None:
        """A won claim to the stats and the observer; its `missed` events to the agent's listener."""
        st = self.stats
        st.missed_slots += claim.missed_slots
        st.abandoned += claim.abandoned
        if self.observer is not None:
            self.observer.claimed(agent.key, claim.drift_s, claim.missed_slots)
            self.observer.lost_ticks(agent.key, int(claim.skipped), claim.abandoned)
        if claim.missed_slots or claim.abandoned:
            tg.start_soon(self._missed, agent, claim)
        if claim.skipped:
            st.misfired += 1
            return
        st.claimed += 1
        st.by_agent[agent.key] = st.by_agent.get(agent.key, 0) + 1
        st.max_drift_s = max(st.max_drift_s, claim.drift_s)

    def _finished(self, agent: Agent, claim: Claim, status: str, seconds: float) -> None:
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
        if self.observer is not None:
            self.observer.finished(agent.key, status, seconds, claim.next_run_at, self.clock.now())

    async def _missed(self, agent: Agent, claim: Claim) -> None:
        """The `missed` events of one claim: passed-over slots, and abandoned earlier claims."""
        worker = self.store.worker_id
        if claim.missed_slots:
            status = "misfired" if claim.skipped or not self.store.coalesce(agent) else "coalesced"
            ev = TickEvent(
                agent.key, "missed", claim.scheduled_at, worker, status, missed_slots=claim.missed_slots
            )
            await notify(agent.on_missed, ev)
        if claim.abandoned:
            ev = TickEvent(agent.key, "missed", None, worker, "abandoned", missed_slots=claim.abandoned)
            await notify(agent.on_missed, ev)


def _look_behind(found: Scan, now: datetime, moved: bool) -> tuple[datetime, object] | None:
    """Where the next scan starts: after a full batch in which nothing moved (others' agents, ticks
    in flight), behind its last document, so what cannot be claimed never hides what can."""
    last = found.due[-1] if found.due else None
    if not found.full or last is None or moved:
        return None
    return (sd.next_run_at(last) or now), last[sd.ID]
