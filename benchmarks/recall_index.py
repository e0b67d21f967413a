"""Recall through the in-process scope index, over MCP, against an MCP echo call of a bare SDK server.

One embedded engine, the real local model (wordllama). By default (`--engine process`) the engine
runs in its own process on its Unix socket, as `mongogate serve` leases it, so recalls go through
the engine's write signal (engine/write_signal.py) and skip their revision read while nothing was
written; `--engine thread` runs it on a thread of this process on a TCP port (no write signal,
a revision read per recall; the only mode that measures the write shapes, which seed with the
engine's uniqueness scan turned off in this process).
Every call goes through the SDK's in-process `Client` in "legacy" mode (JSON-RPC framing), both
for mongogate's `build_server` and for the floor: a bare `MCPServer` with one `echo` tool (as
benchmarks/lib/startup_floor.py). Interleaved, round by round, after warm-up rounds:

- `recall` p50 with 1,000 and with 10,000 memories in the caller's scope, over the echo p50;
  beside each, the same recall by a second server with the read path as before the settled
  answer (`IndexPolicy(answer_settled=False)`: every result read back by `_id`, every question
  embedded), and at 10,000 a new question each call (the question's embedding not cached);
- `remember` p50 (a new text each round) with 10,000 memories in the scope, over an empty scope's;
- a quiet tenant's `recall` (20 memories) beside another tenant's 10,000 in the same collection,
  over the same recall with no one else in the collection;
- the first recall of each scope (the index built from the database) is reported on its own;
- the index's bytes per 10,000 memories: its own estimate (`/metrics`) and tracemalloc's count.
- (`--engine thread`) write shapes on the embedded engine at 1,000 and 10,000 documents:
  `insert_one`, an upsert by `_id` (`update_one({_id}, {$setOnInsert}, upsert=True)`), and an
  update by `_id`.

Filling: memories are inserted in bulk (`insert_many`, the stored shape of a remembered one),
with the engine's per-insert uniqueness scan off (as benchmarks/memory.py), not through remember.

Run: `.venv/bin/python benchmarks/recall_index.py` (a few minutes) or `--rounds 10`.

Beside each recall, the same recall by a server with the code before the trimmed call path
(issue 26, rspeed2): pydantic's output schema as published (`tools/output_schema.LEAN = False` while
it is built) and the revision read taking every change, the question tokenized each call
(`IndexPolicy(lean=False)`). Before the first recall the scope's revision names the last 256
memories filled (what a bulk import writes), so the revision document is as large as in any
scope with 256 writes or more.

`--recall-only 1000` (or `10000`, or both): only echo and recall at those sizes, with both
"before" variants (about 30 s at 1,000): the quick loop while changing the call path.

`--writes` measures only the writes (issue 26 item 2), over MCP, interleaved round by round, each
against the same call on an empty scope: `remember` of a new text, `remember` of a new text under
one key (a new version: a history entry), and `forget` by key (of a memory remembered, untimed,
just before), with 10,000 memories in the scope.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer
from pymongo import AsyncMongoClient

from mongogate.config import load_settings
from mongogate.db import EmbeddedEngine
from mongogate.engine import client as engine_client
from mongogate.engine.write_signal import WriteSignal
from mongogate.indexing import CHANGES, Coherence
from mongogate.recall import IndexPolicy
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.ids import memory_id
from mongogate.recall.inprocess.scope_index import INDEX_FIELDS, ScopeIndex
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.recall.store import text_hash
from mongogate.recall.vectors import pack
from mongogate.server.app import build_server
from mongogate.server.metrics import metrics_of, samples
from mongogate.tools import output_schema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import command_line, parser, publish

from memory import loadavg, unchecked_seeding  # beside this script

Doc = dict[str, Any]
WORDS = [
    *("invoice", "order", "meeting", "garden", "cat", "server", "deploy", "budget", "flight", "hotel"),
    *("dentist", "report", "laptop", "printer", "router", "backup", "payment", "ticket", "review"),
    *("release", "customer", "refund", "project", "design"),
]


def texts(n: int, tag: str) -> list[str]:
    return [
        f"{tag} note {i}: the {WORDS[i % len(WORDS)]} for {WORDS[(i * 7) % len(WORDS)]} is due "
        f"on day {i % 28 + 1}, ref {tag.upper()}-{i:05d}."
        for i in range(n)
    ]


def echo_server() -> MCPServer[Any]:
    floor: MCPServer[Any] = MCPServer("floor", log_level="WARNING")

    @floor.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    return floor


async def fill(coll: Any, template: Doc, tenant: str, n: int, embedder: LocalEmbedder) -> None:
    """`n` memories in the stored shape, then the scope's revision bumped naming the last CHANGES
    of them (as a bulk import does): the revision document holds a full change list."""
    body = texts(n, tenant)
    vectors = await embedder.embed(body)
    docs = []
    for text, vec in zip(body, vectors, strict=True):
        doc = {
            **template,
            "_id": uuid.uuid4().hex,
            "tenant": tenant,
            "text": text,
            "text_hash": text_hash(text),
        }
        doc["_id"] = memory_id(doc)  # the stored shape: the id derived from the identity
        docs.append(doc | {"embedding": pack(vec)})
    key = scope_key(MemoryScope(tenant, str(template["owner"])))
    db = coll.database  # a writer as every writer: signalled
    writer = Coherence(db["memory_revisions"], db.name, WriteSignal.of(db.client))
    async with writer.announcing(key):
        with unchecked_seeding():
            for start in range(0, len(docs), 2000):
                await coll.insert_many(docs[start : start + 2000])
        await writer.bump(key, *[d["_id"] for d in docs[-CHANGES:]])


def settings_for(uri: str, db: str, tmp: str, tenant: str) -> Any:
    return load_settings(
        None,
        database={"uri": uri, "name": db},
        server={"data_dir": tmp, "metrics": True},
        auth={"mode": "none", "tenant": tenant},
        memory={"long_term": {"max_per_scope": 50_000}},
    )


def build_before(settings: Any) -> MCPServer[Any]:
    """A server as before the trimmed call path: pydantic's output schemas as published (the
    caller also passes `IndexPolicy(lean=False)` once its index is built)."""
    output_schema.LEAN = False
    try:
        return build_server(settings)
    finally:
        output_schema.LEAN = True


def untrim(server: MCPServer[Any], *, settled: bool = True) -> None:
    """The server's recall index as before the trimmed call path (and, `settled` False, as
    before the settled answer too)."""
    m = metrics_of(server)
    assert m is not None and m.recall_index is not None
    # before the write signal too
    m.recall_index.use(IndexPolicy(answer_settled=settled, lean=False, trust_signal=False))


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    r = await fn()
    if getattr(r, "is_error", False):
        raise RuntimeError(str(r.content))
    return (time.perf_counter() - t0) * 1000


async def run(uri: str, tmp: str, rounds: int, warmup: int, *, shapes: bool = True) -> list[str]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    embedder = LocalEmbedder()
    servers = {
        "r1k": settings_for(uri, "b_1k", tmp, "acme"),
        "r10k": settings_for(uri, "b_10k", tmp, "acme"),
        "old1k": settings_for(uri, "b_1k", tmp, "acme"),
        "old10k": settings_for(uri, "b_10k", tmp, "acme"),
        "empty": settings_for(uri, "b_empty", tmp, "acme"),
        "alone": settings_for(uri, "b_alone", tmp, "quiet"),
        "beside": settings_for(uri, "b_beside", tmp, "quiet"),
    }
    servers["pre1k"] = settings_for(uri, "b_1k", tmp, "acme")
    servers["pre10k"] = settings_for(uri, "b_10k", tmp, "acme")
    before = ("old1k", "old10k", "pre1k", "pre10k")
    built = {k: (build_before if k in before else build_server)(s) for k, s in servers.items()}
    out: list[str] = []
    async with (
        Client(echo_server(), mode="legacy") as echo,
        Client(built["r1k"], mode="legacy") as r1k,
        Client(built["r10k"], mode="legacy") as r10k,
        Client(built["empty"], mode="legacy") as empty,
        Client(built["alone"], mode="legacy") as alone,
        Client(built["beside"], mode="legacy") as beside,
        Client(built["old1k"], mode="legacy") as old1k,
        Client(built["old10k"], mode="legacy") as old10k,
        Client(built["pre1k"], mode="legacy") as pre1k,
        Client(built["pre10k"], mode="legacy") as pre10k,
    ):
        # a template in the stored shape, then the bulk fills
        await r1k.call_tool("remember", {"text": "Order ORD-58213 was shipped by DHL on Monday."})
        template = await client["b_1k"]["memories"].find_one({})
        assert template is not None
        t0 = time.perf_counter()
        await fill(client["b_1k"]["memories"], template, "acme", 999, embedder)
        await fill(client["b_10k"]["memories"], template, "acme", 10_000, embedder)
        for db in ("b_alone", "b_beside"):
            await fill(client[db]["memories"], template, "quiet", 20, embedder)
        await fill(client["b_beside"]["memories"], template, "busy", 10_000, embedder)
        out.append(f"Filled 1,000 + 10,000 + 2 x 20 + 10,000 memories in {time.perf_counter() - t0:.1f} s.")
        q = {"query": "when is the invoice for the garden due?"}
        cold = {
            k: await timed(partial(c.call_tool, "recall", q))
            for k, c in (
                ("1,000", r1k),
                ("10,000", r10k),
                ("quiet beside 10,000", beside),
                ("quiet alone", alone),
            )
        }
        for c in (old1k, old10k, pre1k, pre10k):
            await c.call_tool("recall", q)  # their indexes too (not reported)
        for k in before:  # the read path before: read back, embed every question
            untrim(built[k], settled=not k.startswith("old"))
        counter = iter(range(10**6))
        ops: dict[str, Callable[[], Awaitable[Any]]] = {
            "echo (bare SDK server)": lambda: echo.call_tool("echo", {"text": "hello"}),
            "recall, 1,000 in scope": lambda: r1k.call_tool("recall", q),
            "recall, 1,000, call path before": lambda: pre1k.call_tool("recall", q),
            "recall, 1,000, read path before": lambda: old1k.call_tool("recall", q),
            "recall, 10,000 in scope": lambda: r10k.call_tool("recall", q),
            "recall, 10,000, call path before": lambda: pre10k.call_tool("recall", q),
            "recall, 10,000, read path before": lambda: old10k.call_tool("recall", q),
            "recall, 10,000, a new question each call": lambda: r10k.call_tool(
                "recall", {"query": f"when is invoice {next(counter)} for the garden due?"}
            ),
            "recall, quiet tenant alone": lambda: alone.call_tool("recall", q),
            "recall, quiet tenant beside 10,000": lambda: beside.call_tool("recall", q),
        }
        ops["remember, empty scope"] = lambda: empty.call_tool(
            "remember", {"text": f"fresh fact {next(counter)}"}
        )
        ops["remember, 10,000 in scope"] = lambda: r10k.call_tool(
            "remember", {"text": f"new fact {next(counter)}"}
        )
        times: dict[str, list[float]] = {k: [] for k in ops}
        for i in range(warmup + rounds):
            for name, op in ops.items():
                ms = await timed(op)
                if i >= warmup:
                    times[name].append(ms)
        p50 = {k: statistics.median(v) for k, v in times.items()}
        floor = p50["echo (bare SDK server)"]
        out += ["", "| call | p50 ms | p90 ms | ratio |", "|---|---:|---:|---|"]
        ratio_of = {
            "recall, 1,000 in scope": ("echo", floor),
            "recall, 10,000 in scope": ("echo", floor),
            "recall, 1,000, read path before": ("echo", floor),
            "recall, 1,000, call path before": ("echo", floor),
            "recall, 10,000, call path before": ("echo", floor),
            "recall, 10,000, read path before": ("echo", floor),
            "recall, 10,000, a new question each call": ("echo", floor),
            "recall, quiet tenant beside 10,000": ("alone", p50["recall, quiet tenant alone"]),
            "remember, 10,000 in scope": ("empty scope", p50["remember, empty scope"]),
        }
        for name, v in times.items():
            p90 = sorted(v)[int(0.9 * (len(v) - 1))]
            base = ratio_of.get(name)
            ratio = f"{p50[name] / base[1]:.1f}x {base[0]}" if base else ""
            out.append(f"| {name} | {p50[name]:.1f} | {p90:.1f} | {ratio} |")
        out += [
            "",
            "First recall of a scope (its index read from the database): "
            + ", ".join(f"{k} {v:.0f} ms" for k, v in cold.items())
            + ".",
        ]
        m = metrics_of(built["r10k"])
        assert m is not None
        est = next(v for n, _, v in samples(m) if n == "mongogate_recall_index_bytes")
        docs = await client["b_10k"]["memories"].find({"tenant": "acme"}, INDEX_FIELDS).to_list()
        tracemalloc.start()
        idx = ScopeIndex(embedder.model, embedder.dimensions, 0)
        for d in docs[:10_000]:
            idx.put(d)
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out.append(
            f"Index memory for 10,000 memories: {size / 2**20:.1f} MiB by tracemalloc "
            f"({idx.nbytes() / 2**20:.1f} MiB by its own estimate; the 10,000-scope server's "
            f"/metrics says {est / 2**20:.1f} MiB for its {len(docs):,} memories)."
        )
        if shapes:  # seeded with the uniqueness scan off, which only an engine in this process allows
            out += ["", *await write_shapes(client, rounds)]
        else:
            out += ["", "Write shapes: not measured with the engine in its own process (`--engine thread`)."]
    await client.close()
    return out


async def run_recall(uri: str, tmp: str, rounds: int, warmup: int, sizes: list[int]) -> list[str]:
    """Only echo and recall at `sizes`, each beside both "before" variants, interleaved."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    embedder = LocalEmbedder()
    q = {"query": "when is the invoice for the garden due?"}
    out: list[str] = []
    ops: dict[str, Callable[[], Awaitable[Any]]] = {}
    async with AsyncExitStack() as stack:
        echo = await stack.enter_async_context(Client(echo_server(), mode="legacy"))
        ops["echo (bare SDK server)"] = partial(echo.call_tool, "echo", {"text": "hello"})
        for size in sizes:
            db = f"q_{size}"
            s = settings_for(uri, db, tmp, "acme")
            servers = {
                "": build_server(s),
                "revision read each call": build_server(s),
                "call path before": build_before(s),
                "read path before": build_before(s),
            }
            clients = {
                k: await stack.enter_async_context(Client(v, mode="legacy")) for k, v in servers.items()
            }
            await clients[""].call_tool("remember", {"text": "Order ORD-58213 was shipped by DHL on Monday."})
            template = await client[db]["memories"].find_one({})
            assert template is not None
            await fill(client[db]["memories"], template, "acme", size - 1, embedder)
            for k, c in clients.items():
                await c.call_tool("recall", q)
                if k == "revision read each call":  # the write signal written but not trusted
                    m = metrics_of(servers[k])
                    assert m is not None and m.recall_index is not None
                    m.recall_index.use(IndexPolicy(trust_signal=False))
                elif k:
                    untrim(servers[k], settled=k == "call path before")
                ops[f"recall, {size:,} in scope" + (f", {k}" if k else "")] = partial(
                    c.call_tool, "recall", q
                )
        times: dict[str, list[float]] = {k: [] for k in ops}
        for i in range(warmup + rounds):
            for name, op in ops.items():
                ms = await timed(op)
                if i >= warmup:
                    times[name].append(ms)
    await client.close()
    floor = statistics.median(times["echo (bare SDK server)"])
    out += ["| call | p50 ms | p90 ms | ratio |", "|---|---:|---:|---|"]
    for name, v in times.items():
        p50, p90 = statistics.median(v), sorted(v)[int(0.9 * (len(v) - 1))]
        ratio = f"{p50 / floor:.1f}x echo" if name.startswith("recall") else ""
        out.append(f"| {name} | {p50:.1f} | {p90:.1f} | {ratio} |")
    return out


