"""Worker set-up (indexes, registering N new interval agents, start-up jitter): this version
against the previous one (default 031f087, before issue 27), interleaved, each on a fresh database.

    .venv/bin/python benchmarks/scheduler_register.py 1000 [2000 ...] [--rev REV]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.scheduler_fleet import load_previous

from mongogate.config import SchedulerSettings
from mongogate.db import EmbeddedEngine

PREVIOUS = "031f087"


async def noop(ctx: Any) -> None:
    return None


async def set_up(client: Any, version: str, n: int, prev: Any) -> float:
    db = client[f"reg_{version}_{n}"]
    await client.drop_database(db.name)
    if version == "this":
        from mongogate.scheduler import Agent, Scheduler

        s: Any = Scheduler(
            db, [Agent(f"agent-{i:05d}", noop, 60) for i in range(n)], SchedulerSettings(), "w"
        )
        started = s.clock.now()
        t = time.perf_counter()
        await s.ensure_indexes()
        await s.register(started)
        await s.jitter_overdue(started)  # what loop._set_up does
    else:
        agents = importlib.import_module("prev_scheduler.agents")
        s = prev.Scheduler(
            db, [agents.Agent(f"agent-{i:05d}", noop, 60) for i in range(n)], SchedulerSettings(), "w"
        )
        t = time.perf_counter()
        await s.ensure_indexes()
        await s.register()
        await s.jitter_overdue()
    took = time.perf_counter() - t
    await client.drop_database(db.name)
    return took


async def run(uri: str, sizes: list[int], rev: str, previous_up_to: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        prev = load_previous(rev, Path(tmp))
        client: Any = AsyncMongoClient(uri, tz_aware=True)
        try:
            for k, n in enumerate(sizes):
                order = ["previous", "this"] if k % 2 == 0 else ["this", "previous"]
                if n > previous_up_to:
                    print(f"{n} agents: this {await set_up(client, 'this', n, prev):.1f} s", flush=True)
                    continue
                got = {v: await set_up(client, v, n, prev) for v in order}
                print(
                    f"{n} agents: previous {got['previous']:.1f} s, this {got['this']:.1f} s, "
                    f"this/previous {got['this'] / got['previous']:.2f}",
                    flush=True,
                )
        finally:
            await client.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("sizes", nargs="+", type=int)
    p.add_argument("--rev", default=PREVIOUS)
    p.add_argument("--previous-up-to", type=int, default=10**9, help="larger sizes run this version only")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            asyncio.run(run(uri, args.sizes, args.rev, args.previous_up_to))
        finally:
            engine.stop()


if __name__ == "__main__":
    main()
