"""Recall's call path against a baseline checkout, interleaved (issue 41: no slower).

One embedded engine in its own process on its Unix socket (as `mongogate serve` leases it: the
write signal is on), one database per size filled as benchmarks/recall_index.py fills it (N
memories in one scope, the revision naming the last 256). Two server processes over it, each a
`benchmarks/lib/recall_worker.py` with PYTHONPATH at a checkout's `src`: this tree, and the
baseline (`--base`, e.g. a checkout of eb042db: `git clone . /tmp/base && git -C /tmp/base
checkout eb042db`). Each round asks each server for one settled recall (the same question, no
write in between), in a shuffled order, after warm-up rounds; medians and their ratio per size,
and the median of each round's ratio (the two calls of a round ran under the same load).
Only one server works at a time, so the two never share the CPU.

Run: `.venv/bin/python benchmarks/recall_vs_base.py --base /tmp/base/src 1000 10000 --rounds 200`.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from pymongo import AsyncMongoClient

from mongogate.engine import client as engine_client
from mongogate.recall.embedding import LocalEmbedder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import command_line, parser, publish
from recall_index import fill

from memory import loadavg  # beside this script

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
QUESTION = "when is the invoice for the garden due?"


class Worker:
    """One server process (`lib/recall_worker.py`) with mongogate from `src`."""

    def __init__(self, src: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "lib" / "recall_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, cmd: dict[str, Any]) -> Any:
        stdin: IO[str] | None = self.proc.stdin
        stdout: IO[str] | None = self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(cmd) + "\n")
        stdin.flush()
        reply = json.loads(stdout.readline())
        if isinstance(reply, str) and reply.startswith("error"):
            raise RuntimeError(reply)
        return reply

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


async def seed(uri: str, db: str, size: int) -> None:
    """`size` memories of tenant acme in `db`: one remembered (the stored shape), the rest filled."""
    from mongogate.config import load_settings
    from mongogate.db import Database
    from mongogate.recall import LongTermMemory, MemoryScope, make_embedder

    settings = load_settings(None, database={"uri": uri, "name": db})
    database = Database(settings.database, settings.server.data_dir)
    await database.open()
    try:
        embedder = make_embedder(settings.memory.embedding)
        ltm = LongTermMemory(database.memory, settings.memory.long_term, embedder)
        await ltm.ensure_indexes()
        await ltm.remember(MemoryScope("acme"), "Order ORD-58213 was shipped by DHL on Monday.")
    finally:
        await database.close()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
    template = await client[db]["memories"].find_one({})
    assert template is not None
    await fill(client[db]["memories"], template, "acme", size - 1, LocalEmbedder())
    await client.close()


def one_size(workers: dict[str, Worker], rounds: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in workers}
    order = list(workers)
    for i in range(warmup + rounds):
        random.shuffle(order)
        for name in order:
            ms = float(workers[name].ask({"recall": QUESTION}))
            if i >= warmup:
                times[name].append(ms)
    return times


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("sizes", type=int, nargs="*", default=[1000, 10000])
    p.add_argument("--base", required=True, type=Path, help="the baseline checkout's src directory")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args(argv)
    started, load0 = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), loadavg()
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        held = engine_client.lease(Path(tmp) / "engine", idle_stop_s=3600.0)
        uri = held.uri
        held.release()
        try:
            for size in args.sizes:
                rows.append(measure(uri, tmp, size, args))
        finally:
            engine_client.stop(Path(tmp) / "engine")
    lines = [
        f"Command: `{command_line('recall_vs_base.py', argv)}` against eb042db (the baseline's `src`); "
        f"{args.rounds} rounds after {args.warmup} warm-up, shuffled each round, the engine in its own "
        f"process with its write signal. Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"{started} UTC, load average {load0} at the start, {loadavg()} at the end (a shared machine).",
        "",
        "| memories in scope | this tree p50 ms | baseline p50 ms | ratio of p50s (this / baseline) | "
        "median of the rounds' ratios | p90 ratio |",
        "|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    publish("recall call path against eb042db (issue 41)", "\n".join(lines) + "\n", not args.no_write)
    return 0


def measure(uri: str, tmp: str, size: int, args: Any) -> str:
    db = f"vs_{size}"
    asyncio.run(seed(uri, db, size))
    workers = {"this": Worker(SRC), "base": Worker(args.base)}
    try:
        for name, w in workers.items():
            where = w.ask({"which": True})
            print(f"{name}: {where}", file=sys.stderr)
            w.ask({"open": {"uri": uri, "db": db, "data_dir": tmp, "tenant": "acme", "warm": QUESTION}})
        times = one_size(workers, args.rounds, args.warmup)
    finally:
        for w in workers.values():
            w.close()
    new, base = (statistics.median(times[k]) for k in ("this", "base"))
    paired = statistics.median(a / b for a, b in zip(times["this"], times["base"], strict=True))
    p90 = [statistics.quantiles(times[k], n=10)[-1] for k in ("this", "base")]
    return f"| {size:,} | {new:.2f} | {base:.2f} | {new / base:.3f} | {paired:.3f} | {p90[0] / p90[1]:.3f} |"


if __name__ == "__main__":
    sys.exit(main())
