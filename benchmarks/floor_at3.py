"""The floor at the top (issue 39 item 5): does `min_score` (and the evidence gate of
`mongogate/scoring.py`) empty questions about things never stored while answerable questions keep
their answers in the top 3?

    python benchmarks/floor_at3.py                                  # wordllama, writes RESULTS.md
    python benchmarks/floor_at3.py --onnx /path/to/all-MiniLM-L6-v2 --no-write

Four sets, each split in a tuning and a held-out half: recall_set.py (facts and paraphrased or
identifier questions, one scope), paraphrase_set.py (paraphrased questions over facts with
near-identical twins, one scope), convset.py (six conversations, seed 26) and longconv.py (eight
conversations of ~480 turns, facts that change). Questions about things never stored:
`longconv_text.UNRELATED_TUNING` asked of every tuning scope, `UNRELATED_HELD_OUT` (other texts) of
every held-out scope; recall_set's and paraphrase_set's scopes are asked both.

Every recall runs through `ScopeIndex.rank` (the ranking `recall` runs, no database) at depth 10.
**recall@3** is the share of answerable questions with an answer (an evidence turn, the fact) among
the first three kept; **emptied** the share of never-stored questions with nothing kept. A rule's
parameters are chosen on the tuning halves: the most never-stored questions emptied (all tuning
scopes pooled) such that no tuning half loses more than 1 point of recall@3 against no floor; then
reported once on the held-out halves, at @3 and @10.

Rules (a recall keeps memory i when `shown_i >= floor`, `shown_i = 0.9 x best + 0.1 x own_i` when
the recall is evidenced, `0.1 x own_i` otherwise; `scoring.shown`):

- `gate`: evidenced when the best match's cosine >= C or it holds >= S of the query's idf mass
  (`scoring.evidenced`: the rule in force, C = S = 0.175, floor 0.125);
- `gate, any memory's cosine`: the same with the highest cosine of any memory of the scope (the
  rule now in force, `scoring.calibration(model)`);
- `cosine only`: evidenced when that cosine >= C (words alone never evidence a recall).
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib import paraphrase_set, recall_set
from lib.convset import build as convset
from lib.longconv import UNRELATED_HELD_OUT, UNRELATED_TUNING
from lib.longconv import load as longconv
from lib.results import command_line, parser, publish
from recall_quality import Embed, cached, index_of, ranked

from mongogate import scoring
from mongogate.recall.embedding import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder
from mongogate.recall.inprocess.scope_index import ScopeIndex
from mongogate.textrank import query_tokens

SETS = ("rs", "ps", "cv", "lc")


@dataclass(frozen=True)
class Case:
    """One recall as the floor sees it: the ids ranked (best first), their fused scores, and the
    best match's evidence (its cosine, the top 10's highest cosine, its share of the query)."""

    q: str
    want: frozenset[str] | None  # None: nothing stored is about it
    ids: tuple[str, ...]
    fused: np.ndarray
    cos_best: float
    cos_any: float
    share_best: float


def case(idx: ScopeIndex, q: str, vec: list[float], want: set[str] | None) -> Case:
    got = ranked(idx, q, vec, depth=10)
    if not got:
        return Case(q, None if want is None else frozenset(want), (), np.zeros(0), 0.0, 0.0, 0.0)
    best = got[0]
    share = idx.share(idx.rows[idx.where[best.id]].terms, query_tokens(q))
    qv = np.asarray(vec, dtype=np.float32)
    cos_any = float((idx.matrix[: len(idx)] @ (qv / np.linalg.norm(qv))).max())
    return Case(
        q,
        None if want is None else frozenset(want),
        tuple(r.id for r in got),
        np.array([r.fused for r in got]),
        best.similarity,
        cos_any,
        share,
    )


def cases(embed: Embed, model: str, dims: int) -> dict[str, list[Case]]:
    """`<set> <half>` (answerable) and `<set> unrelated <half>` lists."""
    out: dict[str, list[Case]] = {}

    def ask(key: str, idx: ScopeIndex, qs: Sequence[tuple[str, set[str] | None]]) -> None:
        vecs = embed([q for q, _ in qs])
        out.setdefault(key, []).extend(case(idx, q, v, w) for (q, w), v in zip(qs, vecs, strict=True))

    idx = index_of(recall_set.FACTS, embed, model, dims)
    for half in recall_set.HALVES:
        ask(f"rs {half}", idx, [(q, {w}) for _, q, w in recall_set.split(half)])
    ask("rs unrelated tuning", idx, [(q, None) for q in UNRELATED_TUNING])
    ask("rs unrelated held-out", idx, [(q, None) for q in UNRELATED_HELD_OUT])
    pidx = index_of(paraphrase_set.FACTS, embed, model, dims)
    for half in paraphrase_set.HALVES:
        ask(f"ps {half}", pidx, [(q, {w}) for q, w in paraphrase_set.split(half)])
    ask("ps unrelated tuning", pidx, [(q, None) for q in UNRELATED_TUNING])
    ask("ps unrelated held-out", pidx, [(q, None) for q in UNRELATED_HELD_OUT])
    for name, convs in (("cv", convset()), ("lc", longconv())):
        for c in convs:
            half = "tuning" if c.tuning else "held-out"
            cidx = index_of([(t.id, f"{t.speaker}: {t.text}") for t in c.turns], embed, model, dims)
            ask(f"{name} {half}", cidx, [(q.text, set(q.evidence)) for q in c.questions])
            unrelated = UNRELATED_TUNING if c.tuning else UNRELATED_HELD_OUT
            ask(f"{name} unrelated {half}", cidx, [(q, None) for q in unrelated])
    return out


# -- rules ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    #: (case, cosine threshold, share threshold) -> evidenced
    evidence: Callable[[Case, float, float], bool]
    cosines: Sequence[float]
    shares: Sequence[float]


def _gate(c: Case, cos: float, share: float) -> bool:
    return c.cos_best >= cos or c.share_best >= share


def _gate_any(c: Case, cos: float, share: float) -> bool:
    return c.cos_any >= cos or c.share_best >= share


RULES = (
    Rule(
        "gate (best match)", _gate, np.arange(0.1, 0.61, 0.025).tolist(), np.arange(0.1, 1.01, 0.05).tolist()
    ),
    Rule(
        "gate, any memory's cosine",
        _gate_any,
        np.arange(0.1, 0.61, 0.025).tolist(),
        np.arange(0.1, 1.01, 0.05).tolist(),
    ),
    Rule(
        "cosine only (any memory)",
        lambda c, cos, share: c.cos_any >= cos,
        np.arange(0.1, 0.61, 0.025).tolist(),
        [2.0],
    ),
)
FLOORS = np.round(np.arange(0.0, 0.6001, 0.005), 3).tolist()


def kept(c: Case, evidenced: bool, floor: float) -> tuple[str, ...]:
    """The ids a recall returns at `floor` (`scoring.shown`, its order kept)."""
    if not c.ids:
        return ()
    listed = scoring.LIST_SHARE * float(c.fused[0]) if evidenced else 0.0
    shown = listed + (1 - scoring.LIST_SHARE) * c.fused
    return tuple(i for i, s in zip(c.ids, shown, strict=True) if s >= floor)


def measure(cs: Sequence[Case], ev: Callable[[Case], bool], floor: float, k: int = 3) -> float:
    """recall@k of answerable cases, or the share emptied of never-stored ones, in %."""
    n = 0
    for c in cs:
        got = kept(c, ev(c), floor)
        n += (not got) if c.want is None else bool(set(got[:k]) & c.want)
    return 100 * n / len(cs)


def choose(
    data: dict[str, list[Case]], rule: Rule, floors: Sequence[float] = FLOORS
) -> tuple[float, float, float]:
    """(cosine, share, floor) with the most tuning never-stored emptied, no tuning half losing
    more than 1 point of recall@3 (ties: the lowest floor, then the loosest gate)."""
    base = {s: measure(data[f"{s} tuning"], lambda c: True, 0.0) for s in SETS}
    unrelated = [c for s in SETS for c in data[f"{s} unrelated tuning"]]
    best: tuple[float, float, float, float] = (-1.0, 0.0, 0.0, 0.0)
    for cos, share in itertools.product(rule.cosines, rule.shares):
        ev = {
            id(c): rule.evidence(c, cos, share)
            for s in SETS
            for c in data[f"{s} tuning"] + data[f"{s} unrelated tuning"]
        }

        def gated(c: Case, ev: dict[int, bool] = ev) -> bool:
            return ev[id(c)]

        for floor in floors:
            lost = any(measure(data[f"{s} tuning"], gated, floor) < base[s] - 1 for s in SETS)
            if lost:
                break  # a higher floor only loses more
            emptied = measure(unrelated, gated, floor)
            if emptied > best[0] + 1e-9:
                best = (emptied, cos, share, floor)
    return best[1], best[2], best[3]


def _bound(rule: Rule, cos: float, share: float) -> Callable[[Case], bool]:
    return lambda c: rule.evidence(c, cos, share)


def report(data: dict[str, list[Case]], rule_name: str, ev: Callable[[Case], bool], floor: float) -> str:
    cells = []
    for s in SETS:
        h = data[f"{s} held-out"]
        r3, r3_0 = measure(h, ev, floor), measure(h, lambda c: True, 0.0)
        r10, r10_0 = measure(h, ev, floor, 10), measure(h, lambda c: True, 0.0, 10)
        cells.append(f"{r3:5.1f} ({r3 - r3_0:+.1f}) {r10:5.1f} ({r10 - r10_0:+.1f})")
    un_t = [c for s in SETS for c in data[f"{s} unrelated tuning"]]
    un_h = [c for s in SETS for c in data[f"{s} unrelated held-out"]]
    per = " ".join(f"{measure(data[f'{s} unrelated held-out'], ev, floor):3.0f}" for s in SETS)
    emptied = f"{measure(un_t, ev, floor):5.1f} / {measure(un_h, ev, floor):5.1f} ({per})"
    return f"  {rule_name:<44} {floor:5.3f} | " + " | ".join(cells) + f" | {emptied}"


def tables(data: dict[str, list[Case]], model: str) -> list[str]:
    out = [
        f"model {model}. Held-out halves: recall@3 (change against no floor) recall@10 (change) per set;"
        " never-stored emptied % tuning / held-out (held-out per set rs ps cv lc)",
        f"  {'rule (parameters chosen on the tuning halves)':<44} floor | {'recall_set':^27} | "
        f"{'paraphrase_set':^27} | {'convset':^27} | {'longconv':^27} | emptied",
    ]
    out.append(report(data, "before: best match 0.175 / 0.175", lambda c: _gate(c, 0.175, 0.175), 0.125))
    gate = scoring.calibration(model)
    now = f"now: any memory {gate.cosine} / {gate.share}"
    out.append(report(data, now, lambda c: _gate_any(c, gate.cosine, gate.share), scoring.FLOOR))
    for rule, floors in [(r, FLOORS) for r in RULES] + [(RULES[1], [scoring.FLOOR])]:
        cos, share, floor = choose(data, rule, floors)
        label = f"{rule.name}: cos {cos:.3f}" + (f" share {share:.2f}" if share <= 1 else "")
        out.append(report(data, label, _bound(rule, cos, share), floor))
    for s in SETS:
        n = {h: len(data[f"{s} {h}"]) for h in ("tuning", "held-out")}
        out.append(
            f"  {s}: {n['tuning']} / {n['held-out']} answerable questions (1 question = "
            f"{100 / n['held-out']:.1f} points held-out), "
            f"{len(data[f'{s} unrelated held-out'])} never-stored held-out"
        )
    return out


def embedder(spec: str) -> tuple[Embed, str, int, float]:
    """An embedder by name ("wordllama", or a folder for the ONNX embedder) and its ms per text."""
    if spec == "wordllama":
        embed, model, dims = LocalEmbedder().embed_sync, LOCAL_MODEL, LOCAL_DIMENSIONS
    else:
        from mongogate.config import EmbeddingSettings
        from mongogate.recall.onnx_embedder import OnnxEmbedder

        e = OnnxEmbedder(EmbeddingSettings(provider="onnx", path=spec, dimensions=384))
        embed, model, dims = e.embed_sync, e.model, e.dimensions
    embed(["warm-up"])
    texts = [t.text for t in longconv()[0].turns[:300]]
    t0 = time.perf_counter()
    embed(texts)
    return embed, model, dims, (time.perf_counter() - t0) / len(texts) * 1000


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--onnx", action="append", default=[], help="an ONNX model folder to measure too")
    args = p.parse_args()
    lines: list[str] = []
    for spec in ["wordllama", *args.onnx]:
        embed, model, dims, per = embedder(spec)
        started = time.perf_counter()
        data = cases(cached(embed), model, dims)
        lines.append(f"{model}: {dims} dimensions, {per:.2f} ms per text (300 conversation turns, one batch)")
        lines += tables(data, model)
        lines.append(f"({model}: {time.perf_counter() - started:.0f} s)")
    body = "\n".join(["```", command_line("floor_at3.py", None), *lines, "```", ""])
    publish("the floor at the top (issue 39 item 5)", body, not args.no_write)


if __name__ == "__main__":
    main()
