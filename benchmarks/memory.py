"""Memory latency: one document per message (mongogate) vs one document per session (naive).

For sessions of 100, 1,000 and 5,000 messages, on one embedded engine in one run:

- append: `MemoryStore.append` of an ordinary message, two round trips (`$inc` findAndModify on
  the session, then `insert_one`), vs the naive design (read the session's document, append in
  Python, `$set` the whole array back). Turns are a user message and an assistant tool call
  (`call_id` set), so no append is a turn's final answer: that one goes through the session's
  commit point (`memory/answers.py`, three round trips) and is not measured, nor is a repeat
  (rejected by the unique index, then one find);
- `bare`: the same two round trips with bare pymongo on a collection of the same size with the
  same indexes, each timed: its `insert_one` is the raw engine insert, and ours minus the whole
  sequence is mongogate's own share (validation, key building, Python);
- load: `MemoryStore.load_context(limit=40)`, one round trip for a non-empty session (a find on
  {session_id, tenant}, newest first, limit 41), vs reading the naive document and slicing the
  last 40 (same cut to the first user message); `bare` is that find with pymongo, and `bare, limit
  1` the same find returning one document (the engine's cost per returned document);
- document sizes: one message document (ours) vs the whole session document (naive).

A pymongo CommandListener on a second client counts the commands of one append, one load and
their bare twins at every size; the run stops if ours and bare differ.

Seeding is not timed. mongoeco 4.11 checks uniqueness on every insert by scanning the whole
collection, one document at a time, so `insert_many` of n documents is O(n^2) (over 5 min for
5,000). While seeding only, this script replaces that check with a no-op (the seeded keys are
distinct by construction), then restores it and checks the unique index rejects a duplicate
before timing. Every timed operation runs through the unmodified engine.

Run: `.venv/bin/python benchmarks/memory.py` (about 3 minutes on 2 cores) or `--quick`; writes the
`## memory` section of benchmarks/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import bson
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReturnDocument, monitoring
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from mongogate.config import MemorySettings
from mongogate.db import EmbeddedEngine
from mongogate.memory.keys import message_key
from mongogate.memory.store import MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.memory_report import WINDOW, SizeResult, Stats, findings, render  # beside this script
from lib.results import RESULTS, write_section  # benchmarks/lib/results.py, beside this script

Doc = dict[str, Any]
Op = Callable[[], Awaitable[None]]

TENANT = "bench"
CALL_ID = "c1"  # assistant messages are tool calls: never a turn's final answer
WINDOW_FIELDS = {"role": 1, "content": 1, "turn_id": 1, "seq": 1, "call_id": 1, "key": 1, "_id": 0}
FULL_SIZES = (100, 1_000, 5_000)
QUICK_SIZES = (100, 1_000)


class CommandLog(monitoring.CommandListener):
    """Command names sent to the benchmark databases (not handshakes or endSessions)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.database_name.startswith("bench_memory_"):
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    async def of(self, fn: Op) -> list[str]:
        self.names.clear()
        await fn()
        return list(self.names)


@contextlib.contextmanager
def unchecked_seeding() -> Iterator[None]:
    """Skip the engine's per-insert uniqueness scan while seeding (see the module docstring)."""
    from mongoeco.engines.sqlite import SQLiteEngine

    name = "_validate_document_against_unique_indexes"
    original = getattr(SQLiteEngine, name, None)
    if original is None:
        print(f"warning: mongoeco has no SQLiteEngine.{name}; seeding may take minutes", file=sys.stderr)
        yield
        return

    def skip(self: object, *args: object, **kwargs: object) -> None:
        return None

    setattr(SQLiteEngine, name, skip)
    try:
        yield
    finally:
        setattr(SQLiteEngine, name, original)


