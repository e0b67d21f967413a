"""`mongogate memory import` of N memories into one scope on the embedded engine, against the
baseline of `remember` one at a time measured in the same run, in the same scope once it is full.

    python benchmarks/memory_import.py --count 1000 --step 250 --remember 5

Goal (issue 26): 10,000 memories within 120 s (>= 50/s). A second import of the same file is
timed too (all `unchanged`).
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.results import command_line, parser, publish

from mongogate.config import load_settings
from mongogate.db import Database
from mongogate.recall.bulk import import_lines, read_lines
from mongogate.recall.embedding import make_embedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

TOPICS = ["invoice", "parcel", "meeting", "password", "garden", "flight", "doctor", "recipe", "car", "loan"]


def rows(n: int) -> bytes:
    out = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        out.append(
            json.dumps(
                {
                    "text": f"Note {i}: the {topic} reference is {topic[:3].upper()}-{1000 + i} "
                    f"for customer {i % 97}.",
                    "namespace": f"notes/{topic}",
                    "key": f"note-{i}",
                    "metadata": {"topic": topic},
                }
            )
        )
    return ("\n".join(out) + "\n").encode()


async def run(count: int, step: int, remembers: int) -> str:
    """Import `count` memories `step` at a time; after each step, `remembers` single `remember`s at
    the same collection size (the baseline, interleaved); then the whole file again (unchanged)."""
    lines = [
        "```",
        command_line("memory_import.py", None),
        f"{'memories':>9} {'import/s':>9} {'remember/s':>11} {'ratio':>6}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None, server={"data_dir": tmp}, memory={"long_term": {"max_per_scope": 10_000_000}}
        )
        db = Database(settings.database, settings.server.data_dir)
        await db.open()
        try:
            store = LongTermMemory(
                db.memory,
                settings.memory.long_term,
                make_embedder(settings.memory.embedding),
                limits=settings.limits,
            )
            await store.ensure_indexes()
            await store.embedder.embed(["warm up"])
            data = rows(count)
            chunks = data.splitlines(keepends=True)
            scope = MemoryScope("bench")
            t_total = 0.0
            for at in range(0, count, step):
                part = b"".join(chunks[at : at + step])
                t0 = time.perf_counter()
                await import_lines(store, scope, read_lines(io.BytesIO(part), 1 << 20))
                t_import = time.perf_counter() - t0
                t_total += t_import
                t0 = time.perf_counter()
                for i in range(remembers):
                    await store.remember(scope, f"One more fact {at}-{i} about the harbour.")
                t_rem = (time.perf_counter() - t0) / remembers
                n = min(at + step, count)
                lines.append(
                    f"{n:>9} {n - at:>4}/{t_import:4.1f}s={(n - at) / t_import:5.1f} "
                    f"{1 / t_rem:>8.1f} {(n - at) / t_import * t_rem:>6.1f}x"
                )
            t0 = time.perf_counter()
            again = await import_lines(store, scope, read_lines(io.BytesIO(data), 1 << 20))
            t_again = time.perf_counter() - t0
        finally:
            await db.close()
    lines += [
        f"import of {count}: {t_total:.1f} s in all = {count / t_total:.1f}/s (goal: 10,000 within 120 s)",
        f"second import of the same {count}: {t_again:.1f} s = {count / t_again:.0f}/s; {again.counts()}",
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--step", type=int, default=250)
    p.add_argument("--remember", type=int, default=5)
    args = p.parse_args()
    body = asyncio.run(run(args.count, args.step, args.remember))
    publish("memory import at 10,000 (derived ids)", body, not args.no_write)


if __name__ == "__main__":
    main()
