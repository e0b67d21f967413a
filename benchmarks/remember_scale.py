"""`remember` (keyed and unkeyed), `forget` and `recall` in scopes filled by `memory import`, each
against an empty scope measured in the same run, interleaved round by round (issue 38 item 4).

    python benchmarks/remember_scale.py [--sizes 1000,10000] [--rounds 30] [--burst 100] [--no-write]

Scopes, each filled through `recall.bulk.import_lines` (what `mongogate memory import` runs) with
keyed memories: `empty` (the baseline), `empty, 256 writes` (an empty scope after 128 remembers
and forgets: its revision document names its last 256 writes, as the imported scopes' do; until
that list became text it cost what the imported scopes did), one per size with room to grow
(`max_per_scope` 10,000,000),
and `full`: the largest size imported into a store whose `max_per_scope` is that size (the
default 10,000), where a new fact is refused (`quota_exceeded`) and a keyed remember an update.
Each round runs, per scope and in a rotated order: recall, remember of a new unkeyed fact,
recall, remember of the round's key (created; in `full` an imported key: updated), the key with a
new text (updated), the same again (unchanged), the same with `ttl_days` (an expiry set), a new
text for the scope's hot key (a history that grows past `MAX_HISTORY`), forget of the round's key.
Rounds run right after the imports ("after import"), then again after a burst of `--burst`
untimed remembers and forgets into every scope ("after remembers"). p50 per operation and scope,
and each ratio to the empty scope's p50 in the same phase. Through the store (no MCP), on the
embedded engine in its own process, as the server runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.results import command_line, parser, publish

from mongogate.config import load_settings
from mongogate.db import Database
from mongogate.errors import QuotaExceeded
from mongogate.recall.bulk import import_lines, read_lines
from mongogate.recall.coherence import CHANGES
from mongogate.recall.embedding import make_embedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

TOPICS = ["invoice", "parcel", "meeting", "password", "garden", "flight", "doctor", "recipe", "car", "loan"]
OPS = (
    "recall",
    "new fact (unkeyed)",
    "key: first",
    "key: new text",
    "key: same text",
    "key: expiry set",
    "hot key: new text",
    "forget key",
)
Samples = dict[str, dict[str, list[float]]]


def rows(n: int) -> bytes:
    out = []
    for i in range(n):
        t = TOPICS[i % len(TOPICS)]
        text = f"Note {i}: the {t} reference is {t[:3].upper()}-{1000 + i} for customer {i % 97}."
        out.append(json.dumps({"text": text, "namespace": "notes", "key": f"note-{i}"}))
    return ("\n".join(out) + "\n").encode()


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


async def timed(samples: list[float] | None, call: Awaitable[object]) -> None:
    t0 = time.perf_counter()
    with contextlib.suppress(QuotaExceeded):  # the full scope refuses a new memory: timed all the same
        await call
    if samples is not None:
        samples.append((time.perf_counter() - t0) * 1000)


async def one_round(
    store: LongTermMemory, scope: MemoryScope, r: int, tag: str, got: dict[str, list[float]] | None
) -> None:
    """The round's operations in one scope (`got` None: untimed). In a full scope the round's key
    and the hot key are imported ones (a new key would be refused): its forget frees a place that
    the next round's new fact takes."""

    def s(op: str) -> list[float] | None:
        return None if got is None else got.setdefault(op, [])

    full = store.settings.max_per_scope < 10_000_000
    ns, key, hot = ("notes", f"note-{1 + r * 7}", "note-0") if full else ("default", f"new-{tag}", "hot")
    await timed(s("recall"), store.recall(scope, f"the parcel reference for customer {r % 97}"))
    await timed(s("new fact (unkeyed)"), store.remember(scope, f"A new fact {tag} about the harbour."))
    await timed(s("recall"), store.recall(scope, "which invoice reference did the customer get"))
    await timed(s("key: first"), store.remember(scope, f"Fact {tag} under its key.", namespace=ns, key=key))
    await timed(s("key: new text"), store.remember(scope, f"Fact {tag}, changed.", namespace=ns, key=key))
    await timed(s("key: same text"), store.remember(scope, f"Fact {tag}, changed.", namespace=ns, key=key))
    await timed(
        s("key: expiry set"),
        store.remember(scope, f"Fact {tag}, changed.", namespace=ns, key=key, ttl_days=30),
    )
    await timed(s("hot key: new text"), store.remember(scope, f"Hot fact of {tag}.", namespace=ns, key=hot))
    await timed(s("forget key"), store.forget(scope, namespace=ns, key=key))


