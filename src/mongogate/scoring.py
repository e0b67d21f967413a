"""One score from an exact-term score and a meaning score, both in [0, 1]: what long-term recall's
in-process index (`recall/inprocess/scope_index.py`) and `search_messages` (`memory/search.py`) rank by.

`score = weight_text * text ** TEXT_POWER + (1 - weight_text) * max(similarity, 0)`, where `text` is
the normalised BM25 of `textrank.bm25` (1.0: holds every query word) and `similarity` the cosine of
the query's and the text's embeddings. Here, below `recall` and `memory`, because neither of those
may import the other (pyproject's import-linter layers); the weights were chosen on
benchmarks/lib/recall_set.py (docs/decisions/recall-index.md).

The score `recall` shows, on both of its rankers (the in-process index, `recall/inprocess/`, and
the search index, `recall/searchindex/`), and the one `min_score` compares:

1. **The score a recall shows** (`shown`), the one `min_score` compares:
   `LIST_SHARE * best + (1 - LIST_SHARE) * own`, where `best` is the fused score of the recall's
   best match and `own` the memory's fused score. Measured on benchmarks/recall_quality.py: whether
   a question is about anything stored is told by its *best* match (an answer ranked 5th or 9th
   often has a cosine no higher than an unrelated question's best match), so a floor on each
   memory's own score cut answerable questions' answers long before it emptied unrelated ones.
   The shown score is in [0, 1], the same for every query (the best match's evidence), and
   follows the fused order exactly (`best` is one number per recall); `own`'s tenth keeps each
   memory's own match visible in it.
2. **Evidence on one side** (`evidenced`): one of the ranked memories must have a cosine of at
   least the embedder's `Calibration.cosine` with the query, or the best match hold at least
   `Calibration.share` of the query's idf mass (its distinct query tokens); otherwise the recall
   shows only each memory's own tenth. Applied when both sides rank (the fused method with a query
   vector); it only lowers scores, so it never keeps what the floor alone would cut.
3. **The floor** (`FLOOR`, `memory.long_term.min_score`'s default) and each embedder's gate
   (`calibration`) are chosen on benchmarks/floor_at3.py (issue 39 item 5): the most questions
   about nothing stored emptied such that answerable questions lose at most 1 point of recall@3
   on any tuning half of four sets (one with paraphrased questions over near-identical facts).
   Cosines mean different things under different models, so the gate is per embedder: wordllama
   (the default) cannot tell a paraphrased answer from a question about nothing stored
   (paraphrases' best matches score 0.07-0.13, as unrelated questions' median does), so its gate
   and floor are low and empty few of them (12% held-out); all-MiniLM-L6-v2 (the `onnx` embedder)
   empties 73% at the same cost (docs/decisions/recall-ranking.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mongogate.lazy import lazy

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")


__all__ = [
    "FLOOR",
    "LIST_SHARE",
    "MINILM_L6",
    "TEXT_POWER",
    "TEXT_WEIGHT",
    "WORDLLAMA",
    "Calibration",
    "blend",
    "blend_many",
    "calibration",
    "evidenced",
    "shown",
]

#: the text side's share of the score (chosen on benchmarks/lib/recall_set.py's tuning half)
TEXT_WEIGHT = 0.5
#: the text side counts as text ** TEXT_POWER; 2 (a one-word overlap counts little) kept fewer
#: answers above a floor that empties unrelated questions than 1 did (docs/decisions/recall-index.md)
TEXT_POWER = 1.0
#: the share of a memory's shown score that is its recall's best fused score (`shown`)
LIST_SHARE = 0.9
#: `memory.long_term.min_score`'s default: the shown score a memory needs to be returned
FLOOR = 0.065


@dataclass(frozen=True)
class Calibration:
    """An embedder's evidence gate (`evidenced`): a recall is about something stored when one of
    its ranked memories has at least `cosine` with the query, or its best match holds at least
    `share` of the query's idf mass."""

    cosine: float
    share: float


#: wordllama 256 (the default embedder), and the one for models never measured (an OpenAI-compatible
#: endpoint's: their cosines run higher, so this gate lets more through, never less)
WORDLLAMA = Calibration(cosine=0.1, share=0.1)
#: all-MiniLM-L6-v2 (`[memory.embedding] provider = "onnx"`, a model whose name holds "minilm-l6")
MINILM_L6 = Calibration(cosine=0.3, share=0.35)


def calibration(model: str) -> Calibration:
    """The evidence gate for vectors of `model` (`Embedder.model`)."""
    return MINILM_L6 if "minilm-l6" in model.lower() else WORDLLAMA


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


def shown(own: float, best: float, evidenced: bool = True) -> float:
    """The score a recall shows for a memory whose fused score is `own`, when the recall's best
    fused score is `best` (>= own): in [0, 1], ordered as `own` is. A recall whose best match has
    no evidence on either side (`evidenced`) shows only the memory's own share."""
    listed = LIST_SHARE * best if evidenced else 0.0
    return min(1.0, max(0.0, listed + (1.0 - LIST_SHARE) * own))


def evidenced(similarity: float, share: float, gate: Calibration = WORDLLAMA) -> bool:
    """Whether a recall whose ranked memories' highest cosine is `similarity` and whose best match
    holds `share` of the query's idf is evidence that something stored is about the query."""
    return similarity >= gate.cosine or share >= gate.share
