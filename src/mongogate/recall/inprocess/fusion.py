"""How the in-process index (`scope_index.ScopeIndex.rank`) turns a memory's two sides into one
score, chosen by measurement (docs/decisions/recall-ranking.md).

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

4. **The score a recall shows** (`shown`), the one `min_score` compares:
   `LIST_SHARE * best + (1 - LIST_SHARE) * own`, where `best` is the fused score of the recall's
   best match and `own` the memory's fused score. Measured on benchmarks/recall_quality.py: whether
   a question is about anything stored is told by its *best* match (an answer ranked 5th or 9th
   often has a cosine no higher than an unrelated question's best match), so a floor on each
   memory's own score cut answerable questions' answers long before it emptied unrelated ones.
   The shown score is in [0, 1], the same for every query (the best match's evidence), and
   follows the fused order exactly (`best` is one number per recall); `own`'s tenth keeps each
   memory's own match visible in it.
5. **Evidence on one side** (`evidenced`, branch floor2): the best match must have a cosine of at
   least `EVIDENCE_COSINE` with the query or hold at least `EVIDENCE_SHARE` of the query's idf
   mass (its distinct query tokens); otherwise the recall shows only each memory's own tenth, under
   any floor above 0.1. A sum of two weak sides ("quantum chromodynamics lecture notes" beside
   "lots of sticky notes": cosine 0.145, a ninth of the words, fused 0.131) is not evidence that
   anything stored is about the question. Applied when both sides rank (the fused method with a
   query vector); it only lowers scores, so it never keeps what the floor alone would cut.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np
import numpy.typing as npt

#: how many of the best direct match's words the hop searches for
HOP_TERMS = 3
#: a hop's score is at most this share of the score of the memory it started from
HOP_DISCOUNT = 0.8
#: the share of a memory's shown score that is its recall's best fused score (`shown`)
LIST_SHARE = 0.9
#: the best match's cosine, or its share of the query's idf, that makes a recall evidenced
EVIDENCE_COSINE = 0.175
EVIDENCE_SHARE = 0.175

Scores = npt.NDArray[np.float64]


def direct(text: Scores, sims: npt.NDArray[np.floating], weight_text: float, weight_vector: float) -> Scores:
    """Each memory's direct score in [0, 1]: the weighted text and (non-negative) cosine sides."""
    mixed = weight_text * text + weight_vector * np.clip(sims.astype(np.float64), 0.0, 1.0)
    return np.asarray(np.clip(mixed, 0.0, 1.0), dtype=np.float64)


def shown(own: float, best: float, evidenced: bool = True) -> float:
    """The score a recall shows for a memory whose fused score is `own`, when the recall's best
    fused score is `best` (>= own): in [0, 1], ordered as `own` is. A recall whose best match has
    no evidence on either side (`evidenced`) shows only the memory's own share."""
    listed = LIST_SHARE * best if evidenced else 0.0
    return min(1.0, max(0.0, listed + (1.0 - LIST_SHARE) * own))


def evidenced(similarity: float, share: float) -> bool:
    """Whether a best match with this cosine and this share of the query's idf is evidence that
    something stored is about the query."""
    return similarity >= EVIDENCE_COSINE or share >= EVIDENCE_SHARE


def hop_terms(held: Iterable[str], query: Iterable[str], df: Callable[[str], int]) -> list[str]:
    """The `HOP_TERMS` tokens of the memory a hop starts from that link it to others: held by
    at least one other memory (`df`, the memories holding a token, at least 2), not in the query,
    rarest first (ties by token, so a hop is deterministic)."""
    asked = set(query)
    linking = [t for t in held if t not in asked and df(t) >= 2]
    return sorted(linking, key=lambda t: (df(t), t))[:HOP_TERMS]


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
