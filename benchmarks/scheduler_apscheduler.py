"""mongogate's worker and APScheduler 3.11 at the same time, each on its own embedded engine: ticks/s
and lag p50/p95 per minute for both, with the load average (issue 38).

    .venv/bin/python benchmarks/scheduler_apscheduler.py [--agents 1000] [--interval 60]
        [--seconds 300] [--ahead 45] [--rev REF] [--no-write]

Needs the `bench` extra (`pip install 'mongogate[bench]'`: APScheduler 3.11).

Two engine processes (`mongogate.engine`, one data directory each, the production set-up: a Unix
socket, SCRAM), a mongogate worker process (`Scheduler.run`) and an APScheduler process
(`BackgroundScheduler`, `MongoDBJobStore`, its default pool of 10 threads, `coalesce=True`, no
misfire grace) run side by side. Both hold the same N agents every `interval` seconds on the same
phases (mongogate's stable per-key offset, `kinds.stable_offset_s`, given to APScheduler as each
job's `start_date`), the first slots `ahead` seconds after launch so both finish their set-up
first; each run of each is one `insert_one` into its own engine's `ticks` collection. A tick's lag
is when its body started (wall clock) minus the slot it answers: for mongogate the slot of its
claim (`ctx.scheduled_at`), for APScheduler the newest slot at or before the start (with
`coalesce` it runs for the newest due time). Minutes count from the first slot. The mongogate
worker also counts the commands it sends (all but the ticks' inserts: claims, outcomes, scans,
heartbeats, reads of the fleet, set-up included) against the ticks it ran. `--rev REF` runs the
mongogate side with the scheduler package at a git revision instead of this tree's (the
documents are the same shape; this tree's registration seeds them), to see what a change did.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import command_line, parser, publish

SECTION = "scheduler against APScheduler 3.11, at the same time (issue 38)"
TICKS = "ticks"


def keys(n: int) -> list[str]:
    return [f"agent-{i:05d}" for i in range(n)]


def first_slot(key: str, interval: float, t0: float) -> float:
    """The agent's first slot at or after t0 on its stable phase (what mongogate's registration gives)."""
    from mongogate.scheduler.kinds import Every, stable_offset_s

    at = Every(interval).first_at_offset(datetime.fromtimestamp(t0, UTC), stable_offset_s(key, interval))
    return at.timestamp()


# ---------------------------------------------------------------- the mongogate worker process


async def mongogate_worker(
    uri: str, n: int, interval: float, t0: float, end: float, out: Path, rev: str | None
) -> None:
    from pymongo import AsyncMongoClient
    from pymongo.monitoring import CommandListener

    from mongogate.clock import ManualClock
    from mongogate.config import SchedulerSettings
    from mongogate.scheduler import Agent, Scheduler, TickContext

    running: Any = Scheduler
    make_agent: Any = Agent
    if rev:
        from lib.scheduler_fleet import load_previous

        running = load_previous(rev, Path(tempfile.mkdtemp())).Scheduler
        import prev_scheduler.agents as previous_agents  # type: ignore[import-not-found]

        make_agent = previous_agents.Agent

    class Count(CommandListener):
        """The worker's commands (not the ticks' inserts), and every one that took a second or more."""

        def __init__(self) -> None:
            self.n = 0
            self.slow: list[tuple[float, str, object, float]] = []
            self.what: dict[int, str] = {}

        def started(self, event: Any) -> None:
            name, target = event.command_name, event.command.get(event.command_name)
            if target != TICKS and name != "endSessions":
                self.n += 1
            statements = len(event.command.get("updates", []))
            self.what[event.request_id] = f"{name} {target}" + (f" x{statements}" if statements else "")

        def succeeded(self, event: Any) -> None:
            what = self.what.pop(event.request_id, event.command_name)
            if event.duration_micros >= 1_000_000:
                self.slow.append((time.time(), what, None, round(event.duration_micros / 1e6, 2)))

        def failed(self, event: Any) -> None:
            self.what.pop(event.request_id, None)

    records: list[tuple[str, float, float, float]] = []

    async def tick(ctx: TickContext) -> None:
        started = time.time()
        await ctx.db[TICKS].insert_one({"agent": ctx.agent_key, "slot": ctx.scheduled_at, "at": started})
        records.append((ctx.agent_key, ctx.scheduled_at.timestamp(), started, ctx.claimed_at.timestamp()))

    count = Count()
    client: Any = AsyncMongoClient(uri, tz_aware=True, event_listeners=[count])
    try:
        db = client["bench"]
        agents = [Agent(k, tick, interval) for k in keys(n)]
        settings = SchedulerSettings(jitter_max_s=0, spread=True)
        seed = Scheduler(db, agents, settings, "seed", clock=ManualClock(datetime.fromtimestamp(t0, UTC)))
        await seed.ensure_indexes()
        await seed.register()  # first slots on each key's phase, from t0
        count.n = 0
        worker = running(db, [make_agent(k, tick, interval) for k in keys(n)], settings, "mongogate")
        stats = await worker.run(duration_s=end - time.time())
    finally:
        await client.close()
    out.write_text(
        json.dumps(
            {
                "ticks": records,
                "commands": count.n,
                "claimed": stats.claimed,
                "lost": stats.lost,
                "slow": count.slow,
            }
        )
    )


# ---------------------------------------------------------------- the APScheduler process

_APS: dict[str, Any] = {"records": [], "lock": threading.Lock()}


def aps_tick(key: str, first: float, interval: float) -> None:
    """One APScheduler run: its slot is the newest at or before its start (`coalesce` runs that one)."""
    started = time.time()
    slot = first + math.floor((started - first) / interval) * interval
    _APS["ticks"].insert_one({"agent": key, "slot": slot, "at": started})
    with _APS["lock"]:
        _APS["records"].append((key, slot, started))


def aps_worker(uri: str, n: int, interval: float, t0: float, end: float, out: Path) -> None:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.mongodb import MongoDBJobStore
    from apscheduler.schedulers.background import BackgroundScheduler
    from pymongo import MongoClient

    client: Any = MongoClient(uri, tz_aware=True)
    _APS["ticks"] = client["bench"][TICKS]
    scheduler = BackgroundScheduler(
        jobstores={"default": MongoDBJobStore(database="bench", collection="jobs", client=client)},
        executors={"default": ThreadPoolExecutor(10)},
        job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
        timezone=UTC,
    )
    scheduler.start(paused=True)
    for key in keys(n):
        first = first_slot(key, interval, t0)
        start = datetime.fromtimestamp(first, UTC)
        scheduler.add_job(
            aps_tick, "interval", seconds=interval, start_date=start, id=key, args=[key, first, interval]
        )
    scheduler.resume()
    time.sleep(max(0.0, end - time.time()))
    scheduler.shutdown(wait=True)  # the client closes with the process: the scheduler's thread may still read
    with _APS["lock"]:
        out.write_text(json.dumps({"ticks": _APS["records"]}))


# ---------------------------------------------------------------- the driver


def engine(data_dir: Path) -> str:
    """An engine process of its own for `data_dir`; its URI (with credentials)."""
    from mongogate.engine.client import lease

    held = lease(data_dir, idle_stop_s=3600)
    held.release()
    return held.uri


def pct(xs: list[float], q: int) -> float:
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def minutes(ticks: list[list[Any]], t0: float, interval: float, count: int) -> list[tuple[int, list[float]]]:
    """Per minute from t0: how many ticks started in it, and their lags."""
    rows = []
    for m in range(count):
        lo, hi = t0 + m * interval, t0 + (m + 1) * interval
        lags = [started - slot for _, slot, started, *_ in ticks if lo <= started < hi]
        rows.append((len(lags), lags))
    return rows


def report(
    mg: dict[str, Any], aps: dict[str, Any], loads: list[tuple[float, float]], t0: float, args: Any
) -> str:
    interval = args.interval
    count = int(args.seconds // interval)
    mg_rows = minutes(mg["ticks"], t0, interval, count)
    aps_rows = minutes(aps["ticks"], t0, interval, count)
    lines = [
        f"Command: `{command_line('scheduler_apscheduler.py', None)}`  ",
        f"mongogate: {'the scheduler at ' + args.rev if args.rev else 'this tree'}. "
        f"{args.agents} agents every {interval:g} s ({args.agents / interval:.1f} ticks due/s) on each side; "
        "each tick one `insert_one`; each scheduler in its own process on its own engine process.",
        "",
        "| minute | load 1 min | mongogate ticks/s | lag p50 s | lag p95 s | APScheduler ticks/s | "
        "lag p50 s | lag p95 s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in range(count):
        lo, hi = t0 + m * interval, t0 + (m + 1) * interval
        load = [v for at, v in loads if lo <= at < hi]
        (mn, ml), (an, al) = mg_rows[m], aps_rows[m]
        lines.append(
            f"| {m + 1} | {max(load, default=float('nan')):.1f} | {mn / interval:.2f} | {pct(ml, 50):.2f} | "
            f"{pct(ml, 95):.2f} | {an / interval:.2f} | {pct(al, 50):.2f} | {pct(al, 95):.2f} |"
        )
    last = slice(max(0, count - 2), count)
    mg_n = sum(n for n, _ in mg_rows[last])
    aps_n = sum(n for n, _ in aps_rows[last])
    mg_p95 = pct([x for _, lags in mg_rows[last] for x in lags], 95)
    aps_p95 = pct([x for _, lags in aps_rows[last] for x in lags], 95)
    bound = max(5.0, 1.5 * aps_p95)
    ratio = mg_n / aps_n if aps_n else float("nan")
    lines += [
        "",
        f"Last two minutes: mongogate {mg_n / (2 * interval):.2f} ticks/s against APScheduler's "
        f"{aps_n / (2 * interval):.2f} ({ratio:.2f}x; target >= 0.95x: "
        f"{'met' if ratio >= 0.95 else 'NOT met'}); "
        f"lag p95 {mg_p95:.2f} s against {aps_p95:.2f} s (target <= max(5 s, 1.5x) = {bound:.2f} s: "
        f"{'met' if mg_p95 <= bound else 'NOT met'}).  ",
        f"mongogate's worker: {mg['commands']} commands for {mg['claimed']} ticks "
        f"({mg['commands'] / max(mg['claimed'], 1):.2f} per tick: claims, outcomes, scans, heartbeats, "
        f"fleet reads and its set-up), {mg['lost']} claims lost.  ",
        f"Load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}.",
    ]
    waits = sorted((started - claimed, claimed - slot) for _, slot, started, claimed in mg["ticks"])
    if waits:
        worst = waits[-1]
        lines[-1] += (
            f"  \nmongogate's lag, split: claimed after its slot p95 {pct([w[1] for w in waits], 95):.2f} s, "
            f"started after its claim p95 {pct([w[0] for w in waits], 95):.2f} s (worst {worst[0]:.2f} s); "
            f"{len(mg['slow'])} worker command(s) of 1 s or more"
            + (f": {', '.join(f'{x[1]} {x[3]} s' for x in mg['slow'][:6])}" if mg["slow"] else "")
            + "."
        )
    return "\n".join(lines) + "\n"


def run(args: Any) -> str:
    root = Path(tempfile.mkdtemp(prefix="mg-vs-aps-"))
    from mongogate.engine.client import stop

    dirs = {name: root / name for name in ("mongogate", "apscheduler")}
    uris = {name: engine(d) for name, d in dirs.items()}
    t0 = time.time() + args.ahead
    end = t0 + args.seconds
    outs = {name: root / f"{name}.json" for name in dirs}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    argv = [str(args.agents), str(args.interval), str(t0), str(end)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, name, uris[name], *argv, str(outs[name]), args.rev or ""], env=env
        )
        for name in dirs
    ]
    loads: list[tuple[float, float]] = []
    print(f"load average before: {os.getloadavg()}; first slots in {args.ahead:g} s", flush=True)
    try:
        while any(p.poll() is None for p in procs):
            loads.append((time.time(), os.getloadavg()[0]))
            time.sleep(5)
        if any(p.returncode for p in procs):
            raise SystemExit(f"a scheduler process failed: {[p.returncode for p in procs]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for d in dirs.values():
            stop(d)
    mg = json.loads(outs["mongogate"].read_text())
    aps = json.loads(outs["apscheduler"].read_text())
    return report(mg, aps, loads, t0, args)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("mongogate", "apscheduler"):
        name, uri, n, interval, t0, end, out, rev = sys.argv[1:9]
        if name == "mongogate":
            run_mg = mongogate_worker(
                uri, int(n), float(interval), float(t0), float(end), Path(out), rev or None
            )
            asyncio.run(run_mg)
        else:
            aps_worker(uri, int(n), float(interval), float(t0), float(end), Path(out))
        return
    p = parser(__doc__)
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--interval", type=float, default=60.0)
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--ahead", type=float, default=45.0, help="seconds from launch to the first slots")
    p.add_argument("--rev", help="run the mongogate side with the scheduler at this git revision")
    args = p.parse_args()
    publish(SECTION, run(args), not args.no_write)


if __name__ == "__main__":
    main()
