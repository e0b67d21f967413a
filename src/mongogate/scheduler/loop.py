"""The worker loop: scan a bounded batch of due ticks, claim them, run them within the concurrency limit.

The scan asks for at most a batch of schedule documents in due order (`next_run_at`, on the
`due_scan` index, with a limit), so its cost follows the batch, not the fleet. Documents that
cannot be claimed now (another worker's agent, `max_running` ticks in flight) do not block the
ones behind them: when a whole batch is like that, the next pass starts after it. A due
document of an agent no worker registers is an orphan and is parked (`next_run_at` null), so
it leaves the scan for good.

Every wait is a sleep on the scheduler's clock that a stop wakes early; due decisions read the
same clock, so a ManualClock drives the whole loop in tests.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio
from pymongo import ASCENDING
from pymongo.errors import PyMongoError

from mongogate.clock import Clock, utc_or_none
from mongogate.errors import StorageError
from mongogate.scheduler import fleet
from mongogate.scheduler.agents import Agent
from mongogate.scheduler.capacity import KEEP_UP_SHARE, due_rate
from mongogate.scheduler.events import TickEvent, notify
from mongogate.scheduler.host import LoopHost, LoopObserver
from mongogate.scheduler.kinds import Every
from mongogate.scheduler.partition import Partition, claiming, partition
from mongogate.scheduler.slots import CLAIM_FIELDS, Claim
from mongogate.scheduler.stats import SchedulerStats
from mongogate.values import Doc

log = logging.getLogger("mongogate.scheduler.core")

#: before any real date: the scan's lower bound, which also leaves out null (parked) documents
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: how often the loop re-reads which workers claim (the split of the agents)
_SPLIT_EVERY = timedelta(seconds=1)


@dataclass
class Scan:
    """One bounded read: due documents (as read), the next due time, and where the next pass starts."""

    due: list[Doc]
    next_at: datetime | None
    full: bool


async def scan(
    s: LoopHost,
    now: datetime,
    batch: int,
    after: tuple[datetime, object] | None,
    part: Partition | None = None,
) -> Scan:
    """At most `batch` documents in (next_run_at, _id) order, from just after `after` or the start.

    With `part`, the documents of the batch not due yet are read on (the batch is sent anyway) so
    that `next_at` is when this worker next has something to claim: its own agent's time, another
    worker's plus the takeover wait. A worker then wakes for its share, not for every due time."""
    filt: Doc = {"next_run_at": {"$gte": _EPOCH}}
    if after is not None:
        at, key = after
        filt = {"$or": [{"next_run_at": {"$gt": at}}, {"next_run_at": at, "_id": {"$gt": key}}]}
    cursor = s.coll.find(
        filt,
        CLAIM_FIELDS,
        sort=[("next_run_at", ASCENDING), ("_id", ASCENDING)],
        limit=batch,
    )
    due: list[Doc] = []
    n = 0
    next_at: datetime | None = None
    async with cursor:
        async for d in cursor:
            n += 1
            when = utc_or_none(d.get("next_run_at"))
            if when is None:
                continue
            if when > now:
                if part is None:
                    return Scan(due, when, full=False)
                key = str(d.get("agent_key", d["_id"]))
                at = when if part.owns(key) else when + timedelta(seconds=part.takeover_s)
                next_at = at if next_at is None else min(next_at, at)
                continue
            due.append(d)
    return Scan(due, next_at, full=n >= batch and len(due) == n)


async def park_orphans(s: LoopHost, docs: list[Doc], now: datetime) -> int:
    """Park due documents of agents that no live worker registers (read fresh: a worker records
    its agents before it creates their documents, so a new agent is never mistaken for one)."""
    known = await fleet.read_fleet(s.db, now, s.settings.worker_ttl_s)
    parked = 0
    for d in docs:
        if known.is_orphan(str(d.get("agent_key", d["_id"]))):
            res = await s.coll.update_one(
                {"_id": d["_id"], "next_run_at": d["next_run_at"]},
                {"$set": {"next_run_at": None, "orphaned_at": now}},
            )
            parked += res.modified_count
    if parked:
        log.warning(
            "worker %s: parked %d schedule document(s) of agents no worker registers "
            "(`mongogate schedule prune` removes them)",
            s.worker_id,
            parked,
        )
    return parked


