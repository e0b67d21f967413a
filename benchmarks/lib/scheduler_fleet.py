"""The fleet loop, this version against the previous one in the same run (`scheduler.py --fleet`).

For each fleet size: one database with N schedule documents (interval 60 s, slots spread evenly
over the interval), shared by both versions. Before every run one pipeline update resets every
document to the same starting point, so each version starts from the same state. Measured:

- scan cost with nothing due (the loop's read of the schedule; the previous version reads the
  whole collection, this one a bounded batch), interleaved, median of repeats;
- a worker loop run for S seconds: claims/s, how late ticks were claimed after their slot
  (drift p50/p95/max) and how far behind the schedule is at the end (the oldest unclaimed slot).
  The worker's set-up (indexes, registering N agents) runs before the reset and is not timed.

The previous version is the scheduler package at a git revision (default: the merge base with
main), copied to a temporary directory under another package name, so both run in one process.
"""

from __future__ import annotations

import asyncio
import importlib
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from lib.gitref import package_at
from pymongo import AsyncMongoClient, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import SchedulerSettings

Client = AsyncMongoClient[dict[str, Any]]
ROOT = Path(__file__).resolve().parents[2]
INTERVAL_S = 60.0
SEED_BATCH = 500


#: the scheduler before issue 22 (unbounded scan, findAndModify claim): what the fleet figures
#: in RESULTS.md compare against. Since issue 22 is on main, a merge base with main is this
#: version itself, whose loop has no `upcoming`; pass --baseline REV to compare other versions.
PREVIOUS_REV = "7a628699ea"


def load_previous(rev: str, into: Path) -> ModuleType:
    """The scheduler package at `rev`, importable as `prev_scheduler` (imports rewritten)."""
    package_at(
        rev, "src/mongogate/scheduler", "prev_scheduler", into, [("mongogate.scheduler", "prev_scheduler")]
    )
    return importlib.import_module("prev_scheduler.core")


async def noop(ctx: Any) -> None:
    return None


async def _none(*args: Any, **kwargs: Any) -> int:
    return 0


async def upsert_schedules(
    coll: AsyncCollection[dict[str, Any]], n: int, fields: Callable[[int], dict[str, Any]]
) -> None:
    """Schedule documents ``agent-00000`` to ``agent-<n-1>``, document ``j`` with ``fields(j)``.

    Upserts, not insert_many: on the embedded engine an insert scans the collection for
    duplicate ids, so seeding 10,000 documents with inserts takes far longer than with upserts.
    """
    for i in range(0, n, SEED_BATCH):
        ops = [
            UpdateOne(
                {"_id": f"agent-{j:05d}"},
                {"$setOnInsert": {"agent_key": f"agent-{j:05d}", **fields(j)}},
                upsert=True,
            )
            for j in range(i, min(n, i + SEED_BATCH))
        ]
        await coll.bulk_write(ops, ordered=False)


async def seed(client: Client, db_name: str, n: int) -> float:
    coll = client[db_name]["agent_schedule"]
    started = time.perf_counter()
    step_ms = INTERVAL_S * 1000 / n
    every = {"interval_s": INTERVAL_S, "schedule": f"every {INTERVAL_S:g}s", "kind": "every", "ticks": 0}
    await upsert_schedules(coll, n, lambda j: {"offset_ms": int(j * step_ms), **every})
    await coll.create_index([("next_run_at", 1), ("_id", 1)], name="due_scan")
    await coll.create_index([("next_run_at", 1)], name="next_run")
    await coll.create_index([("agent_key", 1), ("next_run_at", 1)], name="agent_next_run")
    return time.perf_counter() - started


#: how long the last reset took: the next one starts its slots that much later, so the loop
#: does not begin with a backlog made by the reset itself (one update of every document)
_reset_s: dict[str, float] = {}


async def reset(client: Client, db_name: str, start_in_s: float) -> None:
    """Every slot at start + offset (spread over one interval); no claims open."""
    t = time.perf_counter()
    start = SYSTEM_CLOCK.now() + timedelta(seconds=start_in_s + _reset_s.get(db_name, 0.0))
    at = {"$add": [start, "$offset_ms"]}
    await client[db_name]["agent_schedule"].update_many(
        {},
        [
            {"$set": {"next_run_at": at, "due_at": at}},
            {"$unset": ["open", "running", "finished_claim", "orphaned_at", "paused"]},
        ],
    )
    _reset_s[db_name] = time.perf_counter() - t


