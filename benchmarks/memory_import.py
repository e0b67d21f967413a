"""`mongogate memory import` of N memories into one scope on the embedded engine, against the
baseline of `remember` one at a time measured in the same run, in the same scope once it is full;
and a re-run of each part (all `unchanged`) against its first import, interleaved part by part.

    python benchmarks/memory_import.py --count 10000 --step 1000 --remember 5

Goals: 10,000 memories within 120 s (>= 50/s, issue 26); a re-run at most 0.6x the first import
of the same lines, and a killed import resuming at that pace over the lines it had stored (issue
38 item 5). After the parts: the whole file again, and a resume: half of the file imported into
a second scope (what a killed import leaves), then the whole file, against the first import of
the same lines. The load average is printed per part.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
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


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


async def timed_import(
    store: LongTermMemory, scope: MemoryScope, data: bytes
) -> tuple[float, dict[str, int]]:
    t0 = time.perf_counter()
    report = await import_lines(store, scope, read_lines(io.BytesIO(data), 1 << 20))
    return time.perf_counter() - t0, report.counts()


async def run(count: int, step: int, remembers: int) -> str:
    """Import `count` memories `step` at a time; after each step, the same step again (the re-run,
    interleaved) and `remembers` single `remember`s at the same collection size (the baseline);
    then the whole file again, and a resume from half of it in a second scope."""
    lines = [
        "```",
        command_line("memory_import.py", None),
        f"{'memories':>9} {'import/s':>17} {'re-run/s':>17} {'re-run':>7} "
        f"{'remember/s':>11} {'ratio':>6}  load",
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
            t_total = t_again_parts = 0.0
            firsts: list[float] = []
            for at in range(0, count, step):
                part = b"".join(chunks[at : at + step])
                t_import, _ = await timed_import(store, scope, part)
                t_again, again = await timed_import(store, scope, part)
                assert again["unchanged"] == len(chunks[at : at + step]), again
                t_total += t_import
                firsts.append(t_import)
                t_again_parts += t_again
                t0 = time.perf_counter()
                for i in range(remembers):
                    await store.remember(scope, f"One more fact {at}-{i} about the harbour.")
                t_rem = (time.perf_counter() - t0) / remembers
                n = min(at + step, count)
                lines.append(
                    f"{n:>9} {n - at:>5}/{t_import:5.1f}s={(n - at) / t_import:5.1f} "
                    f"{n - at:>5}/{t_again:5.1f}s={(n - at) / t_again:5.0f} {t_again / t_import:>6.2f}x "
                    f"{1 / t_rem:>8.1f} {(n - at) / t_import * t_rem:>6.1f}x  {load()}"
                )
            t_rerun, again = await timed_import(store, scope, data)
            half = b"".join(chunks[: count // 2])
            other = MemoryScope("resumed")
            t_half, _ = await timed_import(store, other, half)
            t_resume, resumed = await timed_import(store, other, data)
            # the first import of the second half, from the parts above (`step` divides it evenly or nearly)
            rest = sum(firsts[len(firsts) // 2 :]) if len(firsts) > 1 else t_total / 2
        finally:
            await db.close()
    lines += [
        f"import of {count}: {t_total:.1f} s in all = {count / t_total:.1f}/s (goal: 10,000 within 120 s)",
        f"re-run of each part right after it: {t_again_parts:.1f} s = "
        f"{t_again_parts / t_total:.2f}x the first (goal: at most 0.6x)",
        f"the whole file again: {t_rerun:.1f} s = {t_rerun / t_total:.2f}x the first import; {again}",
        f"resume: {count // 2} of {count} stored ({t_half:.1f} s), then the whole file: {t_resume:.1f} s "
        f"{resumed} = {t_resume / rest:.2f}x the first import of the lines it had left ({rest:.1f} s)",
        f"load average at the end: {load()}",
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
    publish("memory import and re-run at 10,000 (issue 38 item 5)", body, not args.no_write)


if __name__ == "__main__":
    main()
