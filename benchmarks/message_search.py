"""search_messages against a recall of the same scope, over MCP, interleaved (issue 36: "within 3x
a recall of the same scope at 10,000 messages").

    .venv/bin/python benchmarks/message_search.py [--sizes 1000 10000] [--rounds 15] [--no-write]

One embedded engine (a thread of this process), the real local model. Per size N, one server
(`build_server`, the SDK's in-process `Client`): tenant `acme` holds N memories (filled as
benchmarks/recall_index.py does) and one session of N messages of the same texts (inserted in the
stored shape, the engine's uniqueness scan off while seeding), their terms and vectors derived
first through the server's own `MessageFill` a batch at a time (what the background does after
writes). Then, round by round: an MCP echo of a bare SDK server, `recall` and `search_messages`
of the same question. The first (index-building) call of each is reported on its own.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import anyio
from fairness import unchecked_seeding  # benchmarks/fairness.py, beside this script
from lib.results import write_section  # benchmarks/lib/results.py, beside this script
from mcp import Client
from pymongo import AsyncMongoClient
from recall_index import echo_server, fill, settings_for, texts, timed  # beside this script

from mongogate.engine.embedded import EmbeddedEngine
from mongogate.recall.embedding import LocalEmbedder
from mongogate.server.app import build_server
from mongogate.server.metrics import metrics_of
from mongogate.values import Doc

QUESTION = "when is the invoice for the garden due?"


async def seed_messages(db: Any, sid: str, n: int) -> None:
    now = time.time()
    from datetime import UTC, datetime, timedelta

    base = datetime.fromtimestamp(now, UTC) - timedelta(seconds=n)
    docs = [
        {"_id": f"{sid}:k{i}:user", "tenant": "acme", "session_id": sid, "seq": i + 1, "key": f"k{i}"}
        | {"role": "user", "created_at": base + timedelta(seconds=i), "content": text}
        for i, text in enumerate(texts(n, "acme"))
    ]
    with unchecked_seeding():
        for at in range(0, n, 2000):
            await db["messages"].insert_many(docs[at : at + 2000])


async def derive_all(search: Any) -> float:
    """Every message's terms and vector, a batch at a time (seconds taken)."""
    t0 = time.perf_counter()
    scope, _ = await search.index.fresh("acme", None, tenant="acme")
    ids = list(scope.pending)
    with unchecked_seeding():
        for at in range(0, len(ids), search.fill.per_call):
            await search.fill.fill("acme", ids[at : at + search.fill.per_call], tenant="acme")
    return time.perf_counter() - t0


async def run(uri: str, tmp: str, sizes: list[int], rounds: int) -> list[str]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    embedder = LocalEmbedder()
    ops: dict[str, Callable[[], Awaitable[Any]]] = {}
    notes: list[str] = []
    async with AsyncExitStack() as stack:
        echo = await stack.enter_async_context(Client(echo_server(), mode="legacy"))
        ops["echo (bare SDK server)"] = partial(echo.call_tool, "echo", {"text": "hello"})
        for size in sizes:
            db = f"ms_{size}"
            server = build_server(settings_for(uri, db, tmp, "acme"))
            c = await stack.enter_async_context(Client(server, mode="legacy"))
            await c.call_tool("remember", {"text": "Order ORD-58213 was shipped by DHL on Monday."})
            template = await client[db]["memories"].find_one({})
            assert template is not None
            await fill(client[db]["memories"], template, "acme", size - 1, embedder)
            sid = (await c.call_tool("create_session", {})).structured_content["session_id"]
            await seed_messages(client[db], sid, size)
            m = metrics_of(server)
            assert m is not None and m.message_search is not None
            took = await derive_all(m.message_search)
            first_recall = await timed(partial(c.call_tool, "recall", {"query": QUESTION}))
            first_search = await timed(partial(c.call_tool, "search_messages", {"query": QUESTION}))
            notes.append(
                f"- {size:,}: deriving every message's terms and vector took {took:.1f} s "
                f"(batches of {m.message_search.fill.per_call}); the first recall {first_recall:.0f} ms, "
                f"the first search_messages {first_search:.0f} ms (each builds its index)."
            )
            ops[f"recall, {size:,}"] = partial(c.call_tool, "recall", {"query": QUESTION})
            ops[f"search_messages, {size:,}"] = partial(c.call_tool, "search_messages", {"query": QUESTION})
        times: dict[str, list[float]] = {k: [] for k in ops}
        for i in range(2 + rounds):
            for name, op in ops.items():
                ms = await timed(op)
                if i >= 2:
                    times[name].append(ms)
    await client.close()
    out = ["| call | p50 ms | p90 ms | ratio |", "|---|---:|---:|---|"]
    for name, v in times.items():
        p50, p90 = statistics.median(v), sorted(v)[int(0.9 * (len(v) - 1))]
        ratio = ""
        if name.startswith("search_messages"):
            label = name.split(", ")[1]
            ratio = f"{p50 / statistics.median(times[f'recall, {label}']):.2f}x recall"
        out.append(f"| {name} | {p50:.1f} | {p90:.1f} | {ratio} |")
    return [*out, "", *notes]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    import tempfile
    from pathlib import Path

    load0 = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp) / "engine")
        try:
            rows = anyio.run(run, engine.start(), tmp, args.sizes, args.rounds)
        finally:
            engine.stop()
    load1 = os.getloadavg()
    cmd = " ".join(["benchmarks/message_search.py", *sys.argv[1:]])
    body = (
        f"Command: `.venv/bin/python {cmd}`  \n"
        f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other work; load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end; "
        f"whole run {time.monotonic() - started:.0f} s; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Embedded engine on a thread, in-process "
        f"MCP client (legacy framing), the local model; {args.rounds} interleaved rounds after 2.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    print(body)
    if not args.no_write:
        write_section("message search through the index (issue 36 item 1)", body)


if __name__ == "__main__":
    main()
