"""Scheduler lag and throughput on 1 and 3 worker processes, this version against a previous one
(default bc6dfd9), interleaved; and the time to the first tick of a fresh fleet.

    .venv/bin/python benchmarks/scheduler_workers.py lag --agents 1000 --seconds 90 [--rev REV]
    .venv/bin/python benchmarks/scheduler_workers.py first-tick --agents 5000 --workers 3

The embedded engine runs in this process (its own thread); every worker is its own process
running `Scheduler.run` of one version, so workers race in the database as a fleet does. `lag`:
per round, a fresh database seeded with N agents every 60 s whose slots start 20 s ahead (spread
over the minute by the stable offset, with this version's writes for both versions: the
documents are the same shape), then 1 or 3 workers of one version for S seconds. Each tick
records how late it was claimed after its slot (drift). Ticks/s and due/s are over the window in
which ticks fell due: from the earliest seeded slot (about 20 s after seeding, read back from the
database) to the moment the last worker stopped; "due" counts the slots of every agent inside that
window, so ticks < due means slots not run (or coalesced) by the end.
`first-tick`: a fresh database, W workers started at once with N new agents; the time from
spawning them to the first tick (set-up, registration included), and to the last worker's set-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.scheduler_fleet import load_previous

from mongogate.clock import ManualClock
from mongogate.config import SchedulerSettings
from mongogate.db import EmbeddedEngine

PREVIOUS = "bc6dfd9"
INTERVAL_S = 60.0
SETTINGS: dict[str, Any] = {"jitter_max_s": 0.0, "spread": True}


def keys(n: int) -> list[str]:
    return [f"agent-{i:05d}" for i in range(n)]


# ---------------------------------------------------------------- one worker process


async def worker(
    uri: str, db_name: str, n: int, seconds: float, out: Path, wid: str, prev: str | None
) -> None:
    if prev:
        core: Any = load_previous(prev, Path(tempfile.mkdtemp()))
        import prev_scheduler.agents as agents_mod  # type: ignore[import-not-found]
    else:
        from mongogate.scheduler import agents as agents_mod
        from mongogate.scheduler import core
    lines: list[str] = []

    async def tick(ctx: Any) -> None:
        lines.append(
            json.dumps(
                {
                    "agent": ctx.agent_key,
                    "slot": ctx.scheduled_at.isoformat(),
                    "drift_s": ctx.drift_s,
                    "wall": time.time(),
                }
            )
        )
        if len(lines) == 1:
            out.with_suffix(".first").write_text(str(time.time()))

    client: Any = AsyncMongoClient(uri, tz_aware=True)
    try:
        agents = [agents_mod.Agent(k, tick, INTERVAL_S) for k in keys(n)]
        s = core.Scheduler(client[db_name], agents, SchedulerSettings(**SETTINGS), wid)
        stats = await s.run(duration_s=seconds)
    finally:
        await client.close()
    ended = time.time()
    lines.append(
        json.dumps(
            {"stats": {"claimed": stats.claimed, "lost": stats.lost, "scans": stats.scans, "ended": ended}}
        )
    )
    out.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- the driver


async def seed(uri: str, db_name: str, n: int, ahead_s: float) -> list[float]:
    """Register N agents whose slots start `ahead_s` from now; their first slots (epoch seconds)."""
    from mongogate.scheduler import Agent, Scheduler
    from mongogate.scheduler.documents import DUE_AT, SCHEDULE_COLLECTION

    async def noop(ctx: Any) -> None:
        return None

    client: Any = AsyncMongoClient(uri, tz_aware=True)
    try:
        await client.drop_database(db_name)
        at = ManualClock(datetime.now(UTC) + timedelta(seconds=ahead_s))
        s = Scheduler(
            client[db_name],
            [Agent(k, noop, INTERVAL_S) for k in keys(n)],
            SchedulerSettings(**SETTINGS),
            "seed",
            clock=at,
        )
        await s.ensure_indexes()
        await s.register()
        docs = await client[db_name][SCHEDULE_COLLECTION].find({}, {DUE_AT: 1}).to_list()
        return [d[DUE_AT].timestamp() for d in docs]
    finally:
        await client.close()


def due_window(firsts: list[float], stats: list[dict[str, Any]]) -> tuple[float, int]:
    """The seconds from the earliest first slot to the last worker's stop, and the slots due in it."""
    end = max(s["ended"] for s in stats)
    start = min(firsts)
    due = sum(int((end - f) // INTERVAL_S) + 1 for f in firsts if f <= end)
    return end - start, due


def spawn(
    uri: str, db_name: str, n: int, seconds: float, tmp: Path, workers: int, prev: str | None
) -> list[Path]:
    outs = [tmp / f"{db_name}-w{k}.jsonl" for k in range(workers)]
    procs = []
    for k, out in enumerate(outs):
        cmd = [
            sys.executable,
            __file__,
            "worker",
            uri,
            db_name,
            str(n),
            str(seconds),
            str(out),
            f"w{k}",
            prev or "",
        ]
        procs.append(
            subprocess.Popen(
                cmd, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
            )
        )
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"worker exited {p.returncode}")
    return outs


def read(outs: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ticks: list[dict[str, Any]] = []
    stats: list[dict[str, Any]] = []
    for out in outs:
        for line in out.read_text().splitlines():
            d = json.loads(line)
            (stats if "stats" in d else ticks).append(d.get("stats", d))
    return ticks, stats


def pct(xs: list[float], q: int) -> float:
    return (
        statistics.quantiles(xs, n=100, method="inclusive")[q - 1]
        if len(xs) > 1
        else (xs[0] if xs else float("nan"))
    )


def lag(uri: str, n: int, seconds: float, rev: str, rounds: int, versions: list[str]) -> None:
    tmp = Path(tempfile.mkdtemp())
    print(f"load average before: {os.getloadavg()}", flush=True)
    cols = ["round", "version", "workers", "due window s", "due", "ticks", "due/s", "ticks/s"]
    cols += ["drift p50 s", "drift p95 s", "drift max s", "lost races", "dup ticks"]
    print("| " + " | ".join(cols) + " |")
    print("|---:|---|" + "---:|" * (len(cols) - 2))
    order = [(v, w) for v, w in [("previous", 1), ("this", 1), ("this", 3), ("previous", 3)] if v in versions]
    for r in range(rounds):
        for version, workers in order if r % 2 == 0 else list(reversed(order)):
            db_name = f"lag_{version}_{workers}_{r}"
            firsts = asyncio.run(seed(uri, db_name, n, ahead_s=20))
            outs = spawn(uri, db_name, n, seconds, tmp, workers, rev if version == "previous" else None)
            ticks, stats = read(outs)
            drifts = [t["drift_s"] for t in ticks]
            dups = sum(c - 1 for c in Counter((t["agent"], t["slot"]) for t in ticks).values())
            lost = sum(s["lost"] for s in stats)
            window, due = due_window(firsts, stats)
            print(
                f"| {r + 1} | {version} | {workers} | {window:.0f} | {due} | {len(ticks)} | "
                f"{due / window:.1f} | {len(ticks) / window:.1f} | "
                f"{pct(drifts, 50):.3f} | {pct(drifts, 95):.3f} | {max(drifts, default=0):.3f} | "
                f"{lost} | {dups} |",
                flush=True,
            )
            asyncio.run(drop(uri, db_name))
    print(f"load average after: {os.getloadavg()}", flush=True)


async def drop(uri: str, db_name: str) -> None:
    client: Any = AsyncMongoClient(uri)
    try:
        await client.drop_database(db_name)
    finally:
        await client.close()


def first_tick(uri: str, n: int, workers: int, rev: str | None) -> None:
    tmp = Path(tempfile.mkdtemp())
    db_name = f"first_{n}_{workers}"
    asyncio.run(drop(uri, db_name))
    print(f"load average before: {os.getloadavg()}", flush=True)
    started = time.time()
    outs = spawn(uri, db_name, n, 5.0, tmp, workers, rev)
    firsts = [float(o.with_suffix(".first").read_text()) for o in outs if o.with_suffix(".first").exists()]
    ticks, _ = read(outs)
    dups = sum(c - 1 for c in Counter((t["agent"], t["slot"]) for t in ticks).values())
    print(
        f"{n} agents, {workers} workers ({'previous ' + rev if rev else 'this'}): first tick "
        f"{min(firsts) - started:.1f} s after spawning, "
        f"every worker ticking by {max(firsts) - started:.1f} s; "
        f"{len(ticks)} ticks in the 5 s after set-up, {dups} duplicates",
        flush=True,
    )
    print(f"load average after: {os.getloadavg()}", flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        uri, db_name, n, seconds, out, wid, prev = sys.argv[2:9]
        asyncio.run(worker(uri, db_name, int(n), float(seconds), Path(out), wid, prev or None))
        return
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["lag", "first-tick"])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=90)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rev", default=PREVIOUS)
    p.add_argument("--previous", action="store_true", help="first-tick: run the previous version")
    p.add_argument("--versions", default="previous,this", help="lag: which versions to run")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            if args.mode == "lag":
                lag(uri, args.agents, args.seconds, args.rev, args.rounds, args.versions.split(","))
            else:
                first_tick(uri, args.agents, args.workers, args.rev if args.previous else None)
        finally:
            engine.stop()


if __name__ == "__main__":
    main()
