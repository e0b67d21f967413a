"""Fusing the exact-term ranking and the meaning ranking into one.

Reciprocal rank fusion (`fuse`): a memory at rank r of ranking i earns `weights[i] / (k + r)`,
and the sums decide. Ranks compare where the raw scores do not (a `$text` score grows with
repeated terms and differs between MongoDB and the embedded engine; a cosine sits in [-1, 1]).

`recall` uses `fuse_recall`, RRF with one refinement measured on the labelled set of
benchmarks/recall.py (docs/decisions/long-term-memory.md, "Fusion"): a text hit counts in proportion
to how exact it is. `$text` matches any one term, so a question in other words matches
memories that share one incidental word with it ("work" in "what days do I work out?"), and
plain RRF let those beat the vector ranking's right answer. Weighting each text hit by the
share of the query's terms it holds (squared), with equal shares sharing a rank, keeps an
exact identifier on top and lets a one-word overlap count little.

And one rule on top: when the query names identifiers (tokens with a digit, `terms.identifiers`),
the text hits that hold the most of them as whole tokens ("strong" hits) come first, in their
fused order, and everything else keeps its fused order behind them. Meaning cannot tell
ORD-58213 from ORD-58231, and neither can `$text` terms tell 192.168.1.1 from 192.168.1.11; a
memory naming exactly what was asked for is the answer a user expects at the top. Without an
identifier in the query (or no memory holding one) the ranking is the fusion alone, so the
vector ranking's order is never displaced by anything weaker than an exact identifier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mongogate.recall.searchindex.terms import coverage, holds, identifiers, terms

__all__ = ["DEFAULT_FUSION", "DEFAULT_K", "Fusion", "fuse", "fuse_recall", "strong_hits", "text_ranking"]

#: RRF's constant in `fuse` (Cormack, Clarke and Büttcher use 60)
DEFAULT_K = 60


def _check(value: float, what: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{what}={value!r}: give a finite number >= 0")


@dataclass(frozen=True)
class Fusion:
    """The knobs of `fuse_recall`; the defaults were chosen on the labelled set."""

    #: RRF's constant: small values give rank 1 a clear lead over rank 2
    k: float = 5.0
    text_weight: float = 1.0
    vector_weight: float = 1.0
    #: a text hit's weight is multiplied by (share of query terms it holds) ** this
    exactness_power: float = 2.0
    #: text hits holding the query's identifiers as whole tokens go first (`strong_hits`)
    identifiers_first: bool = True

    def __post_init__(self) -> None:
        for name in ("k", "text_weight", "vector_weight", "exactness_power"):
            _check(getattr(self, name), f"Fusion.{name}")


DEFAULT_FUSION = Fusion()


def fuse(
    rankings: Sequence[Sequence[str]], *, k: float = DEFAULT_K, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Every id of `rankings` (each best first), by reciprocal rank fusion, best first.

    Deterministic: equal scores go to the id with the better best rank, then by id. An id
    repeated within one ranking counts at its first (best) place only.
    """
    _check(k, "k")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    for w in weights:
        _check(w, "a weight")
    scored: list[list[tuple[str, int, float]]] = []
    for ranking, weight in zip(rankings, weights, strict=True):
        scored.append([(doc_id, rank, weight) for rank, doc_id in enumerate(ranking, start=1)])
    return _sum(scored, k)


def text_ranking(query: str, hits: Sequence[tuple[str, str]]) -> list[tuple[str, float]]:
    """`$text` hits `(id, text)` ordered by how exact they are: (id, share of the query's terms
    the memory holds), most exact first; equal shares keep the order they came in."""
    qt = terms(query)
    shares = [(doc_id, coverage(qt, text)) for doc_id, text in hits]
    return sorted(shares, key=lambda pair: -pair[1])


def fuse_recall(
    query: str,
    text_hits: Sequence[tuple[str, str]],
    vector_ids: Sequence[str],
    fusion: Fusion = DEFAULT_FUSION,
) -> list[tuple[str, float]]:
    """`recall`'s ranking: `$text` hits `(id, text)` (any order) and the vector ranking (ids,
    best first) fused, best first. The caller cuts each to its candidate depth."""
    exact = text_ranking(query, text_hits)
    levels = sorted({share for _, share in exact}, reverse=True)
    text_side = [
        (doc_id, levels.index(share) + 1, fusion.text_weight * share**fusion.exactness_power)
        for doc_id, share in exact
        if share > 0
    ]
    vector_side = [(doc_id, rank, fusion.vector_weight) for rank, doc_id in enumerate(vector_ids, start=1)]
    fused = _sum([text_side, vector_side], fusion.k)
    strong = strong_hits(query, text_hits) if fusion.identifiers_first else set()
    if not strong:
        return fused
    # strong hits first, each scored above every other (its fused score + the best other one)
    lift = max((score for doc_id, score in fused if doc_id not in strong), default=0.0)
    first = [(doc_id, score + lift) for doc_id, score in fused if doc_id in strong]
    return first + [(doc_id, score) for doc_id, score in fused if doc_id not in strong]


def strong_hits(query: str, text_hits: Sequence[tuple[str, str]]) -> set[str]:
    """The ids of the text hits that hold the most of the query's identifiers (at least one) as
    whole tokens; empty when the query names none or no hit holds one."""
    wanted = identifiers(query)
    if not wanted:
        return set()
    held = {doc_id: sum(holds(x, text) for x in wanted) for doc_id, text in text_hits}
    most = max(held.values(), default=0)
    return {doc_id for doc_id, n in held.items() if n == most} if most else set()


def _sum(rankings: Sequence[Sequence[tuple[str, int, float]]], k: float) -> list[tuple[str, float]]:
    """Sum `gain / (k + rank)` per id over rankings of (id, rank, gain); first place per ranking."""
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for doc_id, rank, gain in ranking:
            if doc_id in seen:
                continue
            seen.add(doc_id)
            scores[doc_id] = scores.get(doc_id, 0.0) + gain / (k + rank)
            best[doc_id] = min(best.get(doc_id, rank), rank)
    order = sorted(scores, key=lambda d: (-scores[d], best[d], d))
    return [(d, scores[d]) for d in order]
