"""Hot conditional writes at 1,000 and 10,000 documents: the shape before issue 27 vs the shape now.

For each write of a session lease (take, renew, commit, give back) and a run lease (acquire,
heartbeat, release), on one embedded engine in one run: the previous shape (a filter with the
lease conditions beside `_id`, as main at 031f087 sends it) and the shape now (a filter on `_id`
alone, the conditions inside an update pipeline, the outcome read from the returned document),
timed in rotating order against one document of a collection of 1,000, then of 10,000 documents
(the same collection, grown between the two). Each timed write succeeds (its lease is free or
held by the writer when it runs), as on a hot path. The ratio 10,000 / 1,000 is the growth.

A second table (`--only inserts`): the inserts of issue 27.2's second part, each of a new
document, and the checkpoint save: a message insert (append, through `MemoryStore.insert_message`),
a summary insert, a run event insert, a LangGraph checkpoint put (`langgraph/saver.py` `put_doc`)
and a run's checkpoint save (`runs/service.py` `save_update`), against bc6dfd9's shapes on
parallel collections (`*_prev`: ObjectId ids and the compound unique indexes; the event and the
checkpoint put as upserts; the save filtered by lease and version), the same way.

A third table (`--only ticks`): the scheduler's tick claim (the write that advances the schedule)
and a tick's outcome write, through this tree's scheduler and bc6dfd9's, on one agent of 1,000 or
10,000 registered agents; four databases (version x size), all four measured in each round in
rotating order (`hot_writes_ticks.py`).

Seeding is not timed and skips the engine's per-insert uniqueness scan (as benchmarks/memory.py).

Run: `.venv/bin/python benchmarks/hot_writes.py [--rounds 15] [--only leases|inserts|ticks]`; writes
the `## hot writes` section of benchmarks/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bson import Binary
from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate import leases
from mongogate.config import MemorySettings
from mongogate.db import EmbeddedEngine
from mongogate.langgraph.saver import put_doc
from mongogate.memory import fenced
from mongogate.memory.compaction import summary_id
from mongogate.memory.keys import message_id
from mongogate.memory.store import MemoryStore
from mongogate.runs.service import SAVE_FIELDS, event_id, save_update

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.hot_writes_ticks import PREVIOUS as TICKS_PREVIOUS
from lib.hot_writes_ticks import previous_module, seed_schedule, tick_writes
from lib.results import command_line, parser, publish

from memory import unchecked_seeding  # beside this script

Doc = dict[str, Any]
Op = Callable[[], Awaitable[object]]
#: a write: its name, the timed call, an untimed call that runs first (or None)
Write = tuple[str, Op, Op | None]
SIZES = (1_000, 10_000)
TENANT = "bench"


def session_doc(i: int) -> Doc:
    return {
        "_id": f"s{i:06d}",
        "tenant": TENANT,
        "title": None,
        "metadata": {},
        "next_seq": 0,
        "locked_by": None,
        "locked_until": None,
        "lease_turn": None,
        "created_at": dt.datetime.now(dt.UTC),
        "last_activity": dt.datetime.now(dt.UTC),
    }


def run_doc(i: int) -> Doc:
    return {
        "_id": f"{TENANT}:r{i:06d}",
        "tenant": TENANT,
        "run_id": f"r{i:06d}",
        "version": 0,
        "status": "running",
        "state": None,
        "next_seq": 0,
        "locked_by": None,
        "locked_until": None,
    }


def previous_session_writes(coll: AsyncCollection[Doc], sid: str) -> list[Write]:
    """One take, renew, commit and give back in the filters main sent at 031f087."""
    lease = {"id": ""}

    async def take() -> object:
        lease["id"] = uuid.uuid4().hex
        now = dt.datetime.now(dt.UTC)
        mine = {"lease_turn": "t", "lease_text": "d"}
        doc = await coll.find_one_and_update(
            {"_id": sid, "tenant": TENANT, "$or": [*leases.free_conditions(now), mine]},
            {"$set": {"locked_by": lease["id"], "locked_until": now + dt.timedelta(seconds=30), **mine}},
            projection={"locked_by": 1, "locked_until": 1, "lease_turn": 1, "lease_text": 1, "pending": 1},
            return_document=ReturnDocument.BEFORE,
        )
        assert doc is not None
        return doc

    async def renew() -> object:
        now = dt.datetime.now(dt.UTC)
        doc = await coll.find_one_and_update(
            {"_id": sid, "tenant": TENANT, "lease_turn": "t", "locked_by": lease["id"]},
            {"$set": {"locked_until": now + dt.timedelta(seconds=30)}},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return doc

    async def commit() -> object:
        seq = {"$add": ["$next_seq", 1]}
        entry = {"key": "t:assistant", "turn_id": "t", "content": {"$literal": "answer"}, "seq": seq}
        doc = await coll.find_one_and_update(
            {"_id": sid, "tenant": TENANT, "locked_by": lease["id"], "lease_turn": "t"},
            [
                {
                    "$set": {
                        "next_seq": seq,
                        "pending": {"$concatArrays": [{"$ifNull": ["$pending", []]}, [entry]]},
                        "locked_by": None,
                        "locked_until": None,
                        "lease_turn": None,
                    }
                }
            ],
            projection={"pending": 1, "next_seq": 1},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        await coll.update_one({"_id": sid}, {"$pull": {"pending": {"key": "t:assistant"}}})  # the settle
        return doc

    async def give_back() -> object:  # after a take (untimed: `setup`)
        return await coll.update_one(
            {"_id": sid, "tenant": TENANT, "locked_by": lease["id"]},
            {"$set": {"locked_by": None, "locked_until": None, "lease_turn": None, "lease_text": None}},
        )

    return [
        ("session take", take, None),
        ("session renew", renew, None),
        ("session commit", commit, None),
        ("session give back", give_back, take),
    ]


def current_session_writes(coll: AsyncCollection[Doc], sid: str) -> list[Write]:
    """The same four writes as `memory/fenced.py` builds them (by `_id` alone)."""
    lease = {"id": ""}

    async def take() -> object:
        lease["id"] = uuid.uuid4().hex
        now = dt.datetime.now(dt.UTC)
        update = fenced.take(TENANT, "t", f"d{lease['id']}", lease["id"], now, now + dt.timedelta(seconds=30))
        doc = await coll.find_one_and_update(
            {"_id": sid},
            update,
            projection={"locked_by": 1, "lease_seq": 1, "lease_prev": 1, "pending": 1, "tenant": 1},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None and doc["locked_by"] == lease["id"]
        return doc

    async def renew() -> object:
        until = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        doc = await coll.find_one_and_update(
            {"_id": sid}, fenced.renew(TENANT, "t", lease["id"], until), return_document=ReturnDocument.AFTER
        )
        assert doc is not None and doc["locked_by"] == lease["id"]
        return doc

    async def commit() -> object:
        nonce = uuid.uuid4().hex
        now = dt.datetime.now(dt.UTC)
        entry = {
            "key": "t:assistant",
            "turn_id": "t",
            "content": "answer",
            "lease_id": lease["id"],
            "at": now,
        }
        doc = await coll.find_one_and_update(
            {"_id": sid},
            fenced.commit(TENANT, "t", lease["id"], entry, nonce, now),
            projection={"pending": 1, "next_seq": 1, "commit_nonce": 1},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None and doc["commit_nonce"] == nonce and len(doc["pending"]) == 1
        return doc

    taken: dict[str, Doc] = {}

    async def retake() -> object:
        doc = await take()
        assert isinstance(doc, dict)
        taken["doc"] = doc
        return doc

    async def give_back() -> object:  # after a take (untimed: `setup`)
        return await coll.update_one({"_id": sid}, fenced.give_back(lease["id"], taken["doc"]["lease_prev"]))

    return [
        ("session take", take, None),
        ("session renew", renew, None),
        ("session commit", commit, None),
        ("session give back", give_back, retake),
    ]


def previous_run_writes(coll: AsyncCollection[Doc], key: str) -> list[Write]:
    lease = {"id": ""}
    match = {"_id": key, "tenant": TENANT}

    async def acquire() -> object:
        lease["id"] = uuid.uuid4().hex
        now = dt.datetime.now(dt.UTC)
        doc = await coll.find_one_and_update(
            {"$and": [match, {"$or": leases.free_conditions(now)}]},
            {"$set": {"locked_by": lease["id"], "locked_until": now + dt.timedelta(seconds=30)}},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return doc

    async def heartbeat() -> object:
        now = dt.datetime.now(dt.UTC)
        doc = await coll.find_one_and_update(
            {**match, "locked_by": lease["id"]},
            {"$set": {"locked_until": now + dt.timedelta(seconds=30)}},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return doc

    async def release() -> object:
        res = await coll.update_one(
            {**match, "locked_by": lease["id"]}, {"$set": {"locked_by": None, "locked_until": None}}
        )
        assert res.modified_count == 1
        return res

    return [
        ("run acquire", acquire, None),
        ("run heartbeat", heartbeat, None),
        ("run release", release, None),
    ]


def current_run_writes(coll: AsyncCollection[Doc], key: str) -> list[Write]:
    lease = {"id": ""}
    match = {"_id": key, "tenant": TENANT}

    async def acquire() -> object:
        lease["id"] = uuid.uuid4().hex
        doc = await leases.acquire(coll, match, lease["id"], 30_000, dt.datetime.now(dt.UTC))
        assert doc is not None
        return doc

    async def heartbeat() -> object:
        doc = await leases.extend(coll, match, lease["id"], 30_000, dt.datetime.now(dt.UTC))
        assert doc is not None
        return doc

    async def release() -> object:
        assert await leases.release(coll, match, lease["id"])
        return True

    return [
        ("run acquire", acquire, None),
        ("run heartbeat", heartbeat, None),
        ("run release", release, None),
    ]


# ---------------------------------------------------------------- inserts (issue 27.2, after bc6dfd9)

#: sessions, runs and threads the seeded documents are spread over
SPREAD = 100
PAD = "x" * 200


def message_doc(i: int, sid: str | None = None) -> Doc:
    key = f"t{i}:user"
    return {
        "session_id": sid or f"s{i % SPREAD:06d}",
        "tenant": TENANT,
        "key": key,
        "seq": i,
        "turn_id": f"t{i}",
        "role": "user",
        "call_id": None,
        "content": PAD,
        "created_at": dt.datetime.now(dt.UTC),
    }


def summary_doc(i: int, sid: str | None = None) -> Doc:
    return {
        "session_id": sid or f"s{i % SPREAD:06d}",
        "tenant": TENANT,
        "key": f"summary:{i}",
        "through_seq": i,
        "text": PAD,
        "lease_id": None,
        "created_at": dt.datetime.now(dt.UTC),
    }


def event_doc(i: int, rid: str | None = None) -> Doc:
    return {
        "tenant": TENANT,
        "run_id": rid or f"r{i % SPREAD:06d}",
        "seq": i,
        "version": i,
        "status": "running",
        "state": {"step": i, "pad": PAD},
        "lease_id": "L",
        "at": dt.datetime.now(dt.UTC),
        "expire_at": None,
    }


def checkpoint_doc(i: int, thread: str | None = None) -> Doc:
    return {
        "tenant": TENANT,
        "thread_id": thread or f"th{i % SPREAD}",
        "checkpoint_ns": "",
        "checkpoint_id": f"{i:032d}",
        "parent_checkpoint_id": None,
        "type": "msgpack",
        "checkpoint": Binary(PAD.encode() * 2),
        "meta_type": "msgpack",
        "metadata": Binary(b"{}"),
    }


def checkpoint_key(doc: Doc) -> str:
    return f"{doc['tenant']}:{doc['thread_id']}:{doc['checkpoint_ns']}:{doc['checkpoint_id']}"


async def insert_collections(db: Any) -> dict[str, dict[str, AsyncCollection[Doc]]]:
    """Each written collection twice: as bc6dfd9 made it (compound unique indexes, ObjectId ids)
    and as this tree makes it (uniqueness in the derived `_id`); the same non-unique indexes."""
    out: dict[str, dict[str, AsyncCollection[Doc]]] = {"bc6dfd9": {}, "this tree": {}}
    for v, suffix in (("bc6dfd9", "_prev"), ("this tree", "")):
        m, sm, ev, cp = (db[n + suffix] for n in ("messages", "summaries", "run_events", "lg_checkpoints"))
        await m.create_index([("session_id", 1), ("seq", -1)], name="session_seq_desc")
        await sm.create_index([("session_id", 1), ("through_seq", -1)], name="session_through_desc")
        await cp.create_index([("tenant", 1), ("thread_id", 1), ("checkpoint_ns", 1), ("checkpoint_id", -1)])
        if v == "bc6dfd9":
            await m.create_index([("session_id", 1), ("key", 1)], unique=True, name="session_key_unique")
            await sm.create_index([("session_id", 1), ("key", 1)], unique=True, name="session_key_unique")
            await ev.create_index(
                [("tenant", 1), ("run_id", 1), ("seq", 1)], unique=True, name="run_seq_unique"
            )
        else:
            await ev.create_index([("tenant", 1), ("run_id", 1), ("seq", 1)], name="run_seq")
        out[v] = {"messages": m, "summaries": sm, "run_events": ev, "lg_checkpoints": cp}
    return out


async def seed_inserts(colls: dict[str, dict[str, AsyncCollection[Doc]]], have: int, size: int) -> None:
    for v, c in colls.items():
        keyed = v == "this tree"
        for name, make, key in (
            ("messages", message_doc, lambda d: message_id(d["session_id"], d["key"])),
            ("summaries", summary_doc, lambda d: summary_id(d["session_id"], d["key"])),
            ("run_events", event_doc, lambda d: event_id(d["tenant"], d["run_id"], d["seq"])),
            ("lg_checkpoints", checkpoint_doc, checkpoint_key),
        ):
            for lo in range(have, size, 1000):
                docs = [make(i) for i in range(lo, min(size, lo + 1000))]
                if keyed or name == "lg_checkpoints":  # checkpoints had derived ids already
                    docs = [{"_id": key(d), **d} for d in docs]
                await c[name].insert_many(docs, ordered=False)


def insert_writes(
    v: str,
    c: dict[str, AsyncCollection[Doc]],
    runs: AsyncCollection[Doc],
    run: str,
    store: MemoryStore | None,
    size: int,
) -> list[Write]:
    """One message insert (append), summary insert, run event insert, checkpoint put and checkpoint
    save, as bc6dfd9 sent them (`v` "bc6dfd9") or as this tree does; each a new document."""
    n = {"i": (10_000_000 if v == "bc6dfd9" else 20_000_000) + size * 100}  # fresh keys at each size
    sid, rid, thread = f"hot-{v[:4]}", f"hot-{v[:4]}", f"hot-{v[:4]}"

    def nxt() -> int:
        n["i"] += 1
        return n["i"]

    async def message() -> object:
        doc = message_doc(nxt(), sid)
        if store is None:
            return await c["messages"].insert_one(doc)
        return await store.insert_message({"_id": message_id(sid, doc["key"]), **doc})  # memory/store.py

    async def summary() -> object:
        doc = summary_doc(nxt(), sid)
        if v == "bc6dfd9":
            return await c["summaries"].insert_one(doc)
        return await c["summaries"].insert_one({"_id": summary_id(sid, doc["key"]), **doc})

    async def event() -> object:
        doc = event_doc(nxt(), rid)
        if v == "bc6dfd9":
            filt = {"tenant": TENANT, "run_id": rid, "seq": doc["seq"]}
            return await c["run_events"].update_one(filt, {"$setOnInsert": doc}, upsert=True)
        return await c["run_events"].insert_one({"_id": event_id(TENANT, rid, doc["seq"]), **doc})

    async def put() -> object:
        doc = checkpoint_doc(nxt(), thread)
        if v == "bc6dfd9":
            return await c["lg_checkpoints"].replace_one({"_id": checkpoint_key(doc)}, doc, upsert=True)
        await put_doc(c["lg_checkpoints"], checkpoint_key(doc), doc, replace=True)
        return None

    async def save() -> object:
        ver, now = nxt(), dt.datetime.now(dt.UTC)
        state = {"step": ver, "pad": PAD}
        if v == "bc6dfd9":
            before = await runs.find_one_and_update(
                {"_id": run, "tenant": TENANT, "locked_by": "L", "version": {"$lt": ver}},
                {
                    "$set": {"version": ver, "state": state, "status": "running", "updated_at": now},
                    "$inc": {"next_seq": 1},
                },
                projection={"next_seq": 1, "status": 1},
                return_document=ReturnDocument.BEFORE,
            )
            assert before is not None
            return before
        nonce = uuid.uuid4().hex
        values = {"state": state, "status": "running", "expire_at": None}
        after = await runs.find_one_and_update(
            {"_id": run},
            save_update(TENANT, "L", ver, values, now, nonce),
            projection=SAVE_FIELDS,
            return_document=ReturnDocument.AFTER,
        )
        assert after is not None and after["save_nonce"] == nonce
        return after

    return [
        ("message insert (append)", message, None),
        ("summary insert", summary, None),
        ("run event insert", event, None),
        ("checkpoint put (LangGraph)", put, None),
        ("checkpoint save (run)", save, None),
    ]


async def measure(ops: dict[str, list[Write]], rounds: int) -> dict[tuple[str, str], float]:
    """Median ms per (write, version); each round runs every version's writes in order (a write
    depends on the one before), the versions' order rotating."""
    samples: dict[tuple[str, str], list[float]] = {}
    versions = list(ops)
    for r in range(rounds + 2):
        order = versions[r % len(versions) :] + versions[: r % len(versions)]
        for v in order:
            for name, fn, setup in ops[v]:
                if setup is not None:
                    await setup()
                t = time.perf_counter()
                await fn()
                if r >= 2:  # two warm-up rounds
                    samples.setdefault((name, v), []).append(time.perf_counter() - t)
    return {k: statistics.median(s) * 1000 for k, s in samples.items()}


