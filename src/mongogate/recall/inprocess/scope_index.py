"""One scope's memories held in the server process: vectors as one matrix, terms as an inverted
index scored with BM25 (Okapi, k1 = 1.2, b = 0.75).

The database stays the only truth: the index is a copy labelled with the scope's revision
(`recall/coherence.py` keeps it fresh, and says when a write is in flight). It holds what a result
shows (text, namespace, key, version, author, dates), so a recall of a settled scope answers
from it; while a write is in flight, `recall` reads the ranked memories back from the database.

Scores (`Ranked`; a recall shows `Ranked.score`, `recall/inprocess/fusion.py`): `similarity` is the
cosine of the query and the memory; `text` is the memory's BM25 over the query divided by the
BM25 a memory of average length holding each query token once would earn (the sum of the tokens'
idf), capped at 1: 1.0 means "holds every query word", and it means the same for every query.
Query words the scope never saw count in the denominator (at the idf of a word no memory holds),
so a question about something never stored scores low.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from mongogate import scoring
from mongogate.clock import as_utc
from mongogate.recall.inprocess import chains, fusion
from mongogate.recall.inprocess.rows import INDEX_FIELDS, ITEM_KEYS, Rows
from mongogate.recall.model import Link, Similar
from mongogate.recall.scope_filter import RecallFilter, matches_all

K1 = 1.2
B = 0.75
__all__ = ["INDEX_FIELDS", "ITEM_KEYS", "K1", "B", "Ranked", "ScopeIndex"]


@dataclass(frozen=True)
class Ranked:
    id: str
    similarity: float
    text: float
    matched: frozenset[str]
    #: the memory has a vector of the query's model (a meaning match, however weak)
    has_vector: bool = False
    #: what `rank` ordered by, in [0, 1] (`fusion.py`): the memory's own evidence
    fused: float = 0.0
    #: the best fused score of the same ranking (its first memory's `fused`)
    best: float = 0.0
    #: the ranking has evidence on one side (`scoring.evidenced`)
    evidenced: bool = True
    #: the newer memories that replace this one (`recall/chain.py`; shown with include_superseded)
    superseded_by: tuple[Link, ...] = ()
    #: a newer memory very close in meaning (`siblings.newer_similar`)
    newer_similar: Similar | None = None

    @property
    def score(self) -> float:
        """The score a recall shows and `min_score` compares, in [0, 1], in `rank`'s order:
        mostly the ranking's best fused score, a tenth the memory's own (`scoring.shown`); only
        the tenth when the best match has no evidence on either side."""
        return scoring.shown(self.fused, max(self.best, self.fused), self.evidenced)


@dataclass(frozen=True)
class _Shown:
    """What every memory of one ranking shares: the query's tokens, whether meaning ranked, the
    best fused score and whether the best match is evidence."""

    asked: set[str]
    by_meaning: bool
    best: float
    evidenced: bool


class ScopeIndex(Rows):
    """The memories of one scope for one embedding model, ranked for a question."""

    def rank(
        self,
        vector: list[float] | None,
        query_tokens: list[str],
        *,
        now: datetime,
        ns_path: str | None,
        metadata: dict[str, Any],
        depth: int,
        weight_text: float,
        weight_vector: float,
        filt: RecallFilter | None = None,
        siblings: float | None = None,
    ) -> list[Ranked]:
        """The `depth` best live memories matching the filters, best first (ties by id), by the
        fused score of `recall/inprocess/fusion.py`: the direct score, or a hop from the best
        direct match when that is higher; memories holding the same tokens as a better one left out.
        Replaced memories (`recall/chain.py`) are left out unless `filt` includes them, and
        marked; with `siblings` (a cosine), each result names a newer memory that close to it."""
        n = len(self.rows)
        if n == 0:
            return []
        sims = self._similarities(vector, n)
        text = self.text_scores(query_tokens)
        chained = chains.replaced(self, now, None if filt is None else filt.as_of)
        usable = self._admitted(now, ns_path, metadata, filt, chained)
        if not usable.any():
            return []
        direct = fusion.direct(text, sims, weight_text, weight_vector)
        scores = np.where(usable, direct, -np.inf)
        if weight_text > 0 and query_tokens:
            scores = self._hopped(scores, usable, query_tokens)
        kept = self._top(scores, usable, depth)
        by_meaning = vector is not None and weight_vector > 0
        both = by_meaning and weight_text > 0
        shown = self._shown(kept, scores, sims, usable, query_tokens, by_meaning, both=both)
        ranked = [self._ranked(i, sims, text, scores, shown) for i in kept]
        near = {} if siblings is None or vector is None else self._siblings(kept, sims, now, siblings)
        return [_marked(r, chained.get(i, ()), near.get(i)) for i, r in zip(kept, ranked, strict=True)]

    def _shown(
        self,
        kept: list[int],
        scores: npt.NDArray[np.float64],
        sims: npt.NDArray[np.float32],
        usable: npt.NDArray[np.bool_],
        query_tokens: list[str],
        by_meaning: bool,
        *,
        both: bool,
    ) -> _Shown:
        """How the kept rows' scores are shown: against the best one, and whether it has evidence."""
        best = float(scores[kept[0]]) if kept else 0.0
        evidenced = self._evidenced(kept[0], sims, usable, query_tokens) if kept and both else True
        return _Shown(set(query_tokens), by_meaning, best, evidenced)

    def _admitted(
        self,
        now: datetime,
        ns_path: str | None,
        metadata: dict[str, Any],
        filt: RecallFilter | None,
        chained: dict[int, tuple[Link, ...]],
    ) -> npt.NDArray[np.bool_]:
        """The rows a recall may return: live, in the namespace, with the metadata values, in the
        filter's time window, and not replaced unless the filter includes replaced ones."""
        usable = self._usable(now, ns_path, metadata)
        in_window = chains.window(self, filt)
        if in_window is not None:
            usable &= in_window
        if chained and (filt is None or not filt.include_superseded):
            usable[list(chained)] = False
        return usable

    def _siblings(
        self, kept: list[int], sims: npt.NDArray[np.float32], now: datetime, min_score: float
    ) -> dict[int, Similar]:
        """Each kept row's newer very similar sibling (`chains.newer_similar`), among memories
        current now."""
        return chains.newer_similar(self, kept, sims, now, chains.replaced(self, now), min_score)

    def _similarities(self, vector: list[float] | None, n: int) -> npt.NDArray[np.float32]:
        """Each row's cosine with the query's vector (zeros without one, or a zero or non-finite one)."""
        sims = np.zeros(n, dtype=np.float32)
        if vector is None:
            return sims
        q = np.asarray(vector, dtype=np.float32)
        qn = float(np.linalg.norm(q))
        if qn > 0 and math.isfinite(qn):
            sims = self.matrix[:n] @ (q / qn)
        return sims

    def _hopped(
        self, scores: npt.NDArray[np.float64], usable: npt.NDArray[np.bool_], query_tokens: list[str]
    ) -> npt.NDArray[np.float64]:
        """The scores with one hop from the best direct match (`fusion.second_hop`), where it has
        words that link it to other memories."""
        start = self._best(scores)
        if not scores[start] > 0:
            return scores
        words = fusion.hop_terms(self.rows[start].terms, query_tokens, self._df)
        if not words:
            return scores
        hopped = fusion.second_hop(scores, start, self.text_scores(words))
        return np.where(usable, hopped, -np.inf)

    def _top(self, scores: npt.NDArray[np.float64], usable: npt.NDArray[np.bool_], depth: int) -> list[int]:
        """The rows of the `depth` best scores, best first (ties by id), distinct by tokens."""
        n = len(self.rows)
        k = min(depth * 4 + 16, int(usable.sum()))  # room for the memories `distinct` leaves out
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), self.rows[i].id))
        order = [i for i in order if scores[i] > -np.inf]
        return fusion.distinct(order, lambda i: frozenset(self.rows[i].terms.items()), depth)

    def _evidenced(
        self,
        first: int,
        sims: npt.NDArray[np.float32],
        usable: npt.NDArray[np.bool_],
        query_tokens: list[str],
    ) -> bool:
        """Whether the ranking is evidence on one side (`scoring.evidenced`, this model's gate): the
        highest cosine of the memories it ranks among (rows without a vector have 0), the best
        match's share of the query. Not the best match's own cosine: a paraphrased answer is often
        ranked first by its words and found by meaning in another memory of the scope."""
        cos = float(np.max(sims, where=usable, initial=0.0))
        share = self.share(self.rows[first].terms, query_tokens)
        return scoring.evidenced(cos, share, scoring.calibration(self.model))

    def _ranked(
        self,
        i: int,
        sims: npt.NDArray[np.float32],
        text: npt.NDArray[np.float64],
        scores: npt.NDArray[np.float64],
        shown: _Shown,
    ) -> Ranked:
        row = self.rows[i]
        return Ranked(
            row.id,
            float(sims[i]) if row.has_vector else 0.0,
            float(text[i]),
            frozenset(t for t in shown.asked if t in row.terms),
            row.has_vector and shown.by_meaning,
            fused=float(scores[i]),
            best=shown.best,
            evidenced=shown.evidenced,
        )

    def text_scores(self, query_tokens: list[str]) -> npt.NDArray[np.float64]:
        """Each row's BM25 over the query's tokens divided by the sum of their idf (what a memory
        of average length holding each once would earn), capped at 1."""
        n = len(self.rows)
        text = np.zeros(n, dtype=np.float64)
        avg = (self.total_length / n) or 1.0
        norms = K1 * (1.0 - B + B * self.lengths[:n] / avg)
        upper = 0.0
        for term in query_tokens:
            posting = self.postings.get(term, {})
            df = len(posting)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            upper += idf  # one occurrence in a memory of average length earns idf
            if df:
                at, tf = self._posting_arrays(term, posting)
                text[at] += idf * tf * (K1 + 1.0) / (tf + norms[at])
        if upper > 0:
            text = np.minimum(text / upper, 1.0)
        return text

    def idf(self, term: str) -> float:
        """BM25's idf of `term` in this scope (a term no memory holds: the highest)."""
        n, df = len(self.rows), self._df(term)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def share(self, held: Counter[str], query_tokens: list[str]) -> float:
        """The share of the query's idf mass (its distinct tokens) that the tokens `held` cover."""
        asked = set(query_tokens)
        total = sum(self.idf(t) for t in asked)
        return sum(self.idf(t) for t in asked if t in held) / total if total > 0 else 0.0

    def _best(self, scores: npt.NDArray[np.float64]) -> int:
        """The row with the highest score (ties by id, as the ranking breaks them)."""
        top = float(np.max(scores))
        return min(np.flatnonzero(scores == top).tolist(), key=lambda i: self.rows[i].id)

    def _usable(self, now: datetime, ns_path: str | None, metadata: dict[str, Any]) -> npt.NDArray[np.bool_]:
        """Live (expiry after `now`, from the expiry array) and matching the filters."""
        out: npt.NDArray[np.bool_] = self.expiries[: len(self.rows)] > as_utc(now).timestamp()
        if ns_path is None and not metadata:
            return out
        for i, row in enumerate(self.rows):
            elsewhere = ns_path is not None and ns_path not in row.ns_path
            if elsewhere or not matches_all(row.metadata, metadata):
                out[i] = False
        return out


def _marked(r: Ranked, superseded_by: tuple[Link, ...], near: Similar | None) -> Ranked:
    """`r` with what replaces it and its newer very similar sibling (unchanged when neither)."""
    if not superseded_by and near is None:
        return r
    return dataclasses.replace(r, superseded_by=superseded_by, newer_similar=near)
