"""Recall benchmark: how often `recall` finds the right memory, and how long it takes.

On one embedded engine, with the real local model (wordllama, 256 dimensions), through
`LongTermMemory.recall` (the code the `recall` tool runs):

- **quality**: the labelled set of benchmarks/lib/recall_set.py (facts; questions asked in other
  words, and questions naming an exact identifier with near-miss twins among the facts),
  recall@1 and recall@3 for exact-term only (`method="text"`), meaning only (`"vector"`) and
  fused (the default), on the facts alone and among 1,000 generated distractor memories in the
  same scope, on the combined set and on each half of its fixed tuning / held-out split;
- **fusion tuning**: the candidate lists of every question (text and vector, 50 deep), fused
  offline by plain reciprocal rank fusion and by `fuse_recall` over a grid of k, text weight,
  exactness power and candidate depth; the chosen default is marked, the grid's best is picked
  on the tuning half only, and the held-out half is shown beside it;
- **latency** at 1,000 and 10,000 memories in one scope, interleaved in one run: `recall`
  (fused, text, vector) next to an exact brute-force scan (embed the query, read every vector
  of the scope with bare pymongo, cosine in numpy, top 5); and the vector paths the embedded
  engine allows, fetch and rank only: the store's find (its liveness filter `$or`, and the
  same as one clause `$not: {$type: date, $lte: now}`), its `$text` find (both ways), the
  projected find without a liveness filter (sorted newest first), the
  same find unsorted on an index (tenant, owner, embedding_model), whole documents, vectors
  stored as arrays of doubles instead of binary float32, and numpy alone over vectors already
  in memory (the floor).

Seeding is not timed: the facts go through `remember`, the distractors through `insert_many`
in the same document shape, with the engine's per-insert uniqueness scan off (as in
benchmarks/memory.py; the distractors are distinct by construction).

Run: `.venv/bin/python benchmarks/recall.py` (a few minutes on 2 cores) or `--quick` (1,000
only, fewer reps); writes the `## recall` section of benchmarks/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import os
import platform
import random
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from pymongo import ASCENDING, AsyncMongoClient

from mongogate.config import LongTermSettings
from mongogate.db import EmbeddedEngine
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope, RecallMethod
from mongogate.recall.pages import live
from mongogate.recall.searchindex import ranker as search
from mongogate.recall.searchindex.rank import DEFAULT_FUSION, Fusion, fuse, fuse_recall
from mongogate.recall.searchindex.terms import text_search
from mongogate.recall.searchindex.vectors import scan_top
from mongogate.recall.store import LongTermMemory, text_hash
from mongogate.recall.vectors import pack, unpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.memory_report import Stats
from lib.recall_report import DEPTH, KINDS, LIMIT, Run, Tuned, render
from lib.recall_set import DID, FACTS, HALVES, QUESTIONS, WHAT, WHEN, WHO, split
from lib.results import RESULTS, publish

from memory import loadavg, unchecked_seeding  # beside this script

Doc = dict[str, Any]
SCOPE = MemoryScope("bench")
METHODS: tuple[RecallMethod, ...] = ("text", "vector", "fused")  # as recall_report.METHODS
#: the arrays-of-doubles path is timed up to this size (11x slower at 1,000: too slow to repeat at 10,000)
DOUBLES_UP_TO = 1_000


# -- the memories ------------------------------------------------------------------------------


def distractors(n: int, seed: int = 18) -> list[str]:
    rng = random.Random(seed)
    return [
        f"{rng.choice(WHO)} {rng.choice(DID)} {rng.choice(WHAT)} {rng.choice(WHEN)} (note {i})."
        for i in range(n)
    ]


async def remember_facts(ltm: LongTermMemory) -> dict[str, str]:
    """The labelled facts through the real `remember`; fact id -> memory id."""
    return {fid: (await ltm.remember(SCOPE, text, namespace="facts")).id for fid, text in FACTS}


async def seed_distractors(ltm: LongTermMemory, texts: list[str], colls: list[Any]) -> None:
    """`texts` as memories shaped like a remembered one, bulk-inserted into each of `colls`."""
    template = await ltm.memories.find_one({"tenant": SCOPE.tenant})
    assert template is not None
    vectors = await ltm.embedder.embed(texts)
    docs = []
    for text, vec in zip(texts, vectors, strict=True):
        doc = {**template, "_id": uuid.uuid4().hex, "text": text, "text_hash": text_hash(text)}
        doc |= {"namespace": "notes", "ns_path": ["notes"], "embedding": pack(vec)}
        docs.append(doc)
    with unchecked_seeding():
        for coll in colls:
            for start in range(0, len(docs), 2000):
                batch = docs[start : start + 2000]
                if coll.name.endswith("_doubles"):
                    batch = [d | {"embedding": [float(x) for x in unpack(d["embedding"])]} for d in batch]
                await coll.insert_many([dict(d) for d in batch])


# -- quality -----------------------------------------------------------------------------------


HALF = {q: half for half in HALVES for q in split(half)}


async def quality(ltm: LongTermMemory, ids: dict[str, str]) -> dict[str, dict[str, tuple[int, int, int]]]:
    """method -> kind or half ("tuning", "held-out") -> (hits at 1, hits at 3, questions)."""
    out: dict[str, dict[str, tuple[int, int, int]]] = {}
    for method in METHODS:
        per: dict[str, list[int]] = {k: [0, 0, 0] for k in (*KINDS, *HALVES)}
        for kind, question, fid in QUESTIONS:
            got = [m.id for m in (await ltm.recall(SCOPE, question, limit=3, method=method)).memories]
            for k in (kind, "all", HALF[(kind, question, fid)]):
                per[k][0] += got[:1] == [ids[fid]]
                per[k][1] += ids[fid] in got[:3]
                per[k][2] += 1
        out[method] = {k: (v[0], v[1], v[2]) for k, v in per.items()}
    return out


@dataclass(frozen=True)
class Cand:
    """One question's candidate lists, `DEPTH` deep."""

    kind: str
    half: str
    question: str
    want: str
    text: list[tuple[str, str]]  # $text hits (id, text), best textScore first
    vector: list[str]
    raw: list[str]  # $text ids for the query as typed (stop words and all)