async def run(uri: str, rounds: int) -> dict[int, dict[tuple[str, str], float]]:
    out: dict[int, dict[tuple[str, str], float]] = {}
    async with AsyncMongoClient[Doc](uri, tz_aware=True) as client:
        db = client["bench_hot_writes"]
        sessions, runs = db["sessions"], db["runs"]
        await sessions.create_index("tenant", name="tenant")
        await runs.create_index([("tenant", 1), ("status", 1)], name="tenant_status")
        have = 0
        for size in SIZES:
            with unchecked_seeding():
                await sessions.insert_many([session_doc(i) for i in range(have, size)])
                await runs.insert_many([run_doc(i) for i in range(have, size)])
            have = size
            mid_a, mid_b = size // 2, size // 2 + 1  # the same positions in the collection each time
            ops = {
                "031f087": previous_session_writes(sessions, f"s{mid_a:06d}")
                + previous_run_writes(runs, f"{TENANT}:r{mid_a:06d}"),
                "this tree": current_session_writes(sessions, f"s{mid_b:06d}")
                + current_run_writes(runs, f"{TENANT}:r{mid_b:06d}"),
            }
            out[size] = await measure(ops, rounds)
    return out


async def run_inserts(uri: str, rounds: int) -> dict[int, dict[tuple[str, str], float]]:
    out: dict[int, dict[tuple[str, str], float]] = {}
    async with AsyncMongoClient[Doc](uri, tz_aware=True) as client:
        db = client["bench_hot_inserts"]
        colls = await insert_collections(db)
        runs = db["runs"]
        store = MemoryStore(db, MemorySettings())  # its `messages` is this tree's collection
        have = 0
        for size in SIZES:
            with unchecked_seeding():
                await seed_inserts(colls, have, size)
                await runs.insert_many([run_doc(i) for i in range(have, size)])
            have = size
            mid_a, mid_b = f"{TENANT}:r{size // 2:06d}", f"{TENANT}:r{size // 2 + 1:06d}"
            await runs.update_many({"_id": {"$in": [mid_a, mid_b]}}, {"$set": {"locked_by": "L"}})
            ops = {
                "bc6dfd9": insert_writes("bc6dfd9", colls["bc6dfd9"], runs, mid_a, None, size),
                "this tree": insert_writes("this tree", colls["this tree"], runs, mid_b, store, size),
            }
            out[size] = await measure(ops, rounds)
    return out


