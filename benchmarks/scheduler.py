"""Benchmark the MongoDB-only scheduler on the embedded engine.

1. Claim latency with 10, 1,000 and 10,000 scheduled agents: a won claim (the agent is due:
   read its schedule document, then one conditional ``find_one_and_update`` on what was read)
   and a missed one (not due: the read alone). The worker loop passes the read of its scan, so
   there a won claim is the update alone.
2. Ticks per second with 1 worker and with 4 workers (separate processes, each with its own
   client) racing over the same always-due agents, plus a check that no (agent, due time)
   ran twice.

Results are printed as markdown and written to benchmarks/RESULTS.md under ``## scheduler``
(only that section is replaced).

    python benchmarks/scheduler.py [--sizes 10,1000,10000] [--claims 200] [--agents 200] [--seconds 10]
                                   [--workers 4] [--repeat 3] [--no-write]

3. ``--fleet``: instead, the fleet loop of this version against the previous one (a git revision,
   default the merge base with main) in the same run: scan cost with nothing due, claims/s and
   lag at 1,000 and 5,000 agents (see scheduler_fleet.py); written under ``## scheduler fleet``.

    python benchmarks/scheduler.py --fleet [--fleet-sizes 1000,5000] [--fleet-seconds 15]
                                   [--fleet-scans 5] [--baseline REV] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from lib.results import RESULTS, write_section  # benchmarks/lib/results.py, beside this script
from lib.scheduler_fleet import (  # benchmarks/lib/scheduler_fleet.py
    main_fleet,
    render_fleet,
    upsert_schedules,
)
from pymongo import AsyncMongoClient

from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import SchedulerSettings
from mongogate.db import EmbeddedEngine
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.core import Scheduler

Client = AsyncMongoClient[dict[str, Any]]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --------------------------------------------------------------------------- claim latency


async def seed(client: Client, db_name: str, n: int, due: set[int]) -> float:
    """n schedule documents, `due` ones overdue and the rest an hour out; returns seconds taken."""
    coll = client[db_name]["agent_schedule"]
    now = SYSTEM_CLOCK.now()
    later, earlier = now + timedelta(hours=1), now - timedelta(seconds=1)
    started = time.perf_counter()
    await upsert_schedules(
        coll, n, lambda j: {"next_run_at": earlier if j in due else later, "interval_s": 3600.0, "ticks": 0}
    )
    return time.perf_counter() - started


async def noop(ctx: TickContext) -> None:
    return None


async def bench_claims(uri: str, sizes: list[int], claims: int) -> list[dict[str, Any]]:
    client: Client = AsyncMongoClient(uri, tz_aware=True)
    rows: list[dict[str, Any]] = []
    try:
        for n in sizes:
            db_name = f"bench_claim_{n}"
            await client.drop_database(db_name)
            k = min(claims, n)
            rng = random.Random(n)
            due = set(rng.sample(range(n), k))
            seed_s = await seed(client, db_name, n, due)
            agents = [Agent(f"agent-{j:05d}", noop, 3600) for j in range(n)]
            s = Scheduler(client[db_name], agents, SchedulerSettings(jitter_max_s=0), "bench")
            await s.ensure_indexes()
            idle = next(j for j in range(n) if j not in due) if len(due) < n else None
            for _ in range(10):  # warm up the connection and the engine's caches
                await s.claim(agents[idle]) if idle is not None else await s.status()
            looked: list[float] = []
            for j in sorted(due):  # the claim's lookup alone, on the same index
                t = time.perf_counter()
                found = await s.coll.find_one(
                    {"agent_key": agents[j].key, "next_run_at": {"$lte": SYSTEM_CLOCK.now()}}
                )
                looked.append((time.perf_counter() - t) * 1000)
                assert found is not None
            won: list[float] = []
            for j in sorted(due):
                t = time.perf_counter()
                claim = await s.claim(agents[j])
                won.append((time.perf_counter() - t) * 1000)
                assert claim is not None
            missed: list[float] = []
            for j in sorted(due):  # the same agents again: now not due, the claim matches nothing
                t = time.perf_counter()
                assert await s.claim(agents[j]) is None
                missed.append((time.perf_counter() - t) * 1000)
            rows.append(
                {
                    "agents": n,
                    "claims": k,
                    "seed_s": seed_s,
                    "lookup_p50": statistics.median(looked),
                    "won_p50": statistics.median(won),
                    "won_p95": pct(won, 0.95),
                    "missed_p50": statistics.median(missed),
                    "missed_p95": pct(missed, 0.95),
                }
            )
            print(f"  claims with {n} agents: p50 {rows[-1]['won_p50']:.2f} ms (seeded in {seed_s:.1f} s)")
            await client.drop_database(db_name)
    finally:
        await client.close()
    return rows


# --------------------------------------------------------------------------- ticks per second


def _worker_process(args: tuple[str, str, int, int, float]) -> dict[str, Any]:
    uri, db_name, index, n_agents, seconds = args
    return asyncio.run(_worker(uri, db_name, index, n_agents, seconds))


async def _worker(uri: str, db_name: str, index: int, n_agents: int, seconds: float) -> dict[str, Any]:
    ran: list[tuple[str, str]] = []

    async def tick(ctx: TickContext) -> None:
        ran.append((ctx.agent_key, ctx.scheduled_at.isoformat()))

    # Always due: the interval is shorter than a pass over the agents, so throughput is the limit.
    agents = [Agent(f"agent-{j:04d}", tick, 0.05) for j in range(n_agents)]
    client: Client = AsyncMongoClient(uri, tz_aware=True)
    try:
        s = Scheduler(
            client[db_name], agents, SchedulerSettings(jitter_max_s=0, idle_sleep_s=0.05), f"w{index}"
        )
        stats = await s.run(duration_s=seconds)
    finally:
        await client.close()
    return {"claimed": stats.claimed, "missed": stats.lost, "ran": ran}


async def _prepare(uri: str, db_name: str, n_agents: int) -> None:
    client: Client = AsyncMongoClient(uri, tz_aware=True)
    try:
        await client.drop_database(db_name)
        agents = [Agent(f"agent-{j:04d}", noop, 0.05) for j in range(n_agents)]
        s = Scheduler(client[db_name], agents, SchedulerSettings(jitter_max_s=0), "prepare")
        await s.ensure_indexes()
        await s.register(now=SYSTEM_CLOCK.now() - timedelta(seconds=1))
    finally:
        await client.close()


def bench_throughput(uri: str, workers: int, n_agents: int, seconds: float) -> dict[str, Any]:
    db_name = f"bench_ticks_{workers}"
    asyncio.run(_prepare(uri, db_name, n_agents))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        started = time.perf_counter()
        results = pool.map(_worker_process, [(uri, db_name, i, n_agents, seconds) for i in range(workers)])
        wall = time.perf_counter() - started
    ran = [r for res in results for r in res["ran"]]
    dupes = sum(n - 1 for n in Counter(ran).values() if n > 1)
    claimed = sum(res["claimed"] for res in results)
    missed = sum(res["missed"] for res in results)
    row = {
        "workers": workers,
        "ticks": claimed,
        "ticks_per_s": claimed / seconds,
        "missed": missed,
        "duplicates": dupes,
        "wall_s": wall,
    }
    print(f"  {workers} worker(s): {row['ticks_per_s']:.1f} ticks/s, {missed} lost races, {dupes} duplicates")
    return row


# --------------------------------------------------------------------------- report


def render(
    claims: list[dict[str, Any]],
    ticks: list[dict[str, Any]],
    command: str,
    args: argparse.Namespace,
    total_s: float,
) -> str:
    env = (
        f"Python {platform.python_version()}, pymongo {version('pymongo')}, mongoeco {version('mongoeco')}, "
        f"{platform.system()} {platform.machine()}"
    )
    lines = [
        f"Command: `{command}` ({env}; whole run {total_s:.0f} s).",
        "",
        "Embedded engine (mongoeco on SQLite, in-process on its own thread): absolute numbers are the",
        "engine's, not MongoDB's. The ratios show how the claim scales with the number of agents and",
        "what extra workers buy when the database, not the worker, is the bottleneck.",
        "",
        "### Claim latency",
        "",
        "`claim()` on its own: a `find_one({agent_key})` on the (agent_key, next_run_at) index, then one",
        "conditional `find_one_and_update` on the `next_run_at`/`due_at` it read (fixed-rate slots need",
        "the slot); the worker loop passes its scan's read and skips the first step.",
        f"{args.claims} due agents claimed once (won), then again (missed: not due, the read alone).",
        "",
        "| agents | claims | won p50 ms | won p95 ms | missed p50 ms | missed p95 ms | won p50 vs "
        f"{claims[0]['agents'] if claims else 0:,} | lookup only p50 ms | seeding s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = claims[0]["won_p50"] if claims else 1.0
    for r in claims:
        lines.append(
            f"| {r['agents']:,} | {r['claims']} | {r['won_p50']:.2f} | {r['won_p95']:.2f} | "
            f"{r['missed_p50']:.2f} | {r['missed_p95']:.2f} | {r['won_p50'] / base:.2f}x | "
            f"{r['lookup_p50']:.2f} | {r['seed_s']:.0f} |"
        )
    if len(claims) >= 2:
        first, last = claims[0], claims[-1]
        lines += [
            "",
            f"From {first['agents']:,} to {last['agents']:,} agents the won claim grows "
            f"{last['won_p50'] / first['won_p50']:.1f}x, while `lookup only` (a `find_one` with the claim's",
            f"filter, on the same index) grows {last['lookup_p50'] / first['lookup_p50']:.1f}x: most of the "
            "growth is the engine's write path",
            "(on mongoeco any single-document update gets slower as its collection grows), not the lookup.",
            "Seeding uses bulk upserts in batches of 500 (inserts are slower still on this engine).",
        ]
    seeding = sum(r["seed_s"] for r in claims)
    if seeding > 60:
        lines += [
            f"Seeding took {seeding:.0f} s of the {total_s:.0f} s run; "
            "the sizes are the issue's, not reduced.",
            "`--sizes 10,1000` runs the rest in about a minute.",
        ]
    lines += [
        "",
        "### Ticks per second",
        "",
        f"{args.agents} agents due every 0.05 s (always due), no-op ticks, {args.seconds:g} s per run, runs",
        "alternating between worker counts; each worker is a separate process with its own client.",
        "A tick is a claim plus one outcome write. `lost races` counts claims another worker won",
        "first; `duplicates` counts (agent, due time) pairs that ran more than once (must be 0).",
        "",
        "| workers | run | ticks | ticks/s | lost races | duplicates |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    by_workers: dict[int, list[float]] = {}
    for r in ticks:
        by_workers.setdefault(r["workers"], []).append(r["ticks_per_s"])
        lines.append(
            f"| {r['workers']} | {len(by_workers[r['workers']])} | {r['ticks']} | {r['ticks_per_s']:.1f} | "
            f"{r['missed']} | {r['duplicates']} |"
        )
    if len(by_workers) == 2:
        (w1, one), (wn, many) = sorted(by_workers.items())
        ratio = statistics.median(many) / statistics.median(one)
        lines += [
            "",
            f"Median ticks/s: {w1} worker {statistics.median(one):.1f}, {wn} workers "
            f"{statistics.median(many):.1f}; {wn} vs {w1}: {ratio:.2f}x.",
        ]
        if ratio < 1.5:
            lines += [
                "The embedded engine executes one command at a time, so with no-op ticks the database is",
                "the bottleneck and extra workers mostly add lost races; on a MongoDB deployment claims run",
                "in parallel, and workers add capacity for ticks that take time (I/O, model calls).",
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sizes", default="10,1000,10000", help="scheduled agents per claim run (default 10,1000,10000)"
    )
    p.add_argument("--claims", type=int, default=200, help="timed claims per size (default 200)")
    p.add_argument("--agents", type=int, default=200, help="agents in the ticks/s runs (default 200)")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each ticks/s run (default 10)")
    p.add_argument("--workers", type=int, default=4, help="workers in the second ticks/s run (default 4)")
    p.add_argument("--repeat", type=int, default=3, help="ticks/s runs per worker count (default 3)")
    p.add_argument("--no-write", action="store_true", help=f"print only; do not update {RESULTS.name}")
    p.add_argument("--fleet", action="store_true", help="this version's fleet loop against the previous one")
    p.add_argument("--fleet-sizes", default="1000,5000", help="agents per fleet run (default 1000,5000)")
    p.add_argument("--fleet-seconds", type=float, default=15.0, help="length of each loop run (default 15)")
    p.add_argument("--fleet-scans", type=int, default=5, help="timed scans per version and size (default 5)")
    p.add_argument(
        "--baseline",
        help="git revision of the previous version (default: 7a628699ea, the scheduler before issue 22)",
    )
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    started = time.perf_counter()
    command = "python benchmarks/scheduler.py" + "".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:]))
    if args.fleet:
        with tempfile.TemporaryDirectory() as tmp:
            engine = EmbeddedEngine(Path(tmp))
            uri = engine.start()
            try:
                fleet_sizes = [int(s) for s in args.fleet_sizes.split(",") if s]
                result = main_fleet(uri, fleet_sizes, args.fleet_seconds, args.fleet_scans, args.baseline)
            finally:
                engine.stop()
        env = (
            f"Python {platform.python_version()}, pymongo {version('pymongo')}, "
            f"mongoeco {version('mongoeco')}, {platform.system()} {platform.machine()}"
        )
        body = render_fleet(result, command, args.fleet_seconds, time.perf_counter() - started, env)
        print(body)
        if not args.no_write:
            write_section("scheduler fleet", body)
            print(f"written to {RESULTS} (## scheduler fleet)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            print("claim latency:")
            claims = asyncio.run(bench_claims(uri, sizes, args.claims))
            print("ticks per second:")
            ticks = [
                bench_throughput(uri, w, args.agents, args.seconds)
                for _ in range(args.repeat)
                for w in (1, args.workers)
            ]
        finally:
            engine.stop()
    body = render(claims, ticks, command, args, time.perf_counter() - started)
    print(body)
    if not args.no_write:
        write_section("scheduler", body)
        print(f"written to {RESULTS} (## scheduler)")


if __name__ == "__main__":
    main()
