"""Fusing rankings. Minimal version; the ranking helper's tuned one replaces it at merge."""

from __future__ import annotations

from collections.abc import Sequence


def fuse(rankings: Sequence[Sequence[str]], *, k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: sum of 1 / (k + rank) over the rankings, best first, ties by id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
