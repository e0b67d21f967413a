"""Hot conditional writes at 1,000 and 10,000 documents: the shape before issue 27 vs the shape now.

For each write of a session lease (take, renew, commit, give back) and a run lease (acquire,
heartbeat, release), on one embedded engine in one run: the previous shape (a filter with the
lease conditions beside `_id`, as main at 031f087 sends it) and the shape now (a filter on `_id`
alone, the conditions inside an update pipeline, the outcome read from the returned document),
timed in rotating order against one document of a collection of 1,000, then of 10,000 documents
(the same collection, grown between the two). Each timed write succeeds (its lease is free or
held by the writer when it runs), as on a hot path. The ratio 10,000 / 1,000 is the growth.

Seeding is not timed and skips the engine's per-insert uniqueness scan (as benchmarks/memory.py).

Run: `.venv/bin/python benchmarks/hot_writes.py [--rounds 15]`; writes the `## hot writes`
section of benchmarks/RESULTS.md unless `--no-write`.
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

from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate import leases
from mongogate.db import EmbeddedEngine
from mongogate.memory import fenced

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import command_line, parser, publish

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


def render(res: dict[int, dict[tuple[str, str], float]]) -> str:
    small, large = SIZES
    names = list(dict.fromkeys(name for name, _ in res[small]))  # in the order run
    lines = [
        f"| write | 031f087 ms at {small:,} | at {large:,} | ratio "
        f"| this tree ms at {small:,} | at {large:,} | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        cells = []
        for v in ("031f087", "this tree"):
            a, b = res[small][(name, v)], res[large][(name, v)]
            cells += [f"{a:.2f}", f"{b:.2f}", f"{b / a:.2f}x"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            res = asyncio.run(run(uri, args.rounds))
        finally:
            engine.stop()
    body = (
        f"Command: `{command_line('hot_writes.py', argv)}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} "
        f"cores; pymongo {version('pymongo')}, mongoeco {version('mongoeco')}; {started:%Y-%m-%d %H:%M} UTC; "
        f"whole run {time.perf_counter() - t0:.0f} s; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; medians of {args.rounds} rounds.\n\n"
        + render(res)
        + "\n"
    )
    publish("hot writes", body, not args.no_write)


if __name__ == "__main__":
    main()