async def candidates(ltm: LongTermMemory, ids: dict[str, str]) -> list[Cand]:
    base = ltm.scoped(SCOPE, None, ltm.clock.now())
    texts = {d["_id"]: d["text"] async for d in ltm.memories.find(base, {"text": 1})}
    out = []
    for kind, question, fid in QUESTIONS:
        text = [i for i, _ in await search.by_text(ltm, base, question, DEPTH)]
        vector = [i for i, _ in await search.by_scan(ltm, base, await ltm.embed_one(question), DEPTH)]
        meta = {"$meta": "textScore"}
        raw = await ltm.memories.find({**base, "$text": {"$search": question}}, {"score": meta}).to_list()
        raw_ids = [str(d["_id"]) for d in sorted(raw, key=lambda d: (-d["score"], d["_id"]))][:DEPTH]
        half = HALF[(kind, question, fid)]
        out.append(Cand(kind, half, question, ids[fid], [(i, texts[i]) for i in text], vector, raw_ids))
    return out


Ranker = Callable[[Cand], list[str]]


def hits(cands: list[Cand], rank: Ranker, kind: str = "all") -> tuple[int, int]:
    """(right memory first, right memory in the top 3) over the questions of `kind` (or half)."""
    at1 = at3 = 0
    for c in cands:
        if kind in ("all", c.kind, c.half):
            got = rank(c)
            at1 += got[:1] == [c.want]
            at3 += c.want in got[:3]
    return at1, at3


def _ids(ranked: list[tuple[str, float]]) -> list[str]:
    return [i for i, _ in ranked]


def fused_at(f: Fusion, depth: int) -> Ranker:
    return lambda c: _ids(fuse_recall(c.question, c.text[:depth], c.vector[:depth], f))


#: the neighbours of the default shown in RESULTS (the whole grid is printed to stderr)
GRID = list(
    itertools.product((1.0, 5.0, 10.0, 30.0, 60.0), (0.5, 1.0, 2.0), (0.0, 1.0, 2.0, 3.0), (10, 20, 50))
)


def tuning(cands: list[Cand]) -> list[Tuned]:
    """Each variant's hits: combined, per half, per kind; whether it is the default."""
    variants: list[tuple[str, Ranker, bool]] = [
        ("text only", lambda c: [i for i, _ in c.text], False),
        ("vector only", lambda c: c.vector, False),
        (
            "plain RRF k=60, $text on the query as typed",
            lambda c: _ids(fuse([c.raw[:20], c.vector[:20]])),
            False,
        ),
        ("plain RRF k=60", lambda c: _ids(fuse([[i for i, _ in c.text][:20], c.vector[:20]])), False),
    ]
    for k, w, p, depth in GRID:
        f = Fusion(k=k, text_weight=w, exactness_power=p)
        label = f"k={k:g}, text weight {w:g}, exactness power {p:g}, depth {depth}"
        variants.append(
            (label, fused_at(f, depth), f == DEFAULT_FUSION and depth == search.candidates(LIMIT))
        )
    return [
        Tuned(
            label,
            hits(cands, r),
            hits(cands, r, "tuning"),
            hits(cands, r, "held-out"),
            hits(cands, r, "paraphrase")[0],
            hits(cands, r, "identifier")[0],
            default,
        )
        for label, r, default in variants
    ]


