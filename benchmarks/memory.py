"""Memory latency: one document per message (mongogate) vs one document per session (naive).

For sessions of 100, 1,000 and 5,000 messages, on one embedded engine in one run:

- append: `MemoryStore.append` (duplicate check, `$inc` on the session, `insert_one`) vs the naive
  design (read the session's document, append in Python, `$set` the whole array back);
- engine baseline: the same three round trips as an append, issued with bare pymongo against a
  collection of the same size with the same indexes, each timed: its `insert_one` is the raw engine
  insert (whose cost grows with the collection), and ours minus the whole sequence is mongogate's
  own share (validation, key building, Python);
- load: `MemoryStore.load_context(limit=40)` vs reading the naive document and slicing the last 40
  (with the same cut to the first user message);
- document sizes: one message document (ours) vs the whole session document (naive).

Seeding is not measured. The embedded engine (mongoeco 4.11) checks uniqueness on every insert by
scanning the whole collection, and its `insert` command inserts documents one at a time, so
`insert_many` of n documents costs O(n^2) (about 30 s for 1,000 and over 5 min for 5,000). While
seeding only, this script replaces that check with a no-op (the seeded keys are distinct by
construction), then restores it and verifies that the unique index still rejects a duplicate
before anything is timed. Every timed operation runs through the unmodified engine.

Run: `.venv/bin/python benchmarks/memory.py` (full, about 2 minutes on 2 cores) or `--quick`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bson
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from mongogate.config import MemorySettings
from mongogate.db import EmbeddedEngine
from mongogate.memory.store import MemoryStore

Doc = dict[str, Any]

TENANT = "bench"
WINDOW = 40
FULL_SIZES = (100, 1_000, 5_000)
QUICK_SIZES = (100, 1_000)


@dataclass(frozen=True)
class Stats:
    p50: float  # milliseconds
    p95: float

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        ordered = sorted(samples)
        # nearest-rank p95: with 30 samples, the 29th smallest
        rank = max(1, math.ceil(0.95 * len(ordered)))
        return cls(statistics.median(ordered) * 1e3, ordered[rank - 1] * 1e3)


@dataclass(frozen=True)
class SizeResult:
    size: int
    ours_append: Stats
    engine_insert: Stats
    engine_key_read: Stats
    engine_inc: Stats
    engine_sequence: Stats
    naive_append: Stats
    ours_load: Stats
    bare_load: Stats
    naive_load: Stats
    ours_doc_bytes: int
    naive_doc_bytes_before: int
    naive_doc_bytes_after: int
    seed_s: float


@contextlib.contextmanager
def unchecked_seeding() -> Iterator[None]:
    """Skip the engine's per-insert uniqueness scan while seeding (see the module docstring)."""
    from mongoeco.engines.sqlite import SQLiteEngine

    name = "_validate_document_against_unique_indexes"
    original = getattr(SQLiteEngine, name, None)
    if original is None:
        print(
            f"warning: mongoeco has no SQLiteEngine.{name}; seeding runs unpatched and may take minutes",
            file=sys.stderr,
        )
        yield
        return

    def skip(self: object, *args: object, **kwargs: object) -> None:
        return None

    setattr(SQLiteEngine, name, skip)
    try:
        yield
    finally:
        setattr(SQLiteEngine, name, original)


def content_text(i: int, nbytes: int) -> str:
    base = f"message {i}: " + "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    return (base * (nbytes // len(base) + 1))[:nbytes]


def message_fields(i: int, turn_prefix: str, nbytes: int) -> Doc:
    """What one message holds, shaped like `MemoryStore.append` writes it (minus session/tenant)."""
    role = "user" if i % 2 == 0 else "assistant"
    turn_id = f"{turn_prefix}{i // 2}"
    return {
        "key": f"{turn_id}:{role}",
        "seq": i + 1,
        "turn_id": turn_id,
        "role": role,
        "call_id": None,
        "content": content_text(i, nbytes),
        "created_at": dt.datetime.now(dt.UTC),
    }


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def create_message_indexes(coll: AsyncCollection[Doc]) -> None:
    # The same two indexes as MemoryStore.ensure_indexes, for the engine baseline.
    await coll.create_index(
        [("session_id", ASCENDING), ("key", ASCENDING)], unique=True, name="session_key_unique"
    )
    await coll.create_index([("session_id", ASCENDING), ("seq", DESCENDING)], name="session_seq_desc")