async def run_ticks(uri: str, rounds: int) -> dict[int, dict[tuple[str, str], float]]:
    """Both versions at both sizes, each in its own database, measured in one interleaved loop
    (the sizes alternate within each round, so a change of load hits both alike)."""
    core = previous_module()
    async with AsyncMongoClient[Doc](uri, tz_aware=True) as client:
        ops: dict[str, list[Write]] = {}
        for size in SIZES:
            for v, suffix, prev in ((TICKS_PREVIOUS, "_prev", core), ("this tree", "", None)):
                db = client[f"bench_hot_ticks_{size}{suffix}"]
                with unchecked_seeding():
                    await seed_schedule(db, 0, size)
                mid = f"agent-{size // 2:05d}"  # the same position in the collection
                ops[f"{v}@{size}"] = tick_writes(db, mid, prev)
        res = await measure(ops, rounds)
    return {
        size: {(n, v.split("@")[0]): ms for (n, v), ms in res.items() if v.endswith(f"@{size}")}
        for size in SIZES
    }


def render(res: dict[int, dict[tuple[str, str], float]], before: str = "031f087") -> str:
    small, large = SIZES
    names = list(dict.fromkeys(name for name, _ in res[small]))  # in the order run
    lines = [
        f"| write | {before} ms at {small:,} | at {large:,} | ratio "
        f"| this tree ms at {small:,} | at {large:,} | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        cells = []
        for v in (before, "this tree"):
            a, b = res[small][(name, v)], res[large][(name, v)]
            cells += [f"{a:.2f}", f"{b:.2f}", f"{b / a:.2f}x"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--only", choices=("leases", "inserts", "ticks"), help="one of the tables (default all)")
    args = p.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            res = asyncio.run(run(uri, args.rounds)) if args.only in (None, "leases") else None
            ins = asyncio.run(run_inserts(uri, args.rounds)) if args.only in (None, "inserts") else None
            ticks = asyncio.run(run_ticks(uri, args.rounds)) if args.only in (None, "ticks") else None
        finally:
            engine.stop()
    tables = []
    if res is not None:
        tables.append("Lease writes (issue 27.2, first part):\n\n" + render(res))
    if ins is not None:
        tables.append(
            "Inserts and the checkpoint save (issue 27.2, second part):\n\n" + render(ins, "bc6dfd9")
        )
    if ticks is not None:
        tables.append(
            "The scheduler's tick claim and outcome (issue 27, schedule of N agents):\n\n"
            + render(ticks, TICKS_PREVIOUS)
        )
    body = (
        f"Command: `{command_line('hot_writes.py', argv)}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} "
        f"cores; pymongo {version('pymongo')}, mongoeco {version('mongoeco')}; {started:%Y-%m-%d %H:%M} UTC; "
        f"whole run {time.perf_counter() - t0:.0f} s; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; medians of {args.rounds} rounds.\n\n"
        + "\n\n".join(tables)
        + "\n"
    )
    publish("hot writes", body, not args.no_write)


if __name__ == "__main__":
    main()