async def write_shapes(client: AsyncMongoClient[Doc], rounds: int) -> list[str]:
    """insert_one, upsert by _id, update by _id: p50 ms at 1,000 and 10,000 documents."""
    lines = ["| write shape (embedded engine) | 1,000 docs | 10,000 docs | ratio |", "|---|---:|---:|---|"]
    res: dict[str, dict[int, float]] = {}
    for size in (1_000, 10_000):
        coll = client["b_shapes"][f"c{size}"]
        await coll.create_index([("k", 1)], unique=True, partialFilterExpression={"keyed": True})
        with unchecked_seeding():
            await coll.insert_many(
                [{"_id": uuid.uuid4().hex, "k": i, "keyed": True, "pad": "x" * 200} for i in range(size)]
            )
        shapes = _shapes(coll)
        t: dict[str, list[float]] = {k: [] for k in shapes}
        for _ in range(rounds):
            for k, op in shapes.items():
                t0 = time.perf_counter()
                await op()
                t[k].append((time.perf_counter() - t0) * 1000)
        for k, took in t.items():
            res.setdefault(k, {})[size] = statistics.median(took)
    for k, v in res.items():
        lines.append(f"| {k} | {v[1_000]:.1f} | {v[10_000]:.1f} | {v[10_000] / v[1_000]:.1f}x |")
    return lines