async def bench_size(db: AsyncDatabase[Doc], size: int, reps: int, warmup: int, nbytes: int) -> SizeResult:
    store = MemoryStore(db, MemorySettings())
    await store.ensure_indexes()
    raw: AsyncCollection[Doc] = db["raw_messages"]
    await create_message_indexes(raw)
    chats: AsyncCollection[Doc] = db["chats"]

    sid = await store.create_session(TENANT)
    spare = await store.create_session(TENANT)  # takes the baseline's $inc, so `sid` keeps its seqs
    seeded = [message_fields(i, "seed", nbytes) for i in range(size)]
    t0 = time.perf_counter()
    with unchecked_seeding():
        await store.messages.insert_many([{"session_id": sid, "tenant": TENANT, **m} for m in seeded])
        await raw.insert_many([{"session_id": sid, "tenant": TENANT, **m} for m in seeded])
        await chats.insert_one({"_id": sid, "tenant": TENANT, "messages": seeded})
    await store.sessions.update_one({"_id": sid}, {"$set": {"next_seq": size}})
    seed_s = time.perf_counter() - t0

    # Seeding skipped the uniqueness check: prove the index is live again before timing anything.
    for coll in (store.messages, raw):
        if await coll.count_documents({"session_id": sid}) != size:
            raise SystemExit(f"seeding {coll.name} did not store {size} messages")
        try:
            await coll.insert_one({"session_id": sid, "key": seeded[0]["key"]})
        except DuplicateKeyError:
            pass
        else:
            raise SystemExit(f"unique index on {coll.name} did not reject a duplicate after seeding")

    ours_s: list[float] = []
    engine_s: list[float] = []
    key_read_s: list[float] = []
    inc_s: list[float] = []
    sequence_s: list[float] = []
    naive_s: list[float] = []
    total = warmup + reps
    for r in range(total):
        new = message_fields(size + r, "bench", nbytes)

        async def ours(m: Doc = new) -> None:
            result = await store.append(TENANT, sid, m["turn_id"], m["role"], m["content"])
            if result.status != "inserted":
                raise SystemExit(f"append returned {result.status}")

        async def engine(m: Doc = new, record: bool = r >= warmup) -> None:
            # append's round trips with nothing of mongogate around them, each timed
            t_read = time.perf_counter()
            if await raw.find_one({"session_id": sid, "key": m["key"]}, {"seq": 1, "tenant": 1}):
                raise SystemExit(f"unexpected message {m['key']}")
            t_inc = time.perf_counter()
            session = await store.sessions.find_one_and_update(
                {"_id": spare, "tenant": TENANT},
                {"$inc": {"next_seq": 1}},
                projection={"next_seq": 1},
                return_document=ReturnDocument.AFTER,
            )
            assert session is not None
            t_insert = time.perf_counter()
            await raw.insert_one({"session_id": sid, "tenant": TENANT, **m})
            t_end = time.perf_counter()
            if record:
                key_read_s.append(t_inc - t_read)
                inc_s.append(t_insert - t_inc)
                engine_s.append(t_end - t_insert)

        async def naive(m: Doc = new) -> None:
            doc = await chats.find_one({"_id": sid})
            assert doc is not None
            messages: list[Doc] = doc["messages"]
            messages.append(m)
            await chats.update_one({"_id": sid}, {"$set": {"messages": messages}})

        ops: list[tuple[Callable[[], Awaitable[None]], list[float]]] = [
            (ours, ours_s),
            (engine, sequence_s),
            (naive, naive_s),
        ]
        k = r % len(ops)  # rotate the order so no design always runs first
        for fn, samples in ops[k:] + ops[:k]:
            elapsed = await timed(fn)
            if r >= warmup:
                samples.append(elapsed)

    ours_load_s: list[float] = []
    bare_load_s: list[float] = []
    naive_load_s: list[float] = []

    async def ours_load() -> None:
        ctx = await store.load_context(TENANT, sid, WINDOW)
        # turns are (user, assistant) pairs: the cut to the first user message drops at most one
        if not WINDOW - 1 <= len(ctx.messages) <= WINDOW:
            raise SystemExit(f"load_context returned {len(ctx.messages)} messages, expected {WINDOW}")

    async def bare_load() -> None:
        # load_context's two round trips (session check, newest limit+1 by seq) with pymongo alone
        if await store.sessions.find_one({"_id": sid, "tenant": TENANT}) is None:
            raise SystemExit("session vanished")
        cursor = store.messages.find(
            {"session_id": sid},
            {"role": 1, "content": 1, "turn_id": 1, "seq": 1, "call_id": 1},
            sort=[("seq", DESCENDING)],
            limit=WINDOW + 1,
        )
        if len([d async for d in cursor]) != WINDOW + 1:
            raise SystemExit("bare load read too few messages")

    async def naive_load() -> None:
        doc = await chats.find_one({"_id": sid})
        assert doc is not None
        window: list[Doc] = doc["messages"][-WINDOW:]
        # the same turn-boundary cut as load_context
        first_user = next((i for i, m in enumerate(window) if m["role"] == "user"), len(window))
        if not WINDOW - 1 <= len(window[first_user:]) <= WINDOW:
            raise SystemExit(f"naive load returned {len(window[first_user:])} messages")

    for r in range(total):
        loads: list[tuple[Callable[[], Awaitable[None]], list[float]]] = [
            (ours_load, ours_load_s),
            (bare_load, bare_load_s),
            (naive_load, naive_load_s),
        ]
        k = r % len(loads)
        for fn, samples in loads[k:] + loads[:k]:
            elapsed = await timed(fn)
            if r >= warmup:
                samples.append(elapsed)

    one = await store.messages.find_one({"session_id": sid}, sort=[("seq", DESCENDING)])
    naive_doc = await chats.find_one({"_id": sid})
    assert one is not None and naive_doc is not None
    naive_before = len(bson.encode({"_id": sid, "tenant": TENANT, "messages": seeded}))
    return SizeResult(
        size=size,
        ours_append=Stats.of(ours_s),
        engine_insert=Stats.of(engine_s),
        engine_key_read=Stats.of(key_read_s),
        engine_inc=Stats.of(inc_s),
        engine_sequence=Stats.of(sequence_s),
        naive_append=Stats.of(naive_s),
        ours_load=Stats.of(ours_load_s),
        bare_load=Stats.of(bare_load_s),
        naive_load=Stats.of(naive_load_s),
        ours_doc_bytes=len(bson.encode(one)),
        naive_doc_bytes_before=naive_before,
        naive_doc_bytes_after=len(bson.encode(naive_doc)),
        seed_s=seed_s,
    )


