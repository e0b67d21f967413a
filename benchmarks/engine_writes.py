"""Write shapes on the embedded engine at 1,000 and 10,000 documents: mongoeco's own SQLite engine
against the one mongogate runs (`compat.mongoeco.FlatInsertEngine`), interleaved round by round.

Why: every hot write's shape is chosen from this table (docs/decisions/engine-writes.md). The two
engines differ only in the payload `_id` scan a string or ObjectId insert skips; each round runs
every shape once on each engine variant (the override switched on and off in one engine), in a
rotated order, on collections of 1 KB documents seeded in bulk.

Run: `.venv/bin/python benchmarks/engine_writes.py [--rounds 9] [--no-write]` (about two minutes).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection

from mongogate.compat import mongoeco as shim
from mongogate.db import EmbeddedEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import command_line, parser, publish

from memory import unchecked_seeding  # beside this script

Doc = dict[str, Any]
SIZES = (1_000, 10_000)
INDEXES: dict[str, Callable[[Collection[Doc]], object]] = {
    "_id only": lambda c: None,
    "+ non-unique compound, TTL and text indexes": lambda c: (
        c.create_index([("tenant", 1), ("owner", 1), ("k", 1)]),
        c.create_index([("exp", 1)], expireAfterSeconds=0),
        c.create_index([("text", "text")]),
    ),
    "+ single-field unique index": lambda c: c.create_index([("h", 1)], unique=True),
    "+ compound unique index": lambda c: c.create_index([("tenant", 1), ("owner", 1), ("k", 1)], unique=True),
}


def fresh() -> Doc:
    return {
        "_id": uuid.uuid4().hex,
        "h": uuid.uuid4().hex,
        "tenant": "t",
        "owner": "o",
        "k": uuid.uuid4().hex,
        "text": "a new note",
        "v": "b" * 1000,
    }


@contextmanager
def variant(flat: bool) -> Iterator[None]:
    """Run with mongoeco's own unique check (flat=False) or mongogate's override."""
    from mongoeco.engines.sqlite import SQLiteEngine

    if flat:
        yield
        return
    name = shim.UNIQUE_CHECK
    override = shim.FlatInsertEngine.__dict__[name]
    setattr(shim.FlatInsertEngine, name, getattr(SQLiteEngine, name))
    try:
        yield
    finally:
        setattr(shim.FlatInsertEngine, name, override)


def ms(op: Callable[[], object]) -> float:
    start = time.perf_counter()
    op()
    return (time.perf_counter() - start) * 1000


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args(argv)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        client: MongoClient[Doc] = MongoClient(engine.start())
        colls: dict[tuple[str, int], Collection[Doc]] = {}
        for n, (label, make) in enumerate(INDEXES.items()):
            for size in SIZES:
                coll = client["bench"][f"c{n}_{size}"]
                make(coll)
                with unchecked_seeding():
                    for j in range(0, size, 1000):
                        coll.insert_many(
                            [
                                {
                                    "_id": f"x{i}",
                                    "h": f"h{i}",
                                    "tenant": "t",
                                    "owner": "o",
                                    "k": f"k{i}",
                                    "text": "a note",
                                    "v": "a" * 1000,
                                }
                                for i in range(j, min(size, j + 1000))
                            ]
                        )
                colls[label, size] = coll
        shapes: dict[str, Callable[[Collection[Doc]], object]] = {
            "insert_one": lambda c: c.insert_one(fresh()),
            "upsert by _id, no match": lambda c: c.update_one(
                {"_id": uuid.uuid4().hex},
                {"$setOnInsert": {"h": uuid.uuid4().hex, "k": uuid.uuid4().hex, "v": "c"}},
                upsert=True,
            ),
            "update by _id": lambda c: c.update_one({"_id": "x5"}, {"$inc": {"n": 1}}),
            "find_one by _id": lambda c: c.find_one({"_id": "x7"}),
        }
        times: dict[tuple[str, str, int, bool], list[float]] = {}
        keys = [
            (label, shape, size, flat)
            for label in INDEXES
            for shape in shapes
            for size in SIZES
            for flat in (False, True)
        ]
        for r in range(args.rounds):
            rotated = keys[r % len(keys) :] + keys[: r % len(keys)]
            for label, shape, size, flat in rotated:
                if shape != "insert_one" and label != "_id only" and shape != "upsert by _id, no match":
                    continue
                op, coll = shapes[shape], colls[label, size]
                with variant(flat):
                    t = ms(partial(op, coll))
                times.setdefault((label, shape, size, flat), []).append(t)
        engine.stop()
    lines = [
        f"Command: `{command_line('engine_writes.py', argv)}`  ",
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"whole run {time.time() - started:.0f} s; load average at the end "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg())
        + f"; medians of {args.rounds} rounds.",
        "",
        "| collection | write | mongoeco ms at 1,000 | at 10,000 | ratio "
        "| mongogate's engine at 1,000 | at 10,000 | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label in INDEXES:
        for shape in shapes:
            if (label, shape, SIZES[0], False) not in times:
                continue
            cells = []
            for flat in (False, True):
                a, b = (statistics.median(times[label, shape, s, flat]) for s in SIZES)
                cells += [f"{a:.1f}", f"{b:.1f}", f"{b / a:.2f}x"]
            lines.append(f"| {label} | {shape} | " + " | ".join(cells) + " |")
    publish("engine writes", "\n".join(lines) + "\n", not args.no_write)


if __name__ == "__main__":
    main()