async def nap(clock: Clock, seconds: float, stop: anyio.Event) -> None:
    """Sleep on the injected clock, waking early when `stop` is set."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await clock.sleep(seconds)
        tg.cancel_scope.cancel()


async def _initial_lag(s: LoopHost, observer: LoopObserver, now: datetime) -> None:
    """A lag series for every registered agent from the start, so one that never runs can be alerted on."""
    seen: dict[str, datetime | None] = {}
    async for d in s.coll.find({}, {"due_at": 1}):
        seen[str(d["_id"])] = utc_or_none(d.get("due_at"))
    for key in [a.key for a in s.agents]:
        due = seen.get(key)
        observer.due(key, (now - due).total_seconds() if due is not None else 0.0)


async def _say_capacity(s: LoopHost, now: datetime, due_per_s: float) -> fleet.Fleet:
    """Fleet-wide ticks due/s against run/s, to the metrics; a warning when the fleet is behind
    (its workers run clearly fewer ticks than fall due and the oldest due slot is an interval late)."""
    known = await fleet.read_fleet(s.db, now, s.settings.worker_ttl_s)
    oldest = await s.coll.find_one(
        {"next_run_at": {"$gte": _EPOCH, "$lte": now}}, {"due_at": 1}, sort=[("next_run_at", ASCENDING)]
    )
    at = utc_or_none(oldest.get("due_at")) if oldest else None
    fastest = min((a.schedule.seconds for a in s.agents if isinstance(a.schedule, Every)), default=None)
    late = at is not None and fastest is not None and (now - at).total_seconds() > fastest
    behind = late and known.run_per_s < KEEP_UP_SHARE * due_per_s
    if s.observer is not None:
        s.observer.capacity(due_per_s, known.run_per_s, behind)
    if behind:
        log.warning(
            "worker %s: the fleet cannot keep up on this engine: %.2f ticks due/s, "
            "%.2f run/s by %d worker(s)",
            s.worker_id,
            due_per_s,
            known.run_per_s,
            known.live_workers,
        )
    return known


async def _set_up(s: LoopHost, stop: anyio.Event) -> bool:
    """Indexes, registration, start-up jitter and the first lag series; False when `stop` came
    first. A stop cancels set-up at its next await (registration included), so SIGTERM is honoured
    at once: every set-up write is idempotent (upserts by `_id`, conditional moves), so a worker
    stopped halfway leaves nothing another worker's registration does not finish."""
    done = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await s.ensure_indexes()
        log.info("worker %s: registering %d agents", s.worker_id, len(s.agents))
        started = s.clock.now()
        await s.register(started)
        # Only what was overdue when registration began: a new agent's first slot is on its own
        # phase (or due at once with spread off), and one that fell due while registering ran
        # long is on time, not a backlog to spread (one conditional write each on this engine).
        await s.jitter_overdue(started)
        if s.observer is not None:
            await _initial_lag(s, s.observer, s.clock.now())
        done = True
        tg.cancel_scope.cancel()
    return done and not stop.is_set()


