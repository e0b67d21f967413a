"""One score from an exact-term score and a meaning score, both in [0, 1]: what long-term recall's
in-process index (`recall/scope_index.py`) and `search_messages` (`memory/search.py`) rank by.

`score = weight_text * text ** TEXT_POWER + (1 - weight_text) * max(similarity, 0)`, where `text` is
the normalised BM25 of `textrank.bm25` (1.0: holds every query word) and `similarity` the cosine of
the query's and the text's embeddings. Here, below `recall` and `memory`, because neither of those
may import the other (pyproject's import-linter layers); the weights were chosen on
benchmarks/lib/recall_set.py (docs/decisions/recall-index.md).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["TEXT_POWER", "TEXT_WEIGHT", "blend", "blend_many"]

#: the text side's share of the score (chosen on benchmarks/lib/recall_set.py's tuning half)
TEXT_WEIGHT = 0.5
#: the text side counts as text ** TEXT_POWER; 2 (a one-word overlap counts little) kept fewer
#: answers above a floor that empties unrelated questions than 1 did (docs/decisions/recall-index.md)
TEXT_POWER = 1.0


def blend(text: float, similarity: float, weight_text: float = TEXT_WEIGHT) -> float:
    """One text's score, in [0, 1]."""
    s = weight_text * float(text**TEXT_POWER) + (1.0 - weight_text) * max(similarity, 0.0)
    return min(1.0, max(0.0, s))


def blend_many(
    text: npt.NDArray[np.float64],
    similarity: npt.NDArray[np.float32],
    weight_text: float = TEXT_WEIGHT,
    weight_vector: float | None = None,
) -> npt.NDArray[np.float64]:
    """`blend` over arrays (`weight_vector` defaults to 1 - weight_text); not clipped above."""
    wv = 1.0 - weight_text if weight_vector is None else weight_vector
    out: npt.NDArray[np.float64] = weight_text * text**TEXT_POWER + wv * np.clip(similarity, 0.0, 1.0)
    return out