def message_fields(i: int, turn_prefix: str, nbytes: int) -> Doc:
    """Message i as `MemoryStore.append` writes it (minus session/tenant): even i the turn's user
    message, odd i an assistant tool call (with `call_id`)."""
    role = "user" if i % 2 == 0 else "assistant"
    turn_id = f"{turn_prefix}{i // 2}"
    call_id = None if role == "user" else CALL_ID
    base = f"message {i}: lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    return {
        "key": message_key(turn_id, role, call_id),
        "seq": i + 1,
        "turn_id": turn_id,
        "role": role,
        "call_id": call_id,
        "content": (base * (nbytes // len(base) + 1))[:nbytes],
        "created_at": dt.datetime.now(dt.UTC),
    }


async def rotated(rounds: list[list[tuple[Op, list[float]]]], warmup: int) -> None:
    """Time each round's operations, rotating their order so none always runs first."""
    for r, ops in enumerate(rounds):
        k = r % len(ops)
        for fn, samples in ops[k:] + ops[:k]:
            start = time.perf_counter()
            await fn()
            if r >= warmup:
                samples.append(time.perf_counter() - start)


async def _check_seeded(coll: AsyncCollection[Doc], sid: str, size: int, key: str) -> None:
    if await coll.count_documents({"session_id": sid}) != size:
        raise SystemExit(f"seeding {coll.name} did not store {size} messages")
    try:
        await coll.insert_one({"session_id": sid, "key": key})
    except DuplicateKeyError:
        return
    raise SystemExit(f"unique index on {coll.name} did not reject a duplicate after seeding")


def _bare_load(messages: AsyncCollection[Doc], sid: str, limit: int) -> Op:
    async def bare() -> None:  # load_context's one round trip with pymongo alone
        spec = {"session_id": sid, "tenant": TENANT}
        cursor = messages.find(spec, WINDOW_FIELDS, sort=[("seq", DESCENDING)], limit=limit)
        if len([d async for d in cursor]) != limit:
            raise SystemExit("bare load read too few messages")

    return bare


def _naive_load(chats: AsyncCollection[Doc], sid: str) -> Op:
    async def naive_load() -> None:
        doc = await chats.find_one({"_id": sid})
        assert doc is not None
        window: list[Doc] = doc["messages"][-WINDOW:]
        first_user = next((i for i, m in enumerate(window) if m["role"] == "user"), len(window))
        if not WINDOW - 1 <= len(window[first_user:]) <= WINDOW:  # the same turn-boundary cut
            raise SystemExit(f"naive load returned {len(window[first_user:])} messages")

    return naive_load


async def bench_size(
    db: AsyncDatabase[Doc],
    counted_db: AsyncDatabase[Doc],
    log: CommandLog,
    size: int,
    reps: int,
    warmup: int,
    nbytes: int,
) -> SizeResult:
    store = MemoryStore(db, MemorySettings())
    await store.ensure_indexes()
    raw: AsyncCollection[Doc] = db["raw_messages"]
    # the same two indexes as MemoryStore.ensure_indexes, for the bare sequence
    await raw.create_index(
        [("session_id", ASCENDING), ("key", ASCENDING)], unique=True, name="session_key_unique"
    )
    await raw.create_index([("session_id", ASCENDING), ("seq", DESCENDING)], name="session_seq_desc")
    chats: AsyncCollection[Doc] = db["chats"]

    sid = await store.create_session(TENANT)
    spare = await store.create_session(TENANT)  # takes the bare sequence's $inc, so `sid` keeps its seqs
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
        await _check_seeded(coll, sid, size, seeded[0]["key"])

    def append(store: MemoryStore, m: Doc) -> Op:
        async def ours() -> None:
            result = await store.append(TENANT, sid, m["turn_id"], m["role"], m["content"], m["call_id"])
            if result.status != "inserted":
                raise SystemExit(f"append returned {result.status}")

        return ours

    def bare_append(
        raw: AsyncCollection[Doc], sessions: AsyncCollection[Doc], m: Doc, parts: list[float]
    ) -> Op:
        async def bare() -> None:  # append's two round trips with nothing of mongogate around them
            t_inc = time.perf_counter()
            session = await sessions.find_one_and_update(
                {"_id": spare, "tenant": TENANT},
                {"$inc": {"next_seq": 1}},
                projection={"next_seq": 1, "pending": 1},
                return_document=ReturnDocument.AFTER,
            )
            assert session is not None
            t_insert = time.perf_counter()
            await raw.insert_one({"session_id": sid, "tenant": TENANT, **m})
            parts.extend((t_insert - t_inc, time.perf_counter() - t_insert))

        return bare

    def naive_append(m: Doc) -> Op:
        async def naive() -> None:
            doc = await chats.find_one({"_id": sid})
            assert doc is not None
            await chats.update_one({"_id": sid}, {"$set": {"messages": [*doc["messages"], m]}})

        return naive

    def load(store: MemoryStore) -> Op:
        async def ours_load() -> None:
            ctx = await store.load_context(TENANT, sid, WINDOW)
            # turns are (user, tool call) pairs: the cut to the first user message drops at most one
            if not WINDOW - 1 <= len(ctx.messages) <= WINDOW:
                raise SystemExit(f"load_context returned {len(ctx.messages)} messages, expected {WINDOW}")

        return ours_load

    def bare_load(messages: AsyncCollection[Doc], limit: int) -> Op:
        return _bare_load(messages, sid, limit)

    naive_load = _naive_load(chats, sid)

    s: dict[str, list[float]] = {
        k: [] for k in ("ours", "bare", "naive", "ours_load", "bare_load", "bare_load1", "naive_load")
    }
    parts: list[float] = []  # bare $inc, bare insert, $inc, insert, ...
    total = warmup + reps
    news = [message_fields(size + r, "bench", nbytes) for r in range(total)]
    await rotated(
        [
            [
                (append(store, m), s["ours"]),
                (bare_append(raw, store.sessions, m, parts if r >= warmup else []), s["bare"]),
                (naive_append(m), s["naive"]),
            ]
            for r, m in enumerate(news)
        ],
        warmup,
    )
    loads = [
        (load(store), s["ours_load"]),
        (bare_load(store.messages, WINDOW + 1), s["bare_load"]),
        (bare_load(store.messages, 1), s["bare_load1"]),
        (naive_load, s["naive_load"]),
    ]
    await rotated([loads] * total, warmup)

    # Count the round trips (untimed, on the listening client): ours must match its bare twin.
    counted = MemoryStore(counted_db, MemorySettings())
    extra = message_fields(size + total, "bench", nbytes)
    commands = {
        "append": await log.of(append(counted, extra)),
        "bare append": await log.of(bare_append(counted_db["raw_messages"], counted.sessions, extra, [])),
        "load": await log.of(load(counted)),
        "bare load": await log.of(bare_load(counted.messages, WINDOW + 1)),
    }
    if commands["append"] != commands["bare append"] or commands["load"] != commands["bare load"]:
        raise SystemExit(f"the bare sequences no longer mirror mongogate's round trips: {commands}")

    one = await store.messages.find_one({"session_id": sid}, sort=[("seq", DESCENDING)])
    naive_doc = await chats.find_one({"_id": sid})
    assert one is not None and naive_doc is not None
    t = {k: Stats.of(v) for k, v in s.items()} | {
        "bare_inc": Stats.of(parts[0::2]),
        "bare_insert": Stats.of(parts[1::2]),
    }
    return SizeResult(
        size=size,
        t=t,
        commands=commands,
        ours_doc_bytes=len(bson.encode(one)),
        naive_doc_bytes_before=len(bson.encode({"_id": sid, "tenant": TENANT, "messages": seeded})),
        naive_doc_bytes_after=len(bson.encode(naive_doc)),
        seed_s=seed_s,
    )


async def run(uri: str, sizes: list[int], reps: int, warmup: int, nbytes: int) -> list[SizeResult]:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    log = CommandLog()
    counted: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True, event_listeners=[log])
    results: list[SizeResult] = []
    try:
        for size in sizes:
            t0 = time.perf_counter()
            name = f"bench_memory_{size}"
            result = await bench_size(client[name], counted[name], log, size, reps, warmup, nbytes)
            measured = time.perf_counter() - t0 - result.seed_s
            print(
                f"  {size:,} messages: seeded in {result.seed_s:.1f} s, measured in {measured:.1f} s",
                file=sys.stderr,
            )
            results.append(result)
    finally:
        await counted.close()
        await client.close()
    return results


