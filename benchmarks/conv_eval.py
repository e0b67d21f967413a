"""Retrieval quality on the conversation set of `convset.py`: hit@1/5/10 and evidence found@10 for
BM25, vector-only (wordllama), RRF(BM25, vector) and mongogate's `recall` (its ranking, at
`min_score` 0, and again at the configured default floor), in the same run.

    python benchmarks/conv_eval.py            # all four, both halves, writes RESULTS.md
    python benchmarks/conv_eval.py --only bm25,rrf --no-write

Every turn of a conversation is one document (its text as said, "user: ..." / "assistant: ...");
each conversation is searched on its own (mongogate: one scope per conversation, the turns stored
as memories through `mongogate.recall.bulk.import_lines`, recalled with `recall(limit=10)`).

To measure another retriever, implement `Retriever` and call `evaluate`:

    class Mine:
        name = "mine"
        async def index(self, conv_id: str, docs: Sequence[Doc]) -> None: ...
        async def search(self, conv_id: str, query: str, k: int) -> list[str]: ...  # doc ids, best first

    report = asyncio.run(evaluate(Mine()))   # Report: .rows(), .metrics("held-out")
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.convset import Conversation, build
from lib.results import command_line, parser, publish

K = (1, 5, 10)


@dataclass(frozen=True)
class Doc:
    id: str
    text: str


class Retriever(Protocol):
    """What `evaluate` needs: index one conversation's turns, then answer queries against it."""

    name: str

    async def index(self, conv_id: str, docs: Sequence[Doc]) -> None: ...

    async def search(self, conv_id: str, query: str, k: int) -> list[str]: ...


@dataclass
class Report:
    name: str
    #: (split, kind) -> list of (hit rank or None, share of evidence in the top 10)
    per_question: dict[tuple[str, str], list[tuple[int | None, float]]] = field(default_factory=dict)
    seconds: float = 0.0

    def metrics(self, split: str, kind: str | None = None) -> dict[str, float]:
        rows = [
            r
            for (s, k), rs in self.per_question.items()
            if s == split and (kind is None or k == kind)
            for r in rs
        ]
        if not rows:
            return {}
        out = {
            f"hit@{k}": 100 * sum(1 for rank, _ in rows if rank is not None and rank <= k) / len(rows)
            for k in K
        }
        out["ev@10"] = 100 * sum(share for _, share in rows) / len(rows)
        out["n"] = len(rows)
        return out


def docs_of(conv: Conversation) -> list[Doc]:
    return [Doc(t.id, f"{t.speaker}: {t.text}") for t in conv.turns]


async def evaluate(retriever: Retriever, convs: Sequence[Conversation] | None = None) -> Report:
    """Index each conversation, ask its questions (top 10), score against the labelled evidence."""
    convs = build() if convs is None else convs
    report = Report(retriever.name)
    started = time.perf_counter()
    for conv in convs:
        await retriever.index(conv.id, docs_of(conv))
        split = "tuning" if conv.tuning else "held-out"
        for q in conv.questions:
            got = (await retriever.search(conv.id, q.text, 10))[:10]
            ranks = [i + 1 for i, d in enumerate(got) if d in q.evidence]
            share = len(set(got) & set(q.evidence)) / len(q.evidence)
            report.per_question.setdefault((split, q.kind), []).append((min(ranks) if ranks else None, share))
    report.seconds = time.perf_counter() - started
    return report


# -- baselines ------------------------------------------------------------------------------------

STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "do",
        "does",
        "did",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "how",
        "when",
        "where",
        "why",
        "there",
        "here",
        "so",
        "as",
        "not",
        "no",
        "yes",
        "have",
        "has",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
        "just",
        "about",
        "into",
        "than",
        "then",
        "them",
        "they",
        "he",
        "she",
        "his",
        "her",
        "now",
        "s",
        "t",
    ]
)
_WORD = re.compile(r"[\w-]+")


def tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOP]


