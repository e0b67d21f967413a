"""One assembly of a server's services: settings + an open database -> the AppState tools reach;
and of a worker's scheduler: settings + an open database + agents -> the `Scheduler` it runs.

Every service is built here, the same way for every caller: `memory_store`, `long_term_memory`
(with the server's limits and the configured embedder), `checkpoints` and `schedules`, each with
the one clock and the fault hook given. `build_server`'s lifespan (`serve`), `mongogate try
--execute --demo` and `mongogate check` take them all at once (`build_services`); the framework
adapters (`mongogate.langgraph`, `mongogate.openai_agents`) and the commands (`mongogate memory`,
`mongogate schedule`) take the one they use. `build_server` keeps only auth, middleware and the
lifespan (server/app.py). `mongogate worker` runs through `run_worker` here, which builds its
scheduler with `build_scheduler` (the scheduler package is imported only then: `serve`'s start-up
does not pay for it).

Test hooks are arguments (``clock``, ``faults``), never read from the environment: production
code has no switch a stray variable could turn on. Crash and race tests pass them through the
public API (tests/fault_harness.py runs `mongogate` with them in a real process).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from mongogate import audit, memory, recall, runs
from mongogate.audit import AuditLog
from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import Settings
from mongogate.db import Database
from mongogate.errors import NotFound
from mongogate.memory import MemoryStore, MessageSearch, Turns, ensure_search_index
from mongogate.migrations import Migrations
from mongogate.principal import Principal
from mongogate.recall import Embedder, LongTermMemory, make_embedder, path_report
from mongogate.runs import Runs
from mongogate.tools.faults import PROBE_COLLECTION
from mongogate.tools.session_ids import SessionIds, watch
from mongogate.tools.state import AppState
from mongogate.values import Doc

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

    from mongogate.erasure import Declared, ErasureReceipt
    from mongogate.scheduler import Agent, AgentRegistry, LoopObserver, Scheduler, Schedules, WorkerReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Faults:
    """Test hooks, all off by default.

    ``at(point)`` is called at named points between a write and its reply: begin_turn.after_lease,
    append.after_seq, answer.after_commit, answer.after_write, end_turn.after_reply_write,
    remember.after_write, remember.after_link (between a supersession's two halves),
    forget.after_memory; and in an erasure `erase.after_journal:<action>:<collection>` and
    `erase.after_apply:<action>:<collection>` (erasure/sweep.py). Crash tests end the process there
    (tests/fault_harness.py)."""

    at: Callable[[str], None] | None = None


NO_FAULTS = Faults()


def no_caller(ctx: Any) -> Principal:
    """The principal outside a served request (`try`, `check`): there is none."""
    raise NotFound("no caller outside a served request")


def no_scope_check(principal: Principal, scopes: list[str], tool: str) -> None:
    return None


def unwritten_audit(settings: Settings, *, instance: str | None = None) -> AuditLog:
    """An audit log with the server's settings and no stream (`try` seeding and its dry run,
    `check`); `instance` names the process in its events."""
    a = settings.audit
    return AuditLog(
        settings.audit_path,
        redact_values=a.redact_values,
        max_value_chars=a.max_value_chars,
        stream=None,
        instance=instance,
    )


def memory_store(
    settings: Settings, db: AsyncDatabase[Doc], *, clock: Clock = SYSTEM_CLOCK, faults: Faults = NO_FAULTS
) -> MemoryStore:
    """Sessions and messages (`memory/`) over ``db``: the MCP tools' and the OpenAI Agents session's."""
    store = MemoryStore(db, settings.memory, clock)
    store.fault = faults.at
    watch(store)  # every session made or ended moves its scope's completion revision
    return store


def long_term_memory(
    settings: Settings,
    db: AsyncDatabase[Doc],
    *,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
    embedder: Embedder | None = None,
) -> LongTermMemory:
    """Long-term memory (`recall/`) over ``db``, with the server's limits; ``embedder`` one already
    made (else the configured one, which loads when first used)."""
    ltm = LongTermMemory(
        db,
        settings.memory.long_term,
        make_embedder(settings.memory.embedding) if embedder is None else embedder,
        clock,
        limits=settings.limits,
    )
    ltm.fault = faults.at
    return ltm


def message_search(
    settings: Settings, memory: MemoryStore, recall: LongTermMemory, *, background: bool = False
) -> MessageSearch:
    """search_messages over ``memory``'s database: its indexes on long-term memory's index budget
    (one budget for both), ranked by meaning with long-term memory's embedder unless
    `[memory.search] embed_messages` is off; ``background``: derive what each write stores soon
    after it, in this process (a server)."""
    found = settings.memory.search
    floor = settings.memory.long_term.min_score if found.min_score is None else found.min_score
    return MessageSearch(
        memory,
        recall.index.budget,
        recall.embedder if found.embed_messages else None,
        found,
        min_score=floor,
        background=background,
    )


def checkpoints(settings: Settings, db: AsyncDatabase[Doc], *, clock: Clock = SYSTEM_CLOCK) -> Runs:
    """Runs and their checkpoints (`runs/`) over ``db``: the run tools' and the LangGraph saver's."""
    return Runs(db, settings.memory, clock=clock)


def build_services(
    settings: Settings,
    db: Database,
    *,
    audit: AuditLog | None = None,
    principal: Callable[[Any], Principal] = no_caller,
    require_scopes: Callable[[Principal, list[str], str], None] = no_scope_check,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
    background: bool = False,
) -> AppState:
    """The stores over ``db`` (no I/O: nothing is created, the embedder loads when first used);
    ``background``: a server's, whose writes of messages are derived for search soon after
    (`message_search`; `AppState.message_search.aclose` stops that)."""
    memory = memory_store(settings, db.memory, clock=clock, faults=faults)
    recall = long_term_memory(settings, db.memory, clock=clock, faults=faults)
    return AppState(
        settings=settings,
        db=db,
        memory=memory,
        turns=Turns(memory),
        principal=principal,
        require_scopes=require_scopes,
        audit=audit if audit is not None else unwritten_audit(settings),
        runs=checkpoints(settings, db.memory),
        recall=recall,
        message_search=message_search(settings, memory, recall, background=background),
        session_ids=SessionIds.of(memory, clock),
    )


async def ensure_memory_indexes(state: AppState, migrations: Migrations | None = None) -> list[str]:
    """Messages' and long-term memory's indexes and the message search index (idempotent, every
    start); returns which vector path long-term memory runs (recall/search.py `path_report`).
    ``migrations``: the one-time steps done, read once for every service (mongogate/migrations.py)."""
    migrations = migrations or Migrations(state.memory.db)
    # long-term memory first: its older unique indexes are read before the marker is, so a start
    # racing another that drops them and un-records the step sees one or the other (migrations.py)
    await state.recall.ensure_indexes(migrations)
    await state.memory.ensure_indexes(migrations)
    await ensure_search_index(state.memory)
    return await path_report(state.recall)


async def open_services(
    settings: Settings,
    db: Database,
    *,
    audit: AuditLog,
    principal: Callable[[Any], Principal],
    require_scopes: Callable[[Principal, list[str], str], None],
    run_tools: bool,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
) -> AppState:
    """A server's services over an open ``db``, with their indexes (checkpoints' only when run
    tools are served: ``run_tools``); the vector path in the server log."""
    state = build_services(
        settings,
        db,
        audit=audit,
        principal=principal,
        require_scopes=require_scopes,
        clock=clock,
        faults=faults,
        background=True,
    )
    migrations = Migrations(db.memory)  # the marker read once, for every service's steps
    report = await ensure_memory_indexes(state, migrations)
    log.info("%s", report[1])
    for line in (report[0], *report[2:]):
        log.debug("%s", line)
    if run_tools:  # the runs' indexes (and the retiring of an older version's unique one) before any call
        await state.runs.ensure_indexes(migrations)
    return state


def build_scheduler(
    settings: Settings,
    db: Database,
    agents: Iterable[Agent] | AgentRegistry,
    *,
    worker_id: str | None = None,
    concurrency: int | None = None,
    observer: LoopObserver | None = None,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
) -> Scheduler:
    """A worker's scheduler over ``db`` (no I/O): its agents, `scheduler.*`, checkpoints with the
    memory settings, one clock; ``observer`` is what the loop reports to (worker metrics)."""
    from mongogate.scheduler import Scheduler

    scheduler = Scheduler(
        db.memory,
        agents,
        settings.scheduler,
        worker_id,
        concurrency=concurrency,
        rng=rng,
        memory=settings.memory,
        clock=clock,
    )
    scheduler.observer = observer
    return scheduler


def schedules(settings: Settings, db: Database) -> Schedules:
    """The operator's side of the schedule (`mongogate schedule pause|resume|run-now|remove|prune`)."""
    from mongogate.scheduler import Schedules

    return Schedules(db.memory, settings.scheduler.worker_ttl_s)


