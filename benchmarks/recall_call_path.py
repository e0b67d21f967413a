"""Each trimmed piece of recall's call path measured alone (issue 26, branch rspeed2).

Five servers on one database (N memories in one scope, filled as benchmarks/recall_index.py
does), each recall settled (no write between rounds), in a shuffled order each round, beside an
MCP echo call of a bare SDK server:

- all on (the code as it is);
- without the primary-key read (`FastIdEngine.primary_key_reads = False` during its calls: the
  revision read takes mongoeco's scan reader on a worker, as on main 33c5e54; branch rspeed3);
- without the lean output schema (`tools/output_schema.LEAN = False` while it is built);
- without the question cache (`IndexCache.query_terms` tokenizing every call);
- without the question cache and the short revision read (`IndexPolicy(lean=False)`);
- none of the three (the code before them);
- without any revision read (each scope's first answer kept: NOT coherent, the bound of what a
  lease on the revision could save; docs/decisions/recall-index.md, "Leases: a proposal").

Run: `.venv/bin/python benchmarks/recall_call_path.py 1000 10000 --rounds 100` (about 2 minutes).
"""

from __future__ import annotations

import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

from mcp import Client
from pymongo import AsyncMongoClient

from mongogate.compat.mongoeco import FastIdEngine
from mongogate.db import EmbeddedEngine
from mongogate.recall import IndexPolicy
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.inprocess.cache import QueryTerms
from mongogate.server.app import build_server
from mongogate.server.metrics import metrics_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import command_line, parser, publish
from recall_index import build_before, echo_server, fill, settings_for, timed

from memory import loadavg  # beside this script

ECHO = "echo (bare SDK server)"
PK = "without the primary-key read (main)"
PIECES = (
    "all on",
    "without the lean output schema",
    "without the question cache",
    "without the question cache and the short revision read",
    "none of the three (before)",
    "without any revision read (not coherent: a lease's bound)",
)


def untrimmed(server: Any, piece: str) -> None:
    m = metrics_of(server)
    assert m is not None and m.recall_index is not None
    index = m.recall_index
    if piece == "without the question cache":
        index.query_terms = QueryTerms.of
    elif piece == PIECES[5]:
        leased(index)
    elif piece in PIECES[3:]:
        index.use(IndexPolicy(lean=False))


def leased(index: Any) -> None:
    """Each scope's first `fresh` answer kept and given again: what a recall costs without its
    revision read (stale after any write: for this measurement only)."""
    original = index.fresh
    kept: dict[Any, Any] = {}

    async def fresh(*args: Any, **kwargs: Any) -> Any:
        key = (args[2], args[3])  # scope, model
        if key not in kept:
            kept[key] = await original(*args, **kwargs)
        return kept[key]

    index.fresh = fresh


async def scanned(client: Client, q: dict[str, Any]) -> Any:
    """A recall of the "all on" server whose reads take mongoeco's scan (the engine is in this process)."""
    FastIdEngine.primary_key_reads = False
    try:
        return await client.call_tool("recall", q)
    finally:
        FastIdEngine.primary_key_reads = True


async def one_size(uri: str, tmp: str, size: int, rounds: int, warmup: int) -> dict[str, float]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
    db = f"p_{size}"
    q = {"query": "when is the invoice for the garden due?"}
    ops: dict[str, Callable[[], Awaitable[Any]]] = {}
    async with AsyncExitStack() as stack:
        echo = await stack.enter_async_context(Client(echo_server(), mode="legacy"))
        ops[ECHO] = partial(echo.call_tool, "echo", {"text": "hello"})
        servers = {
            p: (build_before if p in (PIECES[1], PIECES[4]) else build_server)(
                settings_for(uri, db, tmp, "acme")
            )
            for p in PIECES
        }
        clients = {p: await stack.enter_async_context(Client(s, mode="legacy")) for p, s in servers.items()}
        await clients[PIECES[0]].call_tool(
            "remember", {"text": "Order ORD-58213 was shipped by DHL on Monday."}
        )
        template = await client[db]["memories"].find_one({})
        assert template is not None
        await fill(client[db]["memories"], template, "acme", size - 1, LocalEmbedder())
        for p, c in clients.items():
            await c.call_tool("recall", q)  # the index built, then the piece turned off
            untrimmed(servers[p], p)
            ops[p] = partial(c.call_tool, "recall", q)
        ops[PK] = partial(scanned, clients[PIECES[0]], q)
        times: dict[str, list[float]] = {k: [] for k in ops}
        order = list(ops)
        for i in range(warmup + rounds):
            random.shuffle(order)
            for name in order:
                ms = await timed(ops[name])
                if i >= warmup:
                    times[name].append(ms)
    await client.close()
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("sizes", type=int, nargs="*", default=[1000, 10000])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    started, load0 = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), loadavg()
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp) / "engine")
        uri = engine.start()
        try:
            for size in args.sizes:
                results[size] = asyncio.run(one_size(uri, tmp, size, args.rounds, args.warmup))
        finally:
            engine.stop()
    lines = [
        f"Command: `{command_line('recall_call_path.py', argv)}`; {args.rounds} rounds after {args.warmup} "
        f"warm-up, shuffled each round. Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"{started} UTC, load average {load0} at the start, {loadavg()} at the end (a shared machine).",
        "",
        "| server (recall p50 ms, x echo) | " + " | ".join(f"{s:,}" for s in args.sizes) + " |",
        "|---|" + "---:|" * len(args.sizes),
    ]
    for name in (ECHO, PIECES[0], PK, *PIECES[1:]):
        cells = []
        for size in args.sizes:
            ms = results[size][name]
            cells.append(f"{ms:.2f}" if name == ECHO else f"{ms:.2f} ({ms / results[size][ECHO]:.1f}x)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    publish(
        "recall call path, each piece alone (issue 26, rspeed3)", "\n".join(lines) + "\n", not args.no_write
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
