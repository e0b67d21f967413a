"""The worker loop: scan a bounded batch of due ticks, claim them, run them within the concurrency limit.

Each pass reads a bounded batch in due order (`scan.py`). Documents that cannot be claimed now
(another worker's agent, `max_running` ticks in flight) do not block the ones behind them: when a
whole batch is like that, the next pass starts after it. Due documents of agents no worker
registers are parked.

The loop (`WorkerLoop`) drives the lower pieces it is given: the claim store (`store.ClaimStore`:
registration, claims, parking) and the tick runner (`ticks.TickRunner`). A concurrency slot is
taken and given back only by `async with loop.slot()`, around one claim and the tick it runs, in
a task of its own: no path can keep a slot. Every wait is a sleep on the store's clock that a
stop wakes early; due decisions read the same clock, so a ManualClock drives the loop in tests.
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
from pymongo import ASCENDING
from pymongo.errors import PyMongoError

from mongogate.clock import Clock
from mongogate.errors import StorageError
from mongogate.scheduler import documents as sd
from mongogate.scheduler import fleet
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.capacity import KEEP_UP_SHARE, due_rate
from mongogate.scheduler.events import TickEvent, notify
from mongogate.scheduler.kinds import Every
from mongogate.scheduler.partition import Partition, claiming, partition
from mongogate.scheduler.scan import EPOCH, Scan, park_orphans, scan
from mongogate.scheduler.slots import Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.scheduler.store import ClaimStore
from mongogate.scheduler.ticks import TickRunner
from mongogate.values import Doc

log = logging.getLogger(__name__)

#: how often the loop re-reads which workers claim (the split of the agents)
_SPLIT_EVERY = timedelta(seconds=1)
#: what a claim attempt reports when the loop was stopped while it waited for a slot
_STOPPED = "stopped"


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
        settings = store.settings
        self._slots = anyio.Semaphore(concurrency)
        self.idle = settings.idle_sleep_s
        self.stale_after = max(2, concurrency // 2)
        self.batch = max(4 * concurrency, 64)
        self.heartbeat_every = timedelta(seconds=max(1.0, min(10.0, settings.worker_ttl_s / 4)))
        # Agents split over the claiming workers seen within three heartbeats; another worker's
        # agent is taken once its tick waited as long (`partition`).
        self.takeover_s = 3 * self.heartbeat_every.total_seconds()
        every = (a.schedule.seconds if isinstance(a.schedule, Every) else None for a in store.agents)
        self.due_per_s = due_rate(every)
        self._stop = anyio.Event()
        self._end: datetime | None = None
        self._first_pass = True
        self._last_beat = self.clock.now()
        self._beat_claimed = 0
        self._part: Partition | None = None
        # the split's age in monotonic seconds, not the injectable clock: a clock that stands still
        # (a test's, or a paused VM's) must not freeze a stale split in which every worker leaves an
        # agent to another and none claims it (seen with four workers started on one busy core)
        self._split_at = 0.0
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
        self._last_beat = self.clock.now()
        try:  # a rate: this worker claims (unrecorded, the others only race with it for a while)
            await fleet.heartbeat(self.store.db, worker, self._last_beat, 0.0)
        except StorageError as e:
            log.warning("worker %s: could not record that it claims (%s)", worker, e)
        self._split_at = anyio.current_time()
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
        finally:  # cancelled too (the second signal): the others take this worker's share at once
            with anyio.CancelScope(shield=True), contextlib.suppress(PyMongoError, StorageError):
                await fleet.leave(self.store.db, worker)
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
            await self._beat(now)
            part = await self._split(now)
            found = await scan(self.store, now, self.batch, self._after, part)
            self.stats.scans += 1
            parked, due = await self._due(found, now)
            ready = [
                (a, d)
                for a, d in due
                if part.may_claim(a.key, sd.next_run_at(d), now) and not self.store.busy(a, d, now)
            ]
            self.store.rng.shuffle(ready)  # workers racing over the same backlog collide less
            claimed, lost, raced = await self._claim(tg, ready)
            return self._next_wait(found, now, claimed, lost, parked, raced)
        except (PyMongoError, StorageError) as e:
            log.warning(
                "worker %s: schedule unreachable (%s); retrying in %g s", self.store.worker_id, e, self.idle
            )
            return self.idle

    async def _beat(self, now: datetime) -> None:
        """Every heartbeat interval: this worker's claim rate to the fleet, and the fleet's capacity."""
        if now - self._last_beat < self.heartbeat_every:
            return
        rate = (self.stats.claimed - self._beat_claimed) / max((now - self._last_beat).total_seconds(), 1e-3)
        await fleet.heartbeat(self.store.db, self.store.worker_id, now, rate)
        await self._say_capacity(now)
        self._last_beat, self._beat_claimed = now, self.stats.claimed

    async def _say_capacity(self, now: datetime) -> None:
        """Fleet-wide ticks due/s against run/s, to the metrics; a warning when the fleet is behind
        (its workers run clearly fewer ticks than fall due and the oldest due slot is an interval late)."""
        store = self.store
        known = await fleet.read_fleet(store.db, now, store.settings.worker_ttl_s)
        oldest = await store.coll.find_one(
            {sd.NEXT_RUN_AT: {"$gte": EPOCH, "$lte": now}},
            {sd.DUE_AT: 1},
            sort=[(sd.NEXT_RUN_AT, ASCENDING)],
        )
        at = sd.due_at(oldest) if oldest else None
        every = (a.schedule.seconds for a in store.agents if isinstance(a.schedule, Every))
        fastest = min(every, default=None)
        late = at is not None and fastest is not None and (now - at).total_seconds() > fastest
        behind = late and known.run_per_s < KEEP_UP_SHARE * self.due_per_s
        if self.observer is not None:
            self.observer.capacity(self.due_per_s, known.run_per_s, behind)
        if behind:
            log.warning(
                "worker %s: the fleet cannot keep up on this engine: %.2f ticks due/s, "
                "%.2f run/s by %d worker(s)",
                store.worker_id,
                self.due_per_s,
                known.run_per_s,
                known.live_workers,
            )

    async def _split(self, now: datetime) -> Partition:
        """The split of the agents over the claiming workers. The workers collection is as small as
        the fleet: read it at most once a second, so a worker that joins or leaves moves it at once."""
        if self._part is None or anyio.current_time() - self._split_at >= _SPLIT_EVERY.total_seconds():
            store = self.store
            live = await fleet.read_fleet(store.db, now, store.settings.worker_ttl_s)
            takeover = self.takeover_s
            self._part = partition(store.worker_id, claiming(live.claimers, now, takeover), takeover)
            self._split_at = anyio.current_time()
        return self._part

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
        """How long to wait after this pass, and where the next one starts. A full batch in which
        nothing moved (others' agents, ticks in flight): look behind it next time, so what cannot be
        claimed never hides what can."""
        moved = claimed or lost or parked
        last = found.due[-1] if found.due else None
        stuck = found.full and last is not None and not moved
        self._after = ((sd.next_run_at(last) or now), last[sd.ID]) if stuck and last else None
        if found.due and (found.full or raced) and (moved or self._after is not None):
            # More may be due behind this batch; if others won everything, yield briefly.
            # A batch that was not full held every due document: this worker took its
            # share, so it waits for the next due time (a pass costs a scan of the engine).
            return 0.0 if claimed or parked or self._after is not None else 0.01
        if found.next_at is not None:
            return min(self.idle, max((found.next_at - self.clock.now()).total_seconds(), 0.0))
        return self.idle

    # ---------------------------------------------------------------- claims and ticks

    async def _claim(self, tg: TaskGroup, ready: list[tuple[Agent, Doc]]) -> tuple[int, int, bool]:
        """Claim the ready ticks one after another, each in a task that holds a slot for its claim and
        its tick. Returns the claims won and lost (in a row at the end), and whether this stopped
        early because other workers are draining the same snapshot (`stale_after` lost in a row)."""
        claimed = lost = 0
        for agent, seen in ready:
            if lost >= self.stale_after:
                return claimed, lost, True  # other workers are draining this snapshot: look again
            got = await tg.start(self._take, tg, agent, seen)
            if got == _STOPPED:
                break
            if got is None:
                lost += 1
                self.stats.lost += 1
                continue
            claimed += 1
            lost = 0
        return claimed, lost, False

    async def _take(
        self, tg: TaskGroup, agent: Agent, seen: Doc, *, task_status: TaskStatus[Claim | str | None]
    ) -> None:
        """In a slot: claim the agent's tick (reported to the loop as soon as it is known), then run it."""
        async with self.slot():
            if self.done():
                task_status.started(_STOPPED)
                return
            claim = await self.store.claim(agent, self.clock.now(), seen)
            if claim is not None:
                self._count(tg, agent, claim)
            task_status.started(claim)
            if claim is None or claim.skipped:
                return
            await anyio.lowlevel.checkpoint()  # the loop goes on (and the missed events start) first
            started = anyio.current_time()
            status = await self.ticks.run(agent, claim, self.stats)
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