def loadavg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="sizes 100 and 1,000, 10 repetitions")
    parser.add_argument("--sizes", type=int, nargs="+", help="session sizes (default 100 1000 5000)")
    parser.add_argument("--reps", type=int, help="timed operations per cell (default 30, quick 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed operations first (default 2)")
    parser.add_argument("--content-bytes", type=int, default=256, help="content per message (default 256)")
    parser.add_argument("--no-write", action="store_true", help=f"print only; do not update {RESULTS.name}")
    args = parser.parse_args(argv)

    sizes: list[int] = args.sizes or list(QUICK_SIZES if args.quick else FULL_SIZES)
    reps: int = args.reps or (10 if args.quick else 30)
    warmup: int = args.warmup
    nbytes: int = args.content_bytes
    if reps < 1 or warmup < 0 or nbytes < 1 or any(s < WINDOW for s in sizes):
        parser.error(f"need reps >= 1, warmup >= 0, content-bytes >= 1 and sizes >= {WINDOW}")

    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else "python"
    command = shlex.join([python, "benchmarks/memory.py", *(sys.argv[1:] if argv is None else argv)])
    started, load_before = dt.datetime.now(dt.UTC), loadavg()
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

    body = [
        f"Command: `{command}` (`make bench`; `--quick` for 100 and 1,000 messages, 10 reps).  ",
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} "
        f"cores; pymongo {version('pymongo')}, mongoeco {version('mongoeco')} (embedded engine, its own "
        f"thread); {started:%Y-%m-%d %H:%M} UTC; whole run {elapsed:.0f} s; load average (1, 5, 15 min) "
        f"{load_before} at the start, {loadavg()} at the end (a shared machine: absolute times move with "
        "the load, the ratios much less).",
        "",
        "Seeding is not timed. mongoeco's `insert` command inserts one document at a time and each insert "
        "scans the whole collection, so `insert_many` is O(n²) (over 5 min for 5,000): the script turns that "
        "uniqueness scan off while seeding only, then checks the unique index rejects a duplicate before "
        "timing. Every timed call goes through the unmodified engine.",
        "",
        *render(results, reps, warmup, nbytes),
        "",
        *findings(results),
    ]
    text = "\n".join(body) + "\n"
    print(text)
    if not args.no_write:
        write_section("memory", text)
        print(f"written to {RESULTS} (## memory)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
