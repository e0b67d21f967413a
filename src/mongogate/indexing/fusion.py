"""How the in-process index (`scope_index.ScopeIndex.rank`) turns a document's two sides into one
score and one order, chosen by measurement (docs/decisions/recall-ranking.md).

1. **Direct score**: `weight_text * text + weight_vector * max(similarity, 0)` (`direct`), where
   `text` is BM25 over the query's tokens divided by what a memory of average length holding each
   of them once would earn (capped at 1), so both sides are in [0, 1] and mean the same for every
   query.
2. **One hop** (`second_hop`): the best direct match's rarest words that other memories hold too
   (`HOP_TERMS` of them, not in the query) are searched as a second query; a memory they find scores
   `HOP_DISCOUNT * best direct score * its text score over those words`. "What colour was the car
   I sold?" finds "I sold the Volvo V60", whose words find "I bought a used Volvo V60, navy blue".
   A hop never scores above the memory it started from, so a question about something never
   stored (a weak best match) gets weak hops too: the floor (`min_score`) still empties it.
   A memory's score is the better of its direct score and its hop score.
3. **Distinct words** (`distinct`): a memory whose tokens are exactly those of a better-ranked one
   (the same text said again) is left out of the ranking; it adds nothing to the answer and takes
   a place from one that might.

The order is the fused score's order (ties by id).

4. **The score a recall shows** and **evidence on one side**: `mongogate/scoring.py` (`shown`,
   `evidenced`), the same for both rankers of `recall` (the search index's too).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from itertools import islice
from typing import TYPE_CHECKING

from mongogate.lazy import lazy

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Scores = npt.NDArray[np.float64]
else:
    np = lazy("numpy")


#: how many of the best direct match's words the hop searches for
HOP_TERMS = 3
#: a hop's score is at most this share of the score of the memory it started from
HOP_DISCOUNT = 0.8


def direct(text: Scores, sims: npt.NDArray[np.floating], weight_text: float, weight_vector: float) -> Scores:
    """Each memory's direct score in [0, 1]: the weighted text and (non-negative) cosine sides."""
    mixed = weight_text * text + weight_vector * np.clip(sims.astype(np.float64), 0.0, 1.0)
    return np.asarray(np.clip(mixed, 0.0, 1.0), dtype=np.float64)


def linking(held: Iterable[str], df: Callable[[str], int]) -> list[str]:
    """The tokens of the memory a hop starts from that link it to others: held by at least one
    other memory (`df`, the memories holding a token, at least 2), rarest first (ties by token, so
    a hop is deterministic). The same for every question while the index is unchanged
    (`ScopeIndex` keeps the last start's)."""
    return sorted((t for t in held if df(t) >= 2), key=lambda t: (df(t), t))


def hop_terms(linked: Iterable[str], query: Iterable[str]) -> list[str]:
    """The `HOP_TERMS` first of the `linking` tokens not in the query."""
    asked = set(query)
    return list(islice((t for t in linked if t not in asked), HOP_TERMS))


def second_hop(scores: Scores, start: int, hop_text: Scores) -> Scores:
    """The better of each memory's score and its hop score from memory `start` (the text score
    of the start's words, `hop_text`, discounted by the start's own score)."""
    hop = HOP_DISCOUNT * float(scores[start]) * hop_text
    hop[start] = 0.0
    return np.maximum(scores, hop)


def distinct(order: Iterable[int], key: Callable[[int], Hashable], limit: int) -> list[int]:
    """The first `limit` of `order` whose `key` (the memory's tokens) no earlier one had."""
    out: list[int] = []
    seen: set[Hashable] = set()
    for i in order:
        k = key(i)
        if k in seen:
            continue
        seen.add(k)
        out.append(i)
        if len(out) == limit:
            break
    return out