# -- latency -----------------------------------------------------------------------------------

Op = Callable[[str], Awaitable[object]]


def top(matrix: np.ndarray[Any, Any], q: np.ndarray[Any, Any], k: int) -> list[int]:
    scores = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    best = np.argpartition(-scores, k)[:k]
    return [int(i) for i in best[np.argsort(-scores[best])]]


def ops(
    ltm: LongTermMemory, db: Any, cache: np.ndarray[Any, Any], vectors: dict[str, np.ndarray[Any, Any]]
) -> dict[str, Op]:
    """The timed operations; `vectors` holds each question's embedding (the paths rank only)."""
    coll, doubles, indexed = db["memories"], db["memories_doubles"], db["memories_indexed"]
    scope = {"tenant": SCOPE.tenant, "owner": SCOPE.owner}
    model = {**scope, "embedding_model": ltm.embedder.model}
    now = ltm.clock.now()
    store = {**ltm.scoped(SCOPE, None, now), "embedding_model": ltm.embedder.model}  # as by_scan
    one = {**model, "expires_at": {"$not": {"$type": "date", "$lte": now}}}  # live() as one clause
    assert "$or" in live(now)
    embed = ltm.embed_one

    async def brute(q: str) -> object:  # the exact floor: every vector, bare pymongo, numpy
        v = np.asarray(await embed(q), dtype=np.float32)
        docs = await coll.find(scope, {"embedding": 1}).to_list()
        return top(np.stack([unpack(d["embedding"]) for d in docs]), v, LIMIT)

    def path(c: Any, filt: Doc, proj: Doc | None, sort: bool) -> Op:
        async def run(q: str) -> object:
            v = vectors[q]
            kw: dict[str, Any] = {"sort": [("updated_at", -1), ("_id", -1)], "limit": 20_000} if sort else {}
            docs = await c.find(filt, proj, **kw).to_list()
            if isinstance(docs[0]["embedding"], list):
                return top(np.asarray([d["embedding"] for d in docs], dtype=np.float32), v, LIMIT)
            return scan_top(v, [(d["_id"], d["embedding"]) for d in docs], LIMIT)

        return run

    async def floor(q: str) -> object:
        return top(cache, vectors[q], LIMIT)

    def text_find(filt: Doc) -> Op:  # by_text's read: ids and scores of the $text matches
        async def run(q: str) -> object:
            meta = {"$meta": "textScore"}
            query = {**filt, "$text": {"$search": text_search(q) or q}}
            return await coll.find(query, {"score": meta}, sort=[("score", meta)], limit=20_000).to_list()

        return run

    def recall(method: RecallMethod) -> Op:
        return lambda q: ltm.recall(SCOPE, q, limit=LIMIT, method=method)

    table: dict[str, Op] = {
        "recall (fused)": recall("fused"),
        "recall (text)": recall("text"),
        "recall (vector)": recall("vector"),
        "brute-force exact scan": brute,
        "path: find sorted newest first + numpy (when max_per_scope > max_scan)": path(
            coll, model, {"embedding": 1}, True
        ),
        "path: the store's find (scope, model, liveness), unsorted + numpy": path(
            coll, store, {"embedding": 1}, False
        ),
        "path: the same, liveness as one clause ($not $type date $lte)": path(
            coll, one, {"embedding": 1}, False
        ),
        "text: the store's $text find (scope, liveness)": text_find(ltm.scoped(SCOPE, None, now)),
        "text: the same, liveness as one clause": text_find(
            {k: v for k, v in one.items() if k != "embedding_model"}
        ),
        "path: find without a liveness filter, unsorted + numpy": path(coll, model, {"embedding": 1}, False),
        "path: find on (tenant, owner, embedding_model), unsorted + numpy": path(
            indexed, model, {"embedding": 1}, False
        ),
        "path: whole documents + numpy": path(coll, model, None, False),
        "path: vectors as arrays of doubles + numpy": path(doubles, model, {"embedding": 1}, False),
        "path: numpy alone over vectors held in memory": floor,
    }
    return table


async def latency(ops_: dict[str, Op], reps: int, warmup: int) -> dict[str, Stats]:
    """Each operation `reps` times, interleaved (one round runs every operation once, in a
    rotated order), on the questions in turn; `warmup` untimed rounds first."""
    names = list(ops_)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + reps):
        question = QUESTIONS[r % len(QUESTIONS)][1]
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = time.perf_counter()
            await ops_[name](question)
            if r >= warmup:
                samples[name].append(time.perf_counter() - t0)
    return {n: Stats.of(v) for n, v in samples.items()}


# -- the run -----------------------------------------------------------------------------------