async def scan_cost(client: Client, db_name: str, n: int, prev: ModuleType, reps: int) -> dict[str, float]:
    """Median ms of one scan with nothing due (everything an hour ahead), the two versions interleaved."""
    from mongogate.scheduler.agents import Agent
    from mongogate.scheduler.core import Scheduler
    from mongogate.scheduler.scan import scan

    prev_loop = importlib.import_module("prev_scheduler.loop")
    prev_agents = importlib.import_module("prev_scheduler.agents")
    await reset(client, db_name, 3600)
    db = client[db_name]
    new = Scheduler(db, [Agent(f"agent-{j:05d}", noop, INTERVAL_S) for j in range(n)], SchedulerSettings())
    old = prev.Scheduler(
        db, [prev_agents.Agent(f"agent-{j:05d}", noop, INTERVAL_S) for j in range(n)], SchedulerSettings()
    )
    batch = max(4 * new.concurrency, 64)
    times: dict[str, list[float]] = {"previous": [], "this": []}
    for _ in range(reps):
        now = SYSTEM_CLOCK.now()
        t = time.perf_counter()
        await prev_loop.upcoming(old, now, batch)
        times["previous"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await scan(new.store, now, batch, None)
        times["this"].append((time.perf_counter() - t) * 1000)
    return {k: statistics.median(v) for k, v in times.items()}


async def loop_run(
    client: Client, db_name: str, n: int, version: str, prev: ModuleType, seconds: float
) -> dict[str, Any]:
    drifts: list[float] = []

    async def tick(ctx: Any) -> None:
        drifts.append(ctx.drift_s)

    db = client[db_name]
    settings = SchedulerSettings(jitter_max_s=0, idle_sleep_s=1.0)
    if version == "this":
        from mongogate.scheduler.agents import Agent
        from mongogate.scheduler.core import Scheduler

        s: Any = Scheduler(
            db, [Agent(f"agent-{j:05d}", tick, INTERVAL_S) for j in range(n)], settings, "bench"
        )
    else:
        prev_agents = importlib.import_module("prev_scheduler.agents")
        agents = [prev_agents.Agent(f"agent-{j:05d}", tick, INTERVAL_S) for j in range(n)]
        s = prev.Scheduler(db, agents, settings, "bench")
    # Set-up (indexes, registering N agents: one read of the whole schedule) happens once here,
    # before the reset, so the timed run measures the loop alone, from the same starting point.
    await s.ensure_indexes()
    await s.register()
    s.ensure_indexes = s.register = s.jitter_overdue = _none
    if version == "this":  # the loop calls its lower pieces
        s.store.ensure_indexes = s.store.register = s.store.jitter_overdue = s.ticks.ensure_indexes = _none
    await reset(client, db_name, 0.5)
    started = time.perf_counter()
    stats = await s.run(duration_s=seconds)
    wall = time.perf_counter() - started
    now = SYSTEM_CLOCK.now()
    oldest = await db["agent_schedule"].find_one(
        {"due_at": {"$lte": now}}, {"due_at": 1}, sort=[("due_at", 1)]
    )
    behind = (now - oldest["due_at"]).total_seconds() if oldest else 0.0
    ordered = sorted(drifts) or [0.0]
    return {
        "agents": n,
        "version": version,
        "claims": stats.claimed,
        "due": int(n * seconds / INTERVAL_S),
        "claims_per_s": stats.claimed / seconds,
        "drift_p50": ordered[len(ordered) // 2],
        "drift_p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "drift_max": ordered[-1],
        "behind_s": behind,
        "wall_s": wall,
    }


async def run_fleet(uri: str, sizes: list[int], seconds: float, reps: int, rev: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        prev = load_previous(rev, Path(tmp))
        client: Client = AsyncMongoClient(uri, tz_aware=True)
        rows: list[dict[str, Any]] = []
        scans: list[dict[str, Any]] = []
        seeding: dict[int, float] = {}
        try:
            for k, n in enumerate(sizes):
                db_name = f"bench_fleet_{n}"
                await client.drop_database(db_name)
                seeding[n] = await seed(client, db_name, n)
                print(f"  {n} agents seeded in {seeding[n]:.0f} s", flush=True)
                scans.append({"agents": n, **await scan_cost(client, db_name, n, prev, reps)})
                print(f"  scan with nothing due: {scans[-1]}", flush=True)
                order = ["previous", "this"] if k % 2 == 0 else ["this", "previous"]
                for version in order:
                    rows.append(await loop_run(client, db_name, n, version, prev, seconds))
                    r = rows[-1]
                    print(
                        f"  {n} agents, {version}: {r['claims_per_s']:.1f} claims/s, "
                        f"drift p95 {r['drift_p95']:.3f} s, {r['behind_s']:.1f} s behind",
                        flush=True,
                    )
                await client.drop_database(db_name)
        finally:
            await client.close()
    return {"rows": rows, "scans": scans, "seeding": seeding, "rev": rev}


def render_fleet(result: dict[str, Any], command: str, seconds: float, total_s: float, env: str) -> str:
    rev = result["rev"][:10]
    lines = [
        f"Command: `{command}` ({env}; whole run {total_s:.0f} s; previous version = {rev}).",
        "",
        "Both versions in one process against one embedded engine (mongoeco on SQLite, its own thread),",
        "on the same seeded database, reset before each run; absolute numbers are the engine's. The",
        "machine is shared with other agents' test runs (2 cores, load average well above 2), so the",
        "runs are short and the comparison is what counts, not the absolute figures.",
        "",
        "### Scan for due ticks with nothing due (median ms)",
        "",
        "| agents | previous | this | this vs previous |",
        "|---:|---:|---:|---:|",
    ]
    for r in result["scans"]:
        lines.append(
            f"| {r['agents']:,} | {r['previous']:.1f} | {r['this']:.1f} | {r['this'] / r['previous']:.2f}x |"
        )
    lines += [
        "",
        f"### Worker loop, {seconds:g} s per run (agents every {INTERVAL_S:g} s, slots spread evenly)",
        "",
        "`due` is how many slots came due during the run; `behind` is how far the oldest unclaimed",
        "slot lags at the end (0: the worker kept up).",
        "",
        "| agents | version | due | claims | claims/s | drift p50 s | drift p95 s | drift max s | behind s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['agents']:,} | {r['version']} | {r['due']} | {r['claims']} | {r['claims_per_s']:.1f} | "
            f"{r['drift_p50']:.3f} | {r['drift_p95']:.3f} | {r['drift_max']:.3f} | {r['behind_s']:.1f} |"
        )
    seeding = ", ".join(f"{n:,}: {s:.0f} s" for n, s in result["seeding"].items())
    lines += ["", f"Seeding (bulk upserts, once per size, shared by both versions): {seeding}."]
    return "\n".join(lines) + "\n"


def main_fleet(uri: str, sizes: list[int], seconds: float, reps: int, rev: str | None) -> dict[str, Any]:
    return asyncio.run(run_fleet(uri, sizes, seconds, reps, rev or PREVIOUS_REV))