async def run_worker(
    settings: Settings,
    agents: Iterable[Agent] | AgentRegistry,
    *,
    duration_s: float | None = None,
    status_only: bool = False,
    worker_id: str | None = None,
    stop: anyio.Event | None = None,
    concurrency: int | None = None,
    metrics: LoopObserver | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> WorkerReport:
    """`mongogate worker`: open the database, build the scheduler, run the agents until `stop`,
    `duration_s`, or SIGINT/SIGTERM (`scheduler/worker.py` `run_scheduler`); or only read their status."""
    from mongogate.scheduler import AgentRegistry, require_agents, run_scheduler

    registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
    if not status_only:
        require_agents(registry)
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        await db.ping()
        scheduler = build_scheduler(
            settings,
            db,
            registry,
            worker_id=worker_id,
            concurrency=concurrency,
            observer=None if status_only else metrics,
            clock=clock,
        )
        return await run_scheduler(scheduler, duration_s=duration_s, status_only=status_only, stop=stop)
    finally:
        await db.close()


def erasure_plan() -> tuple[Declared, ...]:
    """What every package stores per tenant and subject (each package's `ERASURE`), in the order
    an erasure takes them: conversations, long-term memory, runs, the scheduler's investigations,
    then the audit trail. A collection a package adds is one line in its own `erase.py`. Imported
    here, not by `serve` (tests/test_lazy.py): the scheduler, the declarations, the sweep."""
    from mongogate.erasure import JOURNAL_KEPT, Declared, Kept
    from mongogate.scheduler import ERASURE as SCHEDULER

    #: what the assembly itself writes: the write probe (tools/faults.py) and the erasures' journal
    assembly = Declared(
        "assembly",
        parts=(),
        kept=(
            Kept(PROBE_COLLECTION, "one document a server writes to learn whether writes work: no tenant"),
            JOURNAL_KEPT,
        ),
    )
    return (memory.ERASURE, recall.ERASURE, runs.ERASURE, SCHEDULER, audit.ERASURE, assembly)


async def erase(
    settings: Settings,
    tenant: str,
    subject: str | None = None,
    *,
    batch: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
    faults: Faults = NO_FAULTS,
) -> ErasureReceipt:
    """`mongogate erase`: every document of `tenant` (or of `subject` within it) removed from every
    mongogate collection, its audit events redacted, and the receipt (docs/security.md, "Erasure").
    Safe while servers serve (long-term memory's coherence is kept: recall/erase.py), resumable
    after a run was killed, idempotent (a second erasure removes 0). Bad names are `InvalidInput`.
    ``batch``: documents per step (None: `erasure.BATCH`)."""
    from mongogate.erasure import BATCH, Sweep, Target

    target = Target.of(tenant, subject)
    batch = BATCH if batch is None else batch
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        await db.ping()
        return await Sweep(db.memory, target, clock=clock, fault=faults.at, batch=batch).run(erasure_plan())
    finally:
        await db.close()