def ms(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def kib(n: int) -> str:
    return f"{n:,} B" if n < 10_000 else f"{n / 1024:,.0f} KiB"


def render(results: list[SizeResult], reps: int, warmup: int, nbytes: int) -> str:
    lines = [
        f"Latency in ms, median (p50) and p95 over {reps} timed operations per cell after {warmup} "
        f"untimed; messages of {nbytes} content bytes; load window {WINDOW}.",
        "",
        "**Append** (`engine` = a raw `insert_one` into a collection of the same size with the same indexes)",
        "",
        "| session | ours p50 / p95 | engine p50 / p95 | ours − engine (p50) | ours ÷ engine "
        "| naive p50 / p95 | naive ÷ ours (p50) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o, e, n = r.ours_append, r.engine_insert, r.naive_append
        lines.append(
            f"| {r.size:,} | {ms(o.p50)} / {ms(o.p95)} | {ms(e.p50)} / {ms(e.p95)} | {ms(o.p50 - e.p50)} "
            f"| {ratio(o.p50, e.p50)} | {ms(n.p50)} / {ms(n.p95)} | {ratio(n.p50, o.p50)} |"
        )
    lines += [
        "",
        "**Where our append's time goes** (p50; `bare` = the same three round trips issued with "
        "pymongo alone, each timed; ours − bare = mongogate's own share)",
        "",
        "| session | ours | bare | bare: duplicate-check find_one | bare: `$inc` | bare: insert_one "
        "| ours − bare |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ours_p50, bare_p50 = r.ours_append.p50, r.engine_sequence.p50
        parts = " | ".join(ms(x) for x in (r.engine_key_read.p50, r.engine_inc.p50, r.engine_insert.p50))
        lines.append(
            f"| {r.size:,} | {ms(ours_p50)} | {ms(bare_p50)} | {parts} | {ms(ours_p50 - bare_p50)} |"
        )
    lines += [
        "",
        f"**Load** (`load_context({WINDOW})` vs read the naive document, slice the last {WINDOW}, "
        "cut to the first user message; `bare` = load_context's two reads issued with pymongo alone)",
        "",
        "| session | ours p50 / p95 | bare p50 | naive p50 / p95 | naive ÷ ours (p50) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o, b, n = r.ours_load, r.bare_load, r.naive_load
        lines.append(
            f"| {r.size:,} | {ms(o.p50)} / {ms(o.p95)} | {ms(b.p50)} | {ms(n.p50)} / {ms(n.p95)} "
            f"| {ratio(n.p50, o.p50)} |"
        )
    lines += [
        "",
        "**Document size** (BSON)",
        "",
        "| session | ours: one message | naive: session document (seeded → after the run) |",
        "|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.size:,} | {kib(r.ours_doc_bytes)} | {kib(r.naive_doc_bytes_before)} → "
            f"{kib(r.naive_doc_bytes_after)} |"
        )
    return "\n".join(lines)


async def run(uri: str, sizes: list[int], reps: int, warmup: int, nbytes: int) -> list[SizeResult]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    results: list[SizeResult] = []
    try:
        for size in sizes:
            t0 = time.perf_counter()
            result = await bench_size(client[f"bench_memory_{size}"], size, reps, warmup, nbytes)
            print(
                f"  {size:,} messages: seeded in {result.seed_s:.1f} s, measured in "
                f"{time.perf_counter() - t0 - result.seed_s:.1f} s",
                file=sys.stderr,
            )
            results.append(result)
    finally:
        await client.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1,000, 10 repetitions")
    parser.add_argument("--sizes", type=int, nargs="+", help="session sizes (default 100 1000 5000)")
    parser.add_argument("--reps", type=int, help="timed operations per cell (default 30, quick 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed operations first (default 2)")
    parser.add_argument("--content-bytes", type=int, default=256, help="content per message (default 256)")
    args = parser.parse_args(argv)

    sizes: list[int] = args.sizes or list(QUICK_SIZES if args.quick else FULL_SIZES)
    reps: int = args.reps or (10 if args.quick else 30)
    warmup: int = args.warmup
    nbytes: int = args.content_bytes
    if reps < 1 or warmup < 0 or nbytes < 1 or any(s < WINDOW for s in sizes):
        parser.error(f"need reps >= 1, warmup >= 0, content-bytes >= 1 and sizes >= {WINDOW}")

    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else "python"
    command = shlex.join([python, "benchmarks/memory.py", *(sys.argv[1:] if argv is None else argv)])
    started = dt.datetime.now(dt.UTC)
    print(f"memory benchmark: sizes {sizes}, {reps} reps, embedded engine in a temp dir", file=sys.stderr)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            results = asyncio.run(run(uri, sizes, reps, warmup, nbytes))
        finally:
            engine.stop()
    elapsed = time.perf_counter() - t0

    print(render(results, reps, warmup, nbytes))
    print()
    print(f"Command: `{command}` · {started:%Y-%m-%d %H:%M} UTC · total {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