async def fresh(client: AsyncMongoClient[Doc]) -> tuple[LongTermMemory, Any, dict[str, str]]:
    db = client[f"recall_{uuid.uuid4().hex[:8]}"]
    settings = LongTermSettings(vector_search="scan")  # the defaults: a quota of 10,000 per scope
    ltm = LongTermMemory(db, settings, LocalEmbedder())
    await ltm.ensure_indexes()
    ids = await remember_facts(ltm)
    return ltm, db, ids


async def run(uri: str, sizes: list[int], reps: int, warmup: int) -> Run:
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True)
    try:
        ltm, db, ids = await fresh(client)
        print(f"quality on the {len(FACTS)} facts alone", file=sys.stderr)
        result = Run({0: await quality(ltm, ids)}, tuning(await candidates(ltm, ids)), [], {}, {}, {})
        for size in sizes:
            ltm, db, ids = await fresh(client)
            extra = size - len(FACTS)
            t0 = time.perf_counter()
            await db["memories_indexed"].create_index(
                [("tenant", ASCENDING), ("owner", ASCENDING), ("embedding_model", ASCENDING)]
            )
            facts = await ltm.memories.find({}).to_list()
            colls = [ltm.memories, db["memories_indexed"]]
            with unchecked_seeding():
                await db["memories_indexed"].insert_many([dict(d) for d in facts])
                if size <= DOUBLES_UP_TO:
                    doubles = [d | {"embedding": [float(x) for x in unpack(d["embedding"])]} for d in facts]
                    await db["memories_doubles"].insert_many(doubles)
                    colls.append(db["memories_doubles"])
            await seed_distractors(ltm, distractors(extra), colls)
            result.seed_s[size] = time.perf_counter() - t0
            assert await ltm.memories.count_documents({}) == size
            if size == 1_000:
                print("quality among 1,000 memories", file=sys.stderr)
                result.quality[size] = await quality(ltm, ids)
                result.tuning_1k = tuning(await candidates(ltm, ids))
            docs = await ltm.memories.find({}, {"embedding": 1}).to_list()
            cache = np.stack([unpack(d["embedding"]) for d in docs])
            questions = [q for _, q, _ in QUESTIONS]
            vecs = [np.asarray(v, dtype=np.float32) for v in await ltm.embedder.embed(questions)]
            print(f"latency at {size:,} memories", file=sys.stderr)
            table = ops(ltm, db, cache, dict(zip(questions, vecs, strict=True)))
            if size > DOUBLES_UP_TO:
                table = {k: v for k, v in table.items() if "doubles" not in k}
            result.reps[size] = reps if size <= 1_000 else max(3, reps // 2)
            result.latency[size] = await latency(table, result.reps[size], warmup)
            await client.drop_database(db.name)
        return result
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1,000 memories only, 5 reps")
    parser.add_argument("--sizes", type=int, nargs="+", help="memories per latency run (default 1000 10000)")
    parser.add_argument("--reps", type=int, help="timed rounds per size (default 15, quick 5)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help=f"print only; do not update {RESULTS.name}")
    args = parser.parse_args(argv)
    sizes: list[int] = args.sizes or ([1_000] if args.quick else [1_000, 10_000])
    reps: int = args.reps or (5 if args.quick else 15)
    if reps < 1 or args.warmup < 0 or any(s < len(FACTS) + LIMIT for s in sizes):
        parser.error(f"need reps >= 1, warmup >= 0 and sizes >= {len(FACTS) + LIMIT}")
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else "python"
    command = shlex.join([python, "benchmarks/recall.py", *(sys.argv[1:] if argv is None else argv)])
    started, load_before = dt.datetime.now(dt.UTC), loadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            result = asyncio.run(run(uri, sizes, reps, args.warmup))
        finally:
            engine.stop()
    elapsed = time.perf_counter() - t0
    for t in result.tuning:
        print(
            f"grid  {t.label:60s} @1 {t.all[0]:3d} @3 {t.all[1]:3d}  tuning {t.tuning}  held-out {t.held}  "
            f"paraphrase @1 {t.para1:2d}  identifier @1 {t.id1:2d}",
            file=sys.stderr,
        )
    body = [
        f"Command: `{command}` (`make bench` runs it with the defaults; `--quick`: 1,000 memories only, "
        "5 rounds).  ",
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores; pymongo {version('pymongo')}, mongoeco {version('mongoeco')} (embedded "
        f"engine, its own thread), wordllama {version('wordllama')} (256 dimensions, the default local "
        f"model); niceness {os.nice(0)}; {started:%Y-%m-%d %H:%M} UTC; whole run {elapsed:.0f} s; "
        "load average (1, 5, 15 min) "
        f"{load_before} at the start, {loadavg()} at the end (a shared machine: absolute times move with "
        "the load, the ratios much less).",
        "",
        *render(result, reps, args.warmup),
    ]
    publish("recall", "\n".join(body) + "\n", not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