async def run_loop(s: LoopHost, stop: anyio.Event, duration_s: float | None) -> SchedulerStats:
    """Claim and run due ticks until `stop` is set or `duration_s` passes; running ticks then finish.

    Stopping is cooperative, between claims, so a claimed tick is never abandoned by the loop.
    """
    stats = SchedulerStats()
    observer = s.observer
    if not await _set_up(s, stop):
        log.info("worker %s: stopped during set-up (nothing claimed)", s.worker_id)
        return stats
    # The duration counts from the end of set-up, and the first pass over due ticks always
    # runs: what a short run does never depends on how long set-up took.
    end = None if duration_s is None else s.clock.now() + timedelta(seconds=duration_s)
    first_pass = True
    log.info("worker %s: running %d agents", s.worker_id, len(s.agents))
    slots = anyio.Semaphore(s.concurrency)
    idle = s.settings.idle_sleep_s
    stale_after = max(2, s.concurrency // 2)
    batch = max(4 * s.concurrency, 64)
    heartbeat_every = timedelta(seconds=max(1.0, min(10.0, s.settings.worker_ttl_s / 4)))
    last_beat = s.clock.now()
    beat_claimed = 0
    # Agents split over the claiming workers seen within three heartbeats; another worker's
    # agent is taken once its tick waited as long (`partition`).
    takeover_s = 3 * heartbeat_every.total_seconds()
    try:  # a rate: this worker claims (unrecorded, the others only race with it for a while)
        await fleet.heartbeat(s.db, s.worker_id, last_beat, 0.0)
    except StorageError as e:
        log.warning("worker %s: could not record that it claims (%s)", s.worker_id, e)
    part: Partition | None = None
    # the split's age in monotonic seconds, not the injectable clock: a clock that stands still
    # (a test's, or a paused VM's) must not freeze a stale split in which every worker leaves an
    # agent to another and none claims it (seen with four workers started on one busy core)
    split_at = anyio.current_time()
    due_per_s = due_rate(a.schedule.seconds if isinstance(a.schedule, Every) else None for a in s.agents)
    after: tuple[datetime, object] | None = None

    def left() -> float:
        return math.inf if end is None else (end - s.clock.now()).total_seconds()

    def done() -> bool:
        return stop.is_set() or (not first_pass and left() <= 0)

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

    async def missed(agent: Agent, claim: Claim) -> None:
        """The `missed` events of one claim: passed-over slots, and abandoned earlier claims."""
        if claim.missed_slots:
            status = "misfired" if claim.skipped or not s.coalesce(agent) else "coalesced"
            ev = TickEvent(
                agent.key, "missed", claim.scheduled_at, s.worker_id, status, missed_slots=claim.missed_slots
            )
            await notify(agent.on_missed, ev)
        if claim.abandoned:
            ev = TickEvent(agent.key, "missed", None, s.worker_id, "abandoned", missed_slots=claim.abandoned)
            await notify(agent.on_missed, ev)

    async with anyio.create_task_group() as tg:
        while not done():
            wait = idle
            try:
                now = s.clock.now()
                if now - last_beat >= heartbeat_every:
                    rate = (stats.claimed - beat_claimed) / max((now - last_beat).total_seconds(), 1e-3)
                    await fleet.heartbeat(s.db, s.worker_id, now, rate)
                    await _say_capacity(s, now, due_per_s)
                    last_beat, beat_claimed = now, stats.claimed
                # the workers collection is as small as the fleet: read it at most once a second,
                # so a worker that joins or leaves moves the partition at once
                if part is None or anyio.current_time() - split_at >= _SPLIT_EVERY.total_seconds():
                    live = await fleet.read_fleet(s.db, now, s.settings.worker_ttl_s)
                    part = partition(s.worker_id, claiming(live.claimers, now, takeover_s), takeover_s)
                    split_at = anyio.current_time()
                found = await scan(s, now, batch, after, part)
                stats.scans += 1
                unknown = [d for d in found.due if s.agents.get(str(d.get("agent_key", ""))) is None]
                parked = await park_orphans(s, unknown, now) if unknown else 0
                stats.orphans_parked += parked
                due = [
                    (a, d) for d in found.due if (a := s.agents.get(str(d.get("agent_key", "")))) is not None
                ]
                if observer is not None:
                    for agent, seen in due:
                        if (
                            at := utc_or_none(seen.get("due_at")) or utc_or_none(seen.get("next_run_at"))
                        ) is not None:
                            observer.due(agent.key, (now - at).total_seconds())
                ready = [
                    (a, d)
                    for a, d in due
                    if part.may_claim(a.key, utc_or_none(d.get("next_run_at")), now) and not s.busy(a, d, now)
                ]
                s.rng.shuffle(ready)  # workers racing over the same backlog collide less
                claimed = lost = 0
                raced = False
                for agent, seen in ready:
                    if lost >= stale_after:
                        raced = True
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
                    stats.missed_slots += claim.missed_slots
                    stats.abandoned += claim.abandoned
                    if observer is not None:
                        observer.claimed(agent.key, claim.drift_s, claim.missed_slots)
                        observer.lost_ticks(agent.key, int(claim.skipped), claim.abandoned)
                    if claim.missed_slots or claim.abandoned:
                        tg.start_soon(missed, agent, claim)
                    if claim.skipped:
                        slots.release()
                        stats.misfired += 1
                        continue
                    stats.claimed += 1
                    stats.by_agent[agent.key] = stats.by_agent.get(agent.key, 0) + 1
                    stats.max_drift_s = max(stats.max_drift_s, claim.drift_s)
                    tg.start_soon(tick, agent, claim)
                # A full batch in which nothing moved (others' agents, ticks in flight): look
                # behind it next time, so what cannot be claimed never hides what can.
                moved = claimed or lost or parked
                last = found.due[-1] if found.due else None
                stuck = found.full and last is not None and not moved
                after = ((utc_or_none(last["next_run_at"]) or now), last["_id"]) if stuck and last else None
                if found.due and (found.full or raced) and (moved or after is not None):
                    # More may be due behind this batch; if others won everything, yield briefly.
                    # A batch that was not full held every due document: this worker took its
                    # share, so it waits for the next due time (a pass costs a scan of the engine).
                    wait = 0.0 if claimed or parked or after is not None else 0.01
                elif found.next_at is not None:
                    wait = min(idle, max((found.next_at - s.clock.now()).total_seconds(), 0.0))
            except (PyMongoError, StorageError) as e:
                log.warning("worker %s: schedule unreachable (%s); retrying in %g s", s.worker_id, e, idle)
            first_pass = False
            wait = min(wait, left())
            if wait > 0:
                await nap(s.clock, wait, stop)
            else:
                await anyio.sleep(0)
    with anyio.CancelScope(shield=True), contextlib.suppress(PyMongoError, StorageError):
        await fleet.leave(s.db, s.worker_id)
    log.info(
        "worker %s: stopped after %d ticks (%d failed, %d timed out, %d slots skipped, %d abandoned found)",
        s.worker_id,
        stats.claimed,
        stats.failed,
        stats.timed_out,
        stats.missed_slots,
        stats.abandoned,
    )
    return stats
