"""One tenant's large indexes beside a quiet tenant's, on the one index budget (red team: one
tenant filled it), and the cost of a ranking's membership test on rows of many terms.

    .venv/bin/python benchmarks/index_share.py [--hostile 16] [--budget-mb 48] [--rounds 200] [--no-write]

Part 1, through the real stores on the embedded engine (a thread of this process), the real local
model for memories: tenant `quiet` holds 20 memories and a session of 20 messages, recalled and
searched once; then tenant `loud` appends `--hostile` messages of 256 KiB of random words (each
about 9 MB of index by the estimate) to its SUBJECTS subjects in turn (a conversation scope each:
one scope alone is trimmed to 0.9 of the budget), searching the scope after each; after every
two rounds of the subjects, the quiet tenant recalls and searches once (its scopes the least recently
used while the flood goes on, as an idle tenant's). Run three times in the same process, on
fresh databases: the budget before this change (plain LRU across tenants: a subclass), and
`index_tenant_share` 1 and 0.25 (the default). Reported: the quiet tenant's scopes found gone at
its call (read whole again) and its p50 per call, the scopes evicted and not kept.

Part 2, in memory: a scope of 8 rows of 30,000 random terms each (what a 256 KiB message of
random words derives) and one of 1,000 rows of typical message terms; `rank` of a 5-token query
(depth 10) as before (each row's terms searched in its tuple, the old `Row.holds`, and the best
row's linking terms for the hop gone through at every search: a subclass) and now
(`ScopeIndex.lookup`, a set per row of more than SCAN terms; the last hop's terms kept while the
index is unchanged), interleaved; and the bytes per row (tracemalloc) before and after every row was ranked.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Container
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from lib.results import write_section  # benchmarks/lib/results.py, beside this script
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings, MemorySettings, MessageSearchSettings
from mongogate.engine.embedded import EmbeddedEngine
from mongogate.indexing import Entry, IndexBudget, ScopeIndex, fusion
from mongogate.indexing.rows import Row
from mongogate.memory.search import MessageSearch
from mongogate.memory.store import MemoryStore
from mongogate.memory_scope import SUBJECT_SEPARATOR
from mongogate.recall import IndexCache
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

HOSTILE = 256 * 1024
QUIET = MemoryScope("quiet")
#: the hostile tenant's subjects (conversations per subject), its messages in turn
SUBJECTS = 4
#: the quiet tenant calls once every this many hostile messages (less often than each hostile scope)
QUIET_EVERY = 2 * SUBJECTS
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def random_words(rng: random.Random, size: int) -> str:
    out: list[str] = []
    n = 0
    while n < size - 40:
        w = "".join(rng.choice(LETTERS) for _ in range(rng.randint(5, 9)))
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


async def flood(uri: str, db_name: str, share: float | None, hostile: int, budget_mb: int) -> dict[str, Any]:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, tz_aware=True)
    try:
        db = client[db_name]
        clock = ManualClock()
        memory = MemoryStore(db, MemorySettings(max_message_bytes=HOSTILE), clock)
        await memory.ensure_indexes()
        lt = LongTermSettings(index_budget_mb=budget_mb, index_tenant_share=share or 1.0, max_per_scope=1000)
        ltm = LongTermMemory(db, lt, LocalEmbedder(), clock, limits=LimitsSettings())
        if share is None:  # the budget before this change
            ltm.index = IndexCache(PlainLru(budget_mb * 2**20))
        await ltm.ensure_indexes()
        found = MessageSearch(memory, ltm.index.budget, None, MessageSearchSettings(), min_score=0.125)
        sid = await memory.create_session("quiet")
        for i in range(20):
            await ltm.remember(QUIET, f"quiet note {i}: the invoice INV-{i:04d} is due on day {i + 1}.")
            await memory.append("quiet", sid, f"t{i}", "user", f"quiet message {i} about invoice INV-{i:04d}")
            clock.advance(1)
        await ltm.recall(QUIET, "invoice INV-0007")
        await found.search("quiet", "invoice INV-0007", owner="quiet")
        model, dims = ltm.embedder.model, ltm.embedder.dimensions
        reads = 0  # the quiet tenant's scopes found gone (read whole again at its next call)
        rng = random.Random(5)
        keys = [f"loud{SUBJECT_SEPARATOR}agent-{k}" for k in range(SUBJECTS)]
        sessions = [await memory.create_session(key) for key in keys]
        quiet_ms: list[float] = []
        loud_ms: list[float] = []
        for i in range(hostile):
            key, sid = keys[i % SUBJECTS], sessions[i % SUBJECTS]
            await memory.append(key, sid, f"t{i}", "user", f"needle{i} " + random_words(rng, HOSTILE))
            clock.advance(1)
            t0 = time.perf_counter()
            await found.search(key, f"needle{i}", owner="loud")
            loud_ms.append((time.perf_counter() - t0) * 1000)
            if i % QUIET_EVERY != QUIET_EVERY - 1:
                continue  # the quiet tenant calls once every two rounds of the hostile one's subjects
            reads += (ltm.index.held(QUIET, model, dims) is None) + (found.index.held("quiet") is None)
            t0 = time.perf_counter()
            await ltm.recall(QUIET, "invoice INV-0007")
            await found.search("quiet", "invoice INV-0007", owner="quiet")
            quiet_ms.append((time.perf_counter() - t0) * 1000)
        budget = ltm.index.budget
        return {
            "share": "before (plain LRU)" if share is None else share,
            "quiet_rebuilds": reads,
            "quiet_p50": statistics.median(quiet_ms),
            "loud_p50": statistics.median(loud_ms),
            "evicted": sum(budget.evicted.values()),
            "unkept": sum(budget.unkept.values()),
            "held_mb": budget.nbytes() / 2**20,
            "loud_mb": budget.tenant_bytes()["loud"] / 2**20,
        }
    finally:
        await client.close()


class PlainLru(IndexBudget):
    """Before this change: least recently used first out across tenants, whoever holds what."""

    def _evict(self, keep: tuple[str, str]) -> bool:
        total = self.nbytes()
        while total > self.budget_bytes and len(self) > 1:
            oldest = next(iter(self._held))  # as before: the least recently used of any tenant
            if oldest == keep:
                break
            total -= self._held[oldest].nbytes()
            self.drop(*oldest)
            self.evicted[oldest[0]] += 1
        return True


class TupleScan(ScopeIndex):
    """Before this change: every row's terms searched in its tuple (`Row.holds`), and the hop's
    linking terms of the best row gone through at every search."""

    def lookup(self, row: Row) -> Container[str]:
        return row.names

    def _linking(self, start: int) -> list[str]:
        return fusion.linking(self.rows[start].names, self._df)  # as before: at every search


def scope(cls: type[ScopeIndex], rows: int, terms: int, seed: int) -> ScopeIndex:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(max(terms * 4, 2000))]
    idx = cls("m", 8, 0, distinct_words=False)
    for r in range(rows):
        names = rng.sample(vocab, terms) if terms < len(vocab) else vocab[:terms]
        if terms >= 10_000:  # random words: every one new
            names = [f"r{r}x{i}" for i in range(terms)] + vocab[:5]
        idx.add(Entry(f"m{r}", dict.fromkeys(names, 1), None, {"_id": f"m{r}"}))
    return idx


def rank_ms(idx: ScopeIndex, query: list[str], rounds: int) -> float:
    usable = np.ones(len(idx.rows), dtype=np.bool_)  # every row
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        idx.rank_rows(None, query, usable, depth=10, weight_text=1.0, weight_vector=0.0)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bytes_per_row(rows: int, terms: int, query: list[str]) -> tuple[float, float, int]:
    """tracemalloc bytes per row of a new scope, then after every row was ranked (its set built)."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    idx = scope(ScopeIndex, rows, terms, 1)
    built = tracemalloc.take_snapshot()
    for row in idx.rows:
        idx.lookup(row)
    ranked = tracemalloc.take_snapshot()
    tracemalloc.stop()
    first = sum(s.size_diff for s in built.compare_to(before, "filename"))
    second = sum(s.size_diff for s in ranked.compare_to(before, "filename"))
    return first / rows, second / rows, idx.lookup_bytes // rows