async def phase(
    plan: list[tuple[str, LongTermMemory, MemoryScope]], rounds: int, label: str, started: float
) -> Samples:
    samples: Samples = {name: {} for name, _, _ in plan}
    for r in range(rounds):
        k = r % len(plan)
        for name, store, scope in plan[k:] + plan[:k]:
            await one_round(store, scope, r, f"{label}-{r}", samples[name])
        print(
            f"  {label} round {r + 1}/{rounds} at {time.perf_counter() - started:.0f} s, load {load()}",
            file=sys.stderr,
        )
    return samples


def table(samples: Samples, label: str) -> list[str]:
    names = list(samples)
    out = [
        f"{label}: p50 ms (ratio to the empty scope)",
        "",
        "| operation | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for op in OPS:
        base = statistics.median(samples["empty"][op])
        cells = []
        for name in names:
            p50 = statistics.median(samples[name][op])
            cells.append(f"{p50:.1f}" if name == "empty" else f"{p50:.1f} ({p50 / base:.2f}x)")
        out.append(f"| {op} | " + " | ".join(cells) + " |")
    return [*out, ""]


async def run(sizes: list[int], rounds: int, burst: int) -> str:
    started = time.perf_counter()
    lines = [f"Command: `{command_line('remember_scale.py', None)}`; load average {load()} at the start.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(None, server={"data_dir": tmp})
        db = Database(settings.database, Path(tmp))
        await db.open()
        try:
            embedder = make_embedder(settings.memory.embedding)
            roomy = settings.memory.long_term.model_copy(update={"max_per_scope": 10_000_000})
            store = LongTermMemory(db.memory, roomy, embedder, limits=settings.limits)
            full = LongTermMemory(
                db.memory,
                settings.memory.long_term.model_copy(update={"max_per_scope": max(sizes)}),
                embedder,
                limits=settings.limits,
            )
            await store.ensure_indexes()
            await full.ensure_indexes()  # each store learns there are no uuid-id memories
            await embedder.embed(["warm up"])
            plan: list[tuple[str, LongTermMemory, MemoryScope]] = [("empty", store, MemoryScope("empty"))]
            # an empty scope whose revision document names its last CHANGES writes, as any scope's
            # does after that many writes (an import's included): what the 10,000 scopes carry
            warm = MemoryScope("warm")
            for i in range(CHANGES // 2):
                gone = await store.remember(warm, f"A passing fact {i}.")
                await store.forget(warm, id=gone.id)
            plan.append((f"empty, {CHANGES} writes", store, warm))
            targets = [(f"{n:,}", store, n) for n in sizes] + [(f"{max(sizes):,} full", full, max(sizes))]
            for name, st, n in targets:
                scope = MemoryScope(f"s{len(plan)}")
                t0 = time.perf_counter()
                report = await import_lines(st, scope, read_lines(io.BytesIO(rows(n)), 1 << 20))
                took = time.perf_counter() - t0
                lines.append(
                    f"- imported {report.created:,} memories into `{name}` in {took:.1f} s (load {load()})"
                )
                plan.append((name, st, scope))
            lines.append("")
            lines += table(await phase(plan, rounds, "after import", started), "After the imports")
            for i in range(burst):  # untimed: the scopes after many remembers and forgets
                for _, st, scope in plan:
                    await one_round(st, scope, rounds + i, f"burst-{i}", None)
            lines += table(
                await phase(plan, rounds, "after remembers", started), f"After {burst} more rounds"
            )
        finally:
            await db.close()
    lines.append(f"Load average {load()} at the end; {time.perf_counter() - started:.0f} s in all.")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--rounds", type=int, default=30)  # 12: p50s spread 1.3-2.9x on a busy machine
    p.add_argument("--burst", type=int, default=100)
    args = p.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    body = asyncio.run(run(sizes, args.rounds, args.burst))
    publish("remember at scale (issue 38 item 4)", body, not args.no_write)


if __name__ == "__main__":
    main()