class BM25:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over lowercased words without stop words, no stemming."""

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.convs: dict[str, tuple[list[str], list[Counter[str]], dict[str, int], float]] = {}

    async def index(self, conv_id: str, docs: Sequence[Doc]) -> None:
        bags = [Counter(tokens(d.text)) for d in docs]
        df: Counter[str] = Counter()
        for bag in bags:
            df.update(bag.keys())
        avg = sum(sum(b.values()) for b in bags) / max(len(bags), 1)
        self.convs[conv_id] = ([d.id for d in docs], bags, dict(df), avg)

    def scores(self, conv_id: str, query: str) -> list[tuple[str, float]]:
        ids, bags, df, avg = self.convs[conv_id]
        n = len(ids)
        terms = set(tokens(query))
        out = []
        for i, bag in enumerate(bags):
            length = sum(bag.values())
            s = 0.0
            for t in terms:
                f = bag.get(t, 0)
                if f:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    s += idf * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * length / avg))
            if s > 0:
                out.append((ids[i], s))
        return sorted(out, key=lambda x: -x[1])

    async def search(self, conv_id: str, query: str, k: int) -> list[str]:
        return [i for i, _ in self.scores(conv_id, query)[:k]]


class Vector:
    """Cosine over wordllama's unit vectors (the model mongogate embeds with offline)."""

    name = "vector"

    def __init__(self) -> None:
        from mongogate.recall.embedding import LocalEmbedder

        self.embedder = LocalEmbedder()
        self.convs: dict[str, tuple[list[str], Any]] = {}

    async def index(self, conv_id: str, docs: Sequence[Doc]) -> None:
        import numpy as np

        vectors = await self.embedder.embed([d.text for d in docs])
        self.convs[conv_id] = ([d.id for d in docs], np.asarray(vectors, dtype=np.float32))

    async def ranked(self, conv_id: str, query: str) -> list[str]:
        import numpy as np

        ids, matrix = self.convs[conv_id]
        q = np.asarray((await self.embedder.embed([query]))[0], dtype=np.float32)
        order = np.argsort(-(matrix @ q), kind="stable")
        return [ids[i] for i in order]

    async def search(self, conv_id: str, query: str, k: int) -> list[str]:
        return (await self.ranked(conv_id, query))[:k]


class RRF:
    """Reciprocal-rank fusion of BM25 and the vector ranking: sum of 1 / (k + rank)."""

    name = "rrf"

    def __init__(self, bm25: BM25, vector: Vector, k: int = 60) -> None:
        self.bm25, self.vector, self.k = bm25, vector, k

    async def index(self, conv_id: str, docs: Sequence[Doc]) -> None:
        if conv_id not in self.bm25.convs:
            await self.bm25.index(conv_id, docs)
        if conv_id not in self.vector.convs:
            await self.vector.index(conv_id, docs)

    async def search(self, conv_id: str, query: str, k: int) -> list[str]:
        fused: dict[str, float] = defaultdict(float)
        for ranking in (
            [i for i, _ in self.bm25.scores(conv_id, query)],
            await self.vector.ranked(conv_id, query),
        ):
            for rank, doc in enumerate(ranking[:100], start=1):
                fused[doc] += 1 / (self.k + rank)
        return sorted(fused, key=lambda d: -fused[d])[:k]


class MongogateRecall:
    """mongogate's `recall` through the library API on the embedded engine: one scope (tenant) per
    conversation, the turns imported as memories keyed by turn id. Open with `async with`.

    Each conversation gets a database of its own: the embedded engine's insert cost grows with the
    collection (docs/decisions/recall-provenance-import.md), and one shared collection of 1,728
    memories would take the import most of ten minutes; recall's ranking is the same either way."""

    name = "mongogate"

    def __init__(self, min_score: float | None = 0.0, embedding: dict[str, Any] | None = None) -> None:
        #: 0: the ranking itself (what item 3 compares); None: the configured default floor
        self.min_score = min_score
        #: `[memory.embedding]` overrides (another embedder: `longconv_eval.py --onnx DIR`)
        self.embedding = embedding or {}
        if self.embedding:
            self.name = f"mongogate, {Path(self.embedding['path']).name}"
        self.tmp = tempfile.TemporaryDirectory()
        self.db: Any = None
        self.settings: Any = None
        self.stores: dict[str, Any] = {}

    async def __aenter__(self) -> MongogateRecall:
        from mongogate.config import load_settings
        from mongogate.db import Database
        from mongogate.recall.embedding import make_embedder

        self.settings = load_settings(
            None, server={"data_dir": self.tmp.name}, memory={"embedding": self.embedding}
        )
        self.db = Database(self.settings.database, self.settings.server.data_dir)
        await self.db.open()
        self.embedder = make_embedder(self.settings.memory.embedding)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.db.close()
        self.tmp.cleanup()

    async def index(self, conv_id: str, docs: Sequence[Doc]) -> None:
        from mongogate.recall.bulk import import_lines, read_lines
        from mongogate.recall.model import MemoryScope
        from mongogate.recall.store import LongTermMemory

        s = self.settings
        store = LongTermMemory(
            self.db.memory.client[f"convset_{conv_id}"], s.memory.long_term, self.embedder, limits=s.limits
        )
        await store.ensure_indexes()
        self.stores[conv_id] = store
        data = "".join(json.dumps({"text": d.text, "key": d.id}) + "\n" for d in docs).encode()
        report = await import_lines(store, MemoryScope(conv_id), read_lines(io.BytesIO(data), 1 << 20))
        assert not report.bad, report.bad

    async def search(self, conv_id: str, query: str, k: int) -> list[str]:
        from mongogate.recall.model import MemoryScope

        found = await self.stores[conv_id].recall(
            MemoryScope(conv_id), query, limit=k, min_score=self.min_score
        )
        return [str(m.key) for m in found.memories]