def _shapes(coll: Any) -> dict[str, Callable[[], Awaitable[Any]]]:
    def insert() -> Awaitable[Any]:
        return coll.insert_one({"_id": _new(), "k": _new(), "keyed": True})  # type: ignore[no-any-return]

    def upsert() -> Awaitable[Any]:
        new = {"$setOnInsert": {"k": _new(), "keyed": True}}
        return coll.update_one({"_id": _new()}, new, upsert=True)  # type: ignore[no-any-return]

    def update() -> Awaitable[Any]:
        return coll.update_one({"_id": "rev"}, {"$inc": {"n": 1}}, upsert=True)  # type: ignore[no-any-return]

    return {"insert_one": insert, "upsert by _id ($setOnInsert)": upsert, "update by _id": update}


def _new() -> str:
    return uuid.uuid4().hex


async def run_writes(uri: str, tmp: str, rounds: int, warmup: int) -> list[str]:
    """remember (new), remember (new version of a key), forget by key: 10,000 in scope vs empty."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    embedder = LocalEmbedder()
    built = {k: build_server(settings_for(uri, f"w_{k}", tmp, "acme")) for k in ("empty", "full")}
    out: list[str] = []
    async with Client(built["empty"], mode="legacy") as empty, Client(built["full"], mode="legacy") as full:
        await full.call_tool("remember", {"text": "Order ORD-58213 was shipped by DHL on Monday."})
        template = await client["w_full"]["memories"].find_one({})
        assert template is not None
        t0 = time.perf_counter()
        await fill(client["w_full"]["memories"], template, "acme", 10_000, embedder)
        held = await client["w_full"]["memories"].count_documents({"tenant": "acme"})
        out.append(f"Filled {held:,} memories into one scope in {time.perf_counter() - t0:.1f} s.")
        counter = iter(range(10**6))
        clients = {"empty scope": empty, "10,000 in scope": full}

        async def forget(c: Any) -> float:
            key = f"gone-{next(counter)}"
            await c.call_tool("remember", {"text": f"to forget {key}", "key": key})
            return await timed(partial(c.call_tool, "forget", {"namespace": "default", "key": key}))

        ops: dict[str, Callable[[Any], Awaitable[float]]] = {
            "remember (new memory)": lambda c: timed(
                partial(c.call_tool, "remember", {"text": f"new fact {next(counter)}"})
            ),
            "remember (new version of a key)": lambda c: timed(
                partial(c.call_tool, "remember", {"text": f"standup at {next(counter)}", "key": "standup"})
            ),
            "forget by key": forget,
        }
        times: dict[tuple[str, str], list[float]] = {(o, w): [] for o in ops for w in clients}
        for i in range(warmup + rounds):
            for o, op in ops.items():
                for w, c in clients.items() if i % 2 else reversed(clients.items()):
                    ms = await op(c)
                    if i >= warmup:
                        times[(o, w)].append(ms)
    await client.close()
    out += ["", "| call | empty scope p50 ms | 10,000 in scope p50 ms | ratio |", "|---|---:|---:|---:|"]
    for o in ops:
        a = statistics.median(times[(o, "empty scope")])
        b = statistics.median(times[(o, "10,000 in scope")])
        out.append(f"| {o} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--writes", action="store_true", help="only remember and forget, 10,000 vs empty")
    p.add_argument(
        "--recall-only", type=int, nargs="+", metavar="SIZE", help="only echo and recall at these sizes"
    )
    p.add_argument(
        "--engine",
        choices=("thread", "process"),
        default="process",
        help="the engine in its own process on a Unix socket, as `mongogate serve` runs it (default), "
        "or on a thread of this process on a TCP port (no write signal)",
    )
    args = p.parse_args(argv)
    started, load0 = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), loadavg()
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp) / "engine")
        if args.engine == "process":  # the daemon `mongogate serve` leases (engine/client.py)
            held = engine_client.lease(Path(tmp) / "engine", idle_stop_s=3600.0)
            held.release()
            uri = held.uri
        else:
            uri = engine.start()
        try:
            if args.recall_only:
                lines = asyncio.run(run_recall(uri, tmp, args.rounds, args.warmup, args.recall_only))
            else:
                if args.writes:
                    lines = asyncio.run(run_writes(uri, tmp, args.rounds, args.warmup))
                else:
                    lines = asyncio.run(
                        run(uri, tmp, args.rounds, args.warmup, shapes=args.engine == "thread")
                    )
        finally:
            if args.engine == "process":
                engine_client.stop(Path(tmp) / "engine")
            else:
                engine.stop()
    where = (
        "the engine in its own process, on its socket with the write signal, as `mongogate serve` runs it"
        if args.engine == "process"
        else "the engine on a thread of this process, on TCP: no write signal"
    )
    head = [
        f"Command: `{command_line('recall_index.py', argv)}`; {args.rounds} rounds after {args.warmup} "
        f"warm-up, interleaved. Python {platform.python_version()}, {os.cpu_count()} cores, {started} UTC, "
        f"load average {load0} at the start, {loadavg()} at the end (a shared machine). Engine: {where}.",
        "",
    ]
    name = "recall index (in-process, issue 26)"
    name = "recall writes at 10,000 (issue 26 item 2)" if args.writes else name
    name = "recall call path (issue 26, --recall-only)" if args.recall_only else name
    name = f"{name}: {where.split(',')[0]}"
    publish(name, "\n".join(head + lines) + "\n", not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
