"""Retrieval on the harder conversation set (`lib/longconv.py`, issue 39 item 6): hit@1/3/5/10,
evidence found@10 and update accuracy for BM25, vector-only (wordllama), RRF(BM25, vector) and
mongogate's `recall` (min_score 0 and the default floor), tuning and held-out halves, same run.

    python benchmarks/longconv_eval.py                     # all, writes RESULTS.md
    python benchmarks/longconv_eval.py --only bm25,rrf --no-write
    python benchmarks/longconv_eval.py --onnx DIR          # also mongogate with an ONNX embedder

**Update accuracy** (the `now` questions: the current value of a fact that changed): the share
whose latest statement is in the top 10 *and* ranked above every earlier statement of that fact
(`Question.stale`); a reader trusting the order would answer with the current value.

mongogate is the whole path (`conv_eval.MongogateRecall`: the turns imported as memories through
`recall.bulk`, recalled with `LongTermMemory.recall`), one database per conversation.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from conv_eval import AtDefaultFloor, Doc, MongogateRecall, Retriever, per_retriever
from lib.longconv import Conversation, Question, load
from lib.results import command_line, parser, publish

K = (1, 3, 5, 10)


def docs_of(conv: Conversation) -> list[Doc]:
    return [Doc(t.id, f"{t.speaker}: {t.text}") for t in conv.turns]


@dataclass
class Run:
    name: str
    #: (split, question, its top 10 ids)
    got: list[tuple[str, Question, list[str]]] = field(default_factory=list)
    seconds: float = 0.0

    def rows(self, split: str, kind: str | None = None) -> list[tuple[Question, list[str]]]:
        return [(q, top) for s, q, top in self.got if s == split and (kind is None or q.kind == kind)]

    def metrics(self, split: str, kind: str | None = None) -> dict[str, float]:
        rows = self.rows(split, kind)
        if not rows:
            return {}
        out = {
            f"hit@{k}": 100 * sum(bool(set(top[:k]) & set(q.evidence)) for q, top in rows) / len(rows)
            for k in K
        }
        out["ev@10"] = (
            100 * sum(len(set(top) & set(q.evidence)) / len(q.evidence) for q, top in rows) / len(rows)
        )
        out["n"] = len(rows)
        return out

    def update_accuracy(self, split: str) -> float:
        rows = self.rows(split, "now")
        return 100 * sum(current_first(q, top) for q, top in rows) / len(rows)


def current_first(q: Question, top: list[str]) -> bool:
    """The latest statement is in `top`, above every earlier statement of the same fact."""
    latest = q.evidence[0]
    if latest not in top:
        return False
    return all(s not in top or top.index(s) > top.index(latest) for s in q.stale)


async def evaluate(retriever: Retriever, convs: Sequence[Conversation]) -> Run:
    run = Run(retriever.name)
    started = time.perf_counter()
    for conv in convs:
        await retriever.index(conv.id, docs_of(conv))
        split = "tuning" if conv.tuning else "held-out"
        for q in conv.questions:
            run.got.append((split, q, (await retriever.search(conv.id, q.text, 10))[:10]))
    run.seconds = time.perf_counter() - started
    return run


def table(runs: Sequence[Run]) -> list[str]:
    out = []
    w = max(26, *(len(r.name) for r in runs))
    for split in ("tuning", "held-out"):
        n = int(runs[0].metrics(split)["n"])
        head = f"{split} half ({n} questions)"
        out.append(f"{head:<{w + 2}}  hit@1  hit@3  hit@5 hit@10  ev@10  update acc")
        for r in runs:
            m = r.metrics(split)
            cells = " ".join(f"{m[f'hit@{k}']:6.1f}" for k in K)
            out.append(f"  {r.name:<{w}} {cells} {m['ev@10']:6.1f} {r.update_accuracy(split):8.1f}")
    kinds = ("now", "before", "when", "steady")
    out.append("held-out hit@10 / ev@10 by kind: " + "  ".join(kinds))
    for r in runs:
        by_kind = [f"{m['hit@10']:.0f}/{m['ev@10']:.0f}" for m in (r.metrics("held-out", k) for k in kinds)]
        out.append(f"  {r.name:<{w}} " + "  ".join(f"{c:>8}" for c in by_kind))
    out.append("seconds (index + questions): " + ", ".join(f"{r.name} {r.seconds:.1f}" for r in runs))
    return out


async def run(only: set[str], onnx: Sequence[str] = ()) -> str:
    convs = load()
    runs = await per_retriever(only, lambda r: evaluate(r, convs))
    for folder in onnx:  # the same path, `[memory.embedding] provider = "onnx"`
        embedding = {"provider": "onnx", "path": folder, "dimensions": 384}
        async with MongogateRecall(embedding=embedding) as mg:
            runs.append(await evaluate(mg, convs))
            runs.append(await evaluate(AtDefaultFloor(mg), convs))
    turns = sum(len(c.turns) for c in convs)
    qs = sum(len(c.questions) for c in convs)
    head = f"longconv (data/longconv.jsonl): {len(convs)} conversations, {turns} turns, {qs} questions"
    return "\n".join(["```", command_line("longconv_eval.py", None), head, *table(runs), "```", ""])


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--only", default="bm25,vector,rrf,mongogate", help="comma-separated retrievers")
    p.add_argument("--onnx", action="append", default=[], help="an ONNX model folder (384 dimensions)")
    args = p.parse_args()
    body = asyncio.run(run(set(args.only.split(",")), args.onnx))
    publish("harder conversation set (issue 39 item 6)", body, not args.no_write)


if __name__ == "__main__":
    main()