class AtDefaultFloor:
    """The same stores as `MongogateRecall`, recalled at the configured `min_score` (what an agent
    gets without asking for a floor: answers under it are left out, so found evidence drops)."""

    name = "mongogate, default floor"

    def __init__(self, mg: MongogateRecall) -> None:
        from mongogate.config import LongTermSettings

        self.mg = mg
        self.name = f"{mg.name}, floor {LongTermSettings().min_score}"

    async def index(self, conv_id: str, docs: Sequence[Doc]) -> None:
        if conv_id not in self.mg.stores:
            await self.mg.index(conv_id, docs)

    async def search(self, conv_id: str, query: str, k: int) -> list[str]:
        from mongogate.recall.model import MemoryScope

        found = await self.mg.stores[conv_id].recall(MemoryScope(conv_id), query, limit=k)
        return [str(m.key) for m in found.memories]


# -- the run --------------------------------------------------------------------------------------


def table(reports: Sequence[Report]) -> list[str]:
    out = []
    for split in ("tuning", "held-out"):
        n = int(reports[0].metrics(split)["n"])
        out.append(f"{split} half ({n} questions)     hit@1  hit@5  hit@10  ev@10")
        for r in reports:
            m = r.metrics(split)
            out.append(
                f"  {r.name:<24} {m['hit@1']:6.1f} {m['hit@5']:6.1f} {m['hit@10']:7.1f} {m['ev@10']:6.1f}"
            )
    kinds = sorted({k for r in reports for (_, k) in r.per_question})
    out.append("held-out hit@10 / ev@10 by kind: " + "  ".join(kinds))
    for r in reports:
        cells = []
        for kind in kinds:
            m = r.metrics("held-out", kind)
            cells.append(f"{m['hit@10']:.0f}/{m['ev@10']:.0f}")
        out.append(f"  {r.name:<24} " + "  ".join(f"{c:>10}" for c in cells))
    out.append("seconds (index + questions): " + ", ".join(f"{r.name} {r.seconds:.1f}" for r in reports))
    return out


R = TypeVar("R")


async def per_retriever(only: set[str], evaluate: Callable[[Retriever], Awaitable[R]]) -> list[R]:
    """`evaluate` on each retriever `only` names, in the tables' order (BM25, vector, their RRF,
    mongogate at min_score 0 and at the default floor over one store)."""
    bm25, vector = BM25(), Vector()
    out = []
    if "bm25" in only:
        out.append(await evaluate(bm25))
    if "vector" in only:
        out.append(await evaluate(vector))
    if "rrf" in only:
        out.append(await evaluate(RRF(bm25, vector)))
    if "mongogate" in only:
        async with MongogateRecall() as mg:
            out.append(await evaluate(mg))
            out.append(await evaluate(AtDefaultFloor(mg)))
    return out


async def run(only: set[str]) -> str:
    convs = build()
    reports = await per_retriever(only, lambda r: evaluate(r, convs))
    turns = sum(len(c.turns) for c in convs)
    qs = sum(len(c.questions) for c in convs)
    head = f"convset seed 26: {len(convs)} conversations, {turns} turns, {qs} questions"
    return "\n".join(["```", command_line("conv_eval.py", None), head, *table(reports), "```", ""])


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--only", default="bm25,vector,rrf,mongogate", help="comma-separated retrievers")
    args = p.parse_args()
    body = asyncio.run(run(set(args.only.split(","))))
    publish("conversation set retrieval (issue 26)", body, not args.no_write)


if __name__ == "__main__":
    main()
