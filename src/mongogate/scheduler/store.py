"""The claim store: one worker's writes to the schedule collection, and the per-agent rules they follow.

Each agent has one schedule document (`documents.ScheduleDoc`): `due_at` (the slot the next
tick answers), `next_run_at` (when it may be claimed: the slot, later after start-up jitter,
now after `schedule run-now`, null while paused, orphaned or done) and `open` (the claims
whose tick has not reported, by claim id, each with its worker and deadline). Claiming is one
conditional update on the `next_run_at` and `due_at` a worker read, so of all the workers that
see a tick due exactly one wins it; the same update advances the schedule, adds the claim to
`open`, and removes (and counts as abandoned) open claims whose deadline and grace passed.

The store registers the worker's agents, spreads an overdue backlog at start-up, claims ticks,
records their outcomes and parks orphans. It knows nothing of the loop that drives it
(`loop.WorkerLoop`) nor of how a tick runs (`ticks.TickRunner`).
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta

import anyio
from pymongo import ASCENDING, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.clock import Clock, truncate_ms
from mongogate.config import SchedulerSettings
from mongogate.errors import StorageError
from mongogate.scheduler import claims, fleet, writes
from mongogate.scheduler import documents as sd
from mongogate.scheduler.agents import Agent, AgentRegistry
from mongogate.scheduler.kinds import Every, stable_offset_s
from mongogate.scheduler.slots import Claim, jitter_bound, live_and_expired, new_claim_id, plan
from mongogate.values import Doc

#: schedule documents written per bulk request (register, jitter)
_BULK = 500
#: what register reads of every schedule document
_REGISTER_FIELDS = {sd.SCHEDULE: 1, sd.INTERVAL_S: 1, sd.DUE_AT: 1, sd.NEXT_RUN_AT: 1, sd.PAUSED: 1}
_REGISTER_FIELDS |= {sd.ORPHANED_AT: 1}

log = logging.getLogger(__name__)


class ClaimStore:
    """One worker's side of the schedule collection: registration, claims, outcomes, parking."""

    def __init__(
        self,
        db: AsyncDatabase[Doc],
        agents: AgentRegistry,
        settings: SchedulerSettings,
        worker_id: str,
        *,
        rng: random.Random,
        clock: Clock,
    ) -> None:
        self.db = db
        self.agents = agents
        self.settings = settings
        self.worker_id = worker_id
        self.rng = rng
        self.clock = clock
        self.coll: AsyncCollection[Doc] = db[sd.SCHEDULE_COLLECTION]

    # ---------------------------------------------------------------- per-agent rules

    def timeout_s(self, agent: Agent) -> float:
        return agent.timeout_s or self.settings.tick_timeout_s

    def grace_s(self, agent: Agent) -> float | None:
        return agent.misfire_grace_s or self.settings.misfire_grace_s

    def coalesce(self, agent: Agent) -> bool:
        return agent.coalesce if agent.coalesce is not None else self.settings.catch_up == "skip"

    def max_running(self, agent: Agent) -> int:
        return agent.max_running or self.settings.max_running

    def busy(self, agent: Agent, doc: Doc, now: datetime, finished: frozenset[str] = frozenset()) -> bool:
        """Whether `max_running` ticks of this agent are in flight (by the document as read, not
        counting `finished`: claims whose tick ended here, their outcome not written yet)."""
        live, _ = live_and_expired(doc, now)
        return len(set(live) - finished) >= self.max_running(agent)

    # ---------------------------------------------------------------- set-up

    async def ensure_indexes(self) -> None:
        try:
            # Serves the claim lookup: one agent's document, only when due.
            await self.coll.create_index(
                [(sd.AGENT_KEY, ASCENDING), (sd.NEXT_RUN_AT, ASCENDING)], name="agent_next_run"
            )
            # Serves the loop's bounded scan: a batch of documents in due order (ties by key).
            await self.coll.create_index([(sd.NEXT_RUN_AT, ASCENDING), (sd.ID, ASCENDING)], name="due_scan")
        except PyMongoError as e:
            raise StorageError(f"could not create scheduler indexes: {e}") from e

    async def register(self, now: datetime | None = None) -> int:
        """Record this worker's agents, then one schedule document per agent (`_id` = key).

        A new interval agent is due at its phase (`first_slot`), a cron agent at its first slot,
        a one-off at its time. Writes only what is missing or changed, in the shapes the embedded
        engine serves flat: one read of the schedule, the missing documents inserted in batches by
        their `_id` (a duplicate is another worker's insert: already there), each changed one
        updated by `_id` alone, conditional on what was read. So the cost is linear in the number
        of agents, and restarting a fleet costs one read. A changed schedule of another kind
        starts over at its first slot; an interval change keeps the current slot. An orphan that
        is registered again is un-parked. Returns the number of schedule documents written.
        """
        now = now or self.clock.now()
        await fleet.announce(self.db, self.worker_id, self.agents.keys(), now)
        try:
            stored = {d[sd.ID]: d async for d in self.coll.find({}, _REGISTER_FIELDS)}
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        new = [self._new_doc(a, now) for a in self.agents if a.key not in stored]
        changed = [
            op for a in self.agents if a.key in stored and (op := self._change_op(a, stored[a.key], now))
        ]
        await self._insert(new)
        await self._bulk(changed, "register agents")
        return len(new) + len(changed)

    def first_slot(self, a: Agent, now: datetime) -> datetime:
        """A new agent's first slot: an interval agent's on its own phase (`Agent.offset_s`, else a
        stable hash of its key when `scheduler.spread`), so agents sharing an interval are spread
        over it instead of all falling due at once; other kinds at their own first slot."""
        sched = a.schedule
        if isinstance(sched, Every) and (a.offset_s is not None or self.settings.spread):
            offset = a.offset_s if a.offset_s is not None else stable_offset_s(a.key, sched.seconds)
            return sched.first_at_offset(now, offset)
        return sched.first(now)

    def _fields(self, a: Agent) -> Doc:
        sched = a.schedule
        interval = sched.seconds if isinstance(sched, Every) else None
        return {sd.SCHEDULE: sched.spec, sd.KIND: sched.kind, sd.INTERVAL_S: interval}

    def _new_doc(self, a: Agent, now: datetime) -> Doc:
        first = self.first_slot(a, now)
        doc: sd.ScheduleDoc = {
            "_id": a.key,
            "agent_key": a.key,
            "next_run_at": first,
            "due_at": first,
            "created_at": now,
            "open": {},
            "ticks": 0,
            "missed_slots": 0,
            "misfired": 0,
            "abandoned": 0,
        }
        return {**doc, **self._fields(a)}

    def _change_op(self, a: Agent, d: Doc, now: datetime) -> UpdateOne | None:
        sched = a.schedule
        old = d.get(sd.SCHEDULE)
        legacy_same = old is None and isinstance(sched, Every) and d.get(sd.INTERVAL_S) == sched.seconds
        sets: Doc = {}
        unset: tuple[str, ...] = ()
        if old != sched.spec and not legacy_same:
            sets.update(self._fields(a))
            was_interval = old is None or str(old).startswith("every ")
            if not (isinstance(sched, Every) and was_interval):
                first = self.first_slot(a, now)  # another kind of schedule starts over at its first slot
                sets[sd.DUE_AT] = first
                sets[sd.NEXT_RUN_AT] = None if d.get(sd.PAUSED) else first
        elif old is None:
            sets.update(self._fields(a))  # a document from before schedule kinds: record the spec
        if d.get(sd.ORPHANED_AT) is not None:
            unset = (sd.ORPHANED_AT,)  # registered again: back on the schedule
            if sd.NEXT_RUN_AT not in sets and not d.get(sd.PAUSED):
                sets[sd.NEXT_RUN_AT] = d.get(sd.DUE_AT)
        if not sets and not unset:
            return None
        # by `_id` alone, conditional on what was read, so it never races a claim (a claim moves
        # next_run_at)
        ok = writes.unchanged(d, sd.NEXT_RUN_AT)
        return UpdateOne({sd.ID: a.key}, writes.when(ok, writes.literals(sets), unset))

    async def _insert(self, docs: list[Doc]) -> None:
        """Insert new schedule documents in batches; one that exists is another worker's: kept."""
        for i in range(0, len(docs), _BULK):
            try:
                await self.coll.insert_many(docs[i : i + _BULK], ordered=False)
            except BulkWriteError as e:
                errors = e.details.get("writeErrors", [])
                if not errors or any(err.get("code") != 11000 for err in errors):
                    raise StorageError(f"could not register agents: {e}") from e
            except PyMongoError as e:
                raise StorageError(f"could not register agents: {e}") from e

    async def _bulk(self, ops: list[UpdateOne], what: str) -> None:
        for i in range(0, len(ops), _BULK):
            try:
                await self.coll.bulk_write(ops[i : i + _BULK], ordered=False)
            except PyMongoError as e:
                raise StorageError(f"could not {what}: {e}") from e

    async def jitter_overdue(self, now: datetime | None = None) -> int:
        """Spread overdue ticks over a random delay, so a restart does not fire the whole backlog
        at once. The delay is at most `jitter_max_s` and never reaches the agent's next slot (that
        slot would be lost) nor its misfire grace (the run would be skipped).

        Only `next_run_at` moves: `due_at` keeps the slot, so status shows the real lag. Each
        move is conditional on the value read, so workers starting together do not stack jitter.
        """
        if self.settings.jitter_max_s <= 0 or not len(self.agents):
            return 0
        now = now or self.clock.now()
        ops: list[UpdateOne] = []
        try:
            async for d in self.coll.find({sd.NEXT_RUN_AT: {"$lte": now}}, sd.CLAIM_FIELDS):
                agent = self.agents.get(d[sd.ID])
                if agent is None or d.get(sd.RUN_NOW):
                    continue
                slot = sd.due_at(d) or sd.next_run_at(d) or now
                bound = jitter_bound(
                    self.settings.jitter_max_s, agent.schedule, slot, now, self.grace_s(agent)
                )
                at = truncate_ms(now + timedelta(seconds=self.rng.uniform(0, bound)))
                ok = writes.unchanged(d, sd.NEXT_RUN_AT)
                moved = writes.literals({sd.NEXT_RUN_AT: at, sd.DUE_AT: slot})
                ops.append(UpdateOne({sd.ID: d[sd.ID]}, writes.when(ok, moved)))
        except PyMongoError as e:
            raise StorageError(f"could not read the schedule: {e}") from e
        await self._bulk(ops, "spread overdue ticks")
        if ops:
            log.info(
                "worker %s: spread %d overdue agents over at most %g s (each before its next slot)",
                self.worker_id,
                len(ops),
                self.settings.jitter_max_s,
            )
        return len(ops)

    # ---------------------------------------------------------------- claims

    async def claim(self, agent: Agent, now: datetime | None = None, seen: Doc | None = None) -> Claim | None:
        """Take the agent's due tick; None if it is not due, `max_running` ticks are in flight,
        or another worker won. A claim whose due slots were all past the misfire grace comes
        back with `skipped` (the slots are counted, nothing runs).

        `seen` is the schedule document as the caller last read it; without it the document is
        read first. The write matches only that read, so one worker wins. The loop claims a
        batch at a time (`claim_batch`); this is a batch of one."""
        now = now or self.clock.now()
        try:
            doc = seen or await self.coll.find_one({sd.ID: agent.key}, sd.CLAIM_FIELDS)
        except PyMongoError as e:
            raise StorageError(f"could not read agent {agent.key!r}: {e}") from e
        planned = self.plan(agent, doc, now) if doc is not None else None
        if planned is None:
            return None
        won = await self.claim_batch([planned], [])
        return planned.claim if won else None

    def plan(
        self, agent: Agent, doc: Doc, now: datetime, finished: frozenset[str] = frozenset()
    ) -> claims.Planned | None:
        """The claim of the agent's due tick as read in `doc`, and its conditional write; None if it
        is not due or `max_running` ticks are in flight (not counting `finished`: claims whose tick
        ended here and whose outcome goes out in the same write, before this claim)."""
        ready = sd.next_run_at(doc)
        if ready is None or ready > now or self.busy(agent, doc, now, finished):
            return None
        claim, fields, unset = self._claim_update(agent, doc, ready, now, finished)
        ok = writes.unchanged(doc, sd.NEXT_RUN_AT, sd.DUE_AT)
        return claims.Planned(str(doc[sd.ID]), claim, writes.when(ok, fields, unset, fail=True))

    async def claim_batch(
        self, planned: list[claims.Planned], outcomes: list[claims.Outcome]
    ) -> frozenset[str]:
        """Write `outcomes` and the `planned` claims in one command (`claims.write`); the ids of the
        claims that won. Raises StorageError when the command fails."""
        won = await claims.write(self.coll, planned, outcomes)
        for p in planned:
            if p.claim.claim_id in won:
                self._log_won(p.key, p.claim)
        return won

    def _log_won(self, key: str, claim: Claim) -> None:
        if claim.abandoned:
            log.warning(
                "agent %s: %d claimed tick(s) abandoned (no outcome by deadline + grace: the worker died)",
                key,
                claim.abandoned,
            )
        if claim.skipped:
            log.info("agent %s: %d slot(s) past the misfire grace skipped", key, claim.missed_slots)
        elif claim.missed_slots:
            log.info("agent %s: skipped %d missed slot(s) to catch up", key, claim.missed_slots)

    def _claim_update(
        self, agent: Agent, doc: Doc, ready: datetime, now: datetime, finished: frozenset[str]
    ) -> tuple[Claim, Doc, tuple[str, ...]]:
        """The claim, its fields as pipeline expressions (`writes.claim_fields`: the schedule, one
        open claim, counters only when they move) and the fields it removes."""
        slot = sd.due_at(doc)
        paused = bool(doc.get(sd.PAUSED))
        manual = bool(doc.get(sd.RUN_NOW))
        if manual:  # an operator's run-now: an extra tick now; the schedule's own slots are kept
            run: datetime | None = ready
            nxt_due, missed, misfired = slot, 0, 0
        else:
            p = plan(agent.schedule, slot or ready, now, self.coalesce(agent), self.grace_s(agent))
            run, nxt_due, missed, misfired = p.run, p.next, p.missed, p.misfired
        _, expired = live_and_expired(doc, now)
        expired = {k: v for k, v in expired.items() if k not in finished}  # their outcome is on its way
        answered = run or slot or ready
        deadline = truncate_ms(now + timedelta(seconds=self.timeout_s(agent)))
        claim = Claim(
            scheduled_at=answered,
            claimed_at=now,
            next_run_at=nxt_due,
            deadline=deadline,
            claim_id=new_claim_id(answered),
            missed_slots=missed,
            skipped=run is None,
            manual=manual,
            abandoned=len(expired),
        )
        sets: Doc = {sd.NEXT_RUN_AT: None if paused else nxt_due, sd.DUE_AT: nxt_due}
        inc: dict[str, int] = {}
        open_add: tuple[str, Doc] | None = None
        if run is not None:
            entry = sd.open_claim_doc(self.worker_id, run, now, deadline)
            open_add = (claim.claim_id, dict(entry))
            inc[sd.TICKS] = 1
        if missed:
            inc[sd.MISSED_SLOTS] = missed
        if misfired:
            inc[sd.MISFIRED] = misfired
        if expired:
            inc[sd.ABANDONED] = len(expired)
            sets[sd.LAST_ABANDONED] = max(expired.items())[1]
        unset = (sd.RUN_NOW,) if manual else ()
        fields = writes.claim_fields(sets, inc, open_add, sorted(expired))
        return claim, fields, unset

    # ---------------------------------------------------------------- outcomes and orphans

    async def report(self, key: str, claim: Claim, outcome: sd.OutcomeDoc) -> None:
        """Record a tick's outcome and close its claim, in one write by `_id` (the engine's fast
        path), shielded from cancellation. Unsetting this claim's own key in `open` leaves
        overlapping ticks' claims alone."""
        with anyio.CancelScope(shield=True):
            await self.coll.update_one({sd.ID: key}, writes.outcome(claim.claim_id, outcome))

    async def park(self, docs: list[Doc], now: datetime) -> int:
        """Park these due documents (out of the scan for good) unless they moved since read."""
        parked = 0
        for d in docs:
            res = await self.coll.update_one(
                {sd.ID: d[sd.ID], sd.NEXT_RUN_AT: d[sd.NEXT_RUN_AT]},
                {"$set": {sd.NEXT_RUN_AT: None, sd.ORPHANED_AT: now}},
            )
            parked += res.modified_count
        return parked