def holds(rounds: int) -> list[str]:
    lines = []
    for label, rows, terms in (("8 rows of 30,000 terms", 8, 30_000), ("1,000 rows of 60 terms", 1000, 60)):
        query = ["w1", "w2", "w3", "w4", "w5"]
        old, new = scope(TupleScan, rows, terms, 2), scope(ScopeIndex, rows, terms, 2)
        first = rank_ms(new, query, 1)  # builds the sets of the rows it ranks, and the hop's terms
        pairs = [(rank_ms(old, query, 1), rank_ms(new, query, 1)) for _ in range(rounds)]
        o, n = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        lines.append(f"| {label} | {o:.3f} | {n:.3f} | {o / n:.1f}x | {first:.3f} |")
    return lines


def memory_lines() -> list[str]:
    out = []
    for label, rows, terms in (
        ("1,000 rows of 20 terms (memories)", 1000, 20),
        ("1,000 rows of 200 terms (long messages)", 1000, 200),
        ("8 rows of 30,000 terms (hostile)", 8, 30_000),
    ):
        b0, b1, counted = bytes_per_row(rows, terms, [])
        out.append(f"| {label} | {b0:,.0f} | {b1:,.0f} | +{b1 - b0:,.0f} | {counted:,} |")
    return out


async def floods(uri: str, hostile: int, budget_mb: int) -> list[dict[str, Any]]:
    return [
        await flood(uri, f"share_{i}", share, hostile, budget_mb) for i, share in enumerate((None, 1.0, 0.25))
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hostile", type=int, default=16)
    p.add_argument("--budget-mb", type=int, default=48)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    load0, started = os.getloadavg(), time.monotonic()
    hold_lines = holds(args.rounds)
    mem_lines = memory_lines()
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp) / "engine")
        try:
            runs = anyio.run(floods, engine.start(), args.hostile, args.budget_mb)
        finally:
            engine.stop()
    load1 = os.getloadavg()
    cmd = " ".join(["benchmarks/index_share.py", *sys.argv[1:]])
    body = "\n".join(
        [
            f"Command: `.venv/bin/python {cmd}`  ",
            f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other work; "
            f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end; whole run "
            f"{time.monotonic() - started:.0f} s; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
            "",
            f"Quiet tenant (20 memories, 20 messages) beside `loud` appending {args.hostile} messages of "
            f"256 KiB of random words to its {SUBJECTS} subjects in turn, budget {args.budget_mb} MB, "
            "the stores on the embedded engine:",
            "",
            "| index_tenant_share | quiet scopes read whole again | quiet recall+search p50 ms "
            "| loud search p50 ms | scopes evicted | not kept | held MB (loud's) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *(
                f"| {r['share']} | {r['quiet_rebuilds']} | {r['quiet_p50']:.0f} | {r['loud_p50']:.0f} "
                f"| {r['evicted']} | {r['unkept']} | {r['held_mb']:.1f} ({r['loud_mb']:.1f}) |"
                for r in runs
            ),
            "",
            f"A ranking (`rank_rows`, 5 tokens, depth 10) in ms, median of {args.rounds} interleaved pairs:",
            "",
            "| scope | before: tuple scan, hop terms each search | after | ratio | after, first ranking |",
            "|---|---:|---:|---:|---:|",
            *hold_lines,
            "",
            "Bytes per row (tracemalloc), built, then after every row's lookup was made (rows of at "
            "most SCAN = 64 terms keep their tuple):",
            "",
            "| scope | per row | after | added | counted in nbytes |",
            "|---|---:|---:|---:|---:|",
            *mem_lines,
            "",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("index tenant share", body)


if __name__ == "__main__":
    main()
