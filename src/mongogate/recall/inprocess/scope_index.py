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

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from mongogate import scoring
from mongogate.clock import as_utc
from mongogate.recall import documents as rd
from mongogate.recall.inprocess import fusion
from mongogate.recall.scope_filter import matches_all
from mongogate.recall.vectors import unpack
from mongogate.textrank import tokens
from mongogate.values import Doc

K1 = 1.2
B = 0.75
#: what a result shows of a memory (`pages.item_of` reads these), kept per row
ITEM_KEYS = ("namespace", "key", "text", "metadata", rd.VERSION, "author", "created_at", rd.UPDATED_AT)
#: fields the index keeps of a memory: what a recall filters or ranks on, and what it shows
INDEX_FIELDS = {
    "embedding": 1,
    rd.EMBEDDING_MODEL: 1,
    rd.NS_PATH: 1,
    rd.EXPIRES_AT: 1,
    **dict.fromkeys(ITEM_KEYS, 1),
}
#: a rough byte cost per posting (dict slot, int key and value) and per memory (id, row state)
_POSTING_BYTES = 100
_ROW_BYTES = 1100  # the row, and its item: a dict of 9 fields, two datetimes


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


@dataclass
class _Row:
    id: str
    terms: Counter[str]
    length: int
    ns_path: frozenset[str]
    metadata: dict[str, Any]
    expires_at: datetime | None
    has_vector: bool
    #: the memory as a result shows it (`ITEM_KEYS` and `_id`)
    item: Doc


class ScopeIndex:
    """The memories of one scope for one embedding model."""

    def __init__(self, model: str, dims: int, rev: int) -> None:
        self.model = model
        self.dims = dims
        self.rev = rev
        #: the write signal's stamp taken before the revision read that last found no write in
        #: flight (`coherence.Coherence.refresh`): while the stamp is the same, no read is needed
        self.verified: tuple[int, int] | None = None
        #: the incarnation of the scope's revision document the index was read at (`coherence.born`)
        self.born: object = None
        self.rows: list[_Row] = []
        self.where: dict[str, int] = {}
        self.matrix: npt.NDArray[np.float32] = np.zeros((16, dims), dtype=np.float32)
        #: each row's token count, beside the matrix (BM25's length norm, vectorised)
        self.lengths: npt.NDArray[np.float64] = np.zeros(16, dtype=np.float64)
        #: each row's expiry as a POSIX timestamp (inf: none), beside the matrix
        self.expiries: npt.NDArray[np.float64] = np.full(16, np.inf, dtype=np.float64)
        #: a term's posting as arrays (rows, tfs), built at a recall, dropped when it changes
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        self._array_bytes = 0
        self.postings: dict[str, dict[int, int]] = {}
        self.total_length = 0
        self.n_postings = 0
        #: the items' texts (a result shows them), counted in `nbytes`
        self.text_bytes = 0
        #: the ids in order, made at the first `ids_from` and kept in order by `put` and `remove`
        self._ids: list[str] | None = None

    # -- changes ------------------------------------------------------------------------------

    def put(self, doc: Doc) -> None:
        mid = str(doc["_id"])
        self.remove(mid)
        terms = Counter(tokens(str(doc.get("text") or "")))
        vec = self._vector(doc)
        at = len(self.rows)
        if at == self.matrix.shape[0]:
            grown = np.zeros((max(16, at * 2), self.dims), dtype=np.float32)
            grown[:at] = self.matrix[:at]
            self.matrix = grown
            longer = np.zeros(grown.shape[0], dtype=np.float64)
            longer[:at] = self.lengths[:at]
            self.lengths = longer
            later = np.full(grown.shape[0], np.inf, dtype=np.float64)
            later[:at] = self.expiries[:at]
            self.expiries = later
        self.matrix[at] = 0.0 if vec is None else vec
        ns = doc.get(rd.NS_PATH) or []
        expires = doc.get(rd.EXPIRES_AT)
        self.rows.append(
            _Row(
                mid,
                terms,
                sum(terms.values()),
                frozenset(ns if isinstance(ns, list) else [ns]),
                dict(doc.get("metadata") or {}),
                None if expires is None else as_utc(expires),
                vec is not None,
                {"_id": mid, **{k: doc.get(k) for k in ITEM_KEYS}},
            )
        )
        self.where[mid] = at
        if self._ids is not None:
            bisect.insort(self._ids, mid)
        self.lengths[at] = self.rows[at].length
        row_expiry = self.rows[at].expires_at
        self.expiries[at] = np.inf if row_expiry is None else row_expiry.timestamp()
        for term, tf in terms.items():
            self.postings.setdefault(term, {})[at] = tf
            self._drop_arrays(term)
        self.total_length += self.rows[at].length
        self.n_postings += len(terms)
        self.text_bytes += len(str(doc.get("text") or ""))

    def remove(self, mid: str) -> None:
        at = self.where.pop(mid, None)
        if at is None:
            return
        if self._ids is not None:
            del self._ids[bisect.bisect_left(self._ids, mid)]
        row = self.rows[at]
        for term in row.terms:
            self._drop_arrays(term)
            posting = self.postings[term]
            del posting[at]
            if not posting:
                del self.postings[term]
        self.total_length -= row.length
        self.n_postings -= len(row.terms)
        self.text_bytes -= len(str(row.item.get("text") or ""))
        last = len(self.rows) - 1
        if at != last:  # the last row moves into the hole
            moved = self.rows[last]
            self.rows[at] = moved
            self.matrix[at] = self.matrix[last]
            self.lengths[at] = self.lengths[last]
            self.expiries[at] = self.expiries[last]
            self.where[moved.id] = at
            for term in moved.terms:
                self._drop_arrays(term)
                posting = self.postings[term]
                posting[at] = posting.pop(last)
        self.expiries[last] = np.inf
        self.rows.pop()

    def _vector(self, doc: Doc) -> npt.NDArray[np.float32] | None:
        raw = doc.get("embedding")
        if raw is None or doc.get(rd.EMBEDDING_MODEL) != self.model:
            return None
        try:
            vec = np.array(unpack(raw), dtype=np.float32)
        except ValueError:
            return None
        norm = float(np.linalg.norm(vec))
        if vec.shape != (self.dims,) or not math.isfinite(norm) or norm == 0.0:
            return None
        return vec / norm

    # -- reading ------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """An estimate of what the index holds: the matrix exactly, postings and rows roughly."""
        rows = len(self.rows) * _ROW_BYTES + self.text_bytes
        arrays = self.lengths.nbytes + self.expiries.nbytes + self._array_bytes + 8 * len(self._ids or ())
        return int(self.matrix.nbytes) + self.n_postings * _POSTING_BYTES + rows + arrays

    def __len__(self) -> int:
        return len(self.rows)

    def ids_from(self, prefix: str, limit: int, now: datetime) -> tuple[list[str], bool]:
        """The ids of live memories starting with `prefix`, in order, at most `limit`, and whether
        more exist (completions: a bisection of the ids kept in order, never a pass over them)."""
        if self._ids is None:
            self._ids = sorted(self.where)
        ids, out = self._ids, list[str]()
        at = bisect.bisect_left(ids, prefix)
        moment = now.timestamp()
        while at < len(ids) and ids[at].startswith(prefix):
            if self.expiries[self.where[ids[at]]] > moment:
                if len(out) == limit:
                    return out, True
                out.append(ids[at])
            at += 1
        return out, False

    def item(self, mid: str) -> Doc | None:
        """The memory `mid` as a result shows it, as of the index's revision; None if not held."""
        at = self.where.get(mid)
        return None if at is None else self.rows[at].item

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
    ) -> list[Ranked]:
        """The `depth` best live memories matching the filters, best first (ties by id), by the
        fused score of `recall/inprocess/fusion.py`: the direct score, or a hop from the best
        direct match when that is higher; memories holding the same tokens as a better one left out."""
        n = len(self.rows)
        if n == 0:
            return []
        sims = self._similarities(vector, n)
        text = self.text_scores(query_tokens)
        usable = self._usable(now, ns_path, metadata)
        if not usable.any():
            return []
        direct = fusion.direct(text, sims, weight_text, weight_vector)
        scores = np.where(usable, direct, -np.inf)
        if weight_text > 0 and query_tokens:
            scores = self._hopped(scores, usable, query_tokens)
        kept = self._top(scores, usable, depth)
        best = float(scores[kept[0]]) if kept else 0.0
        both = vector is not None and weight_text > 0 and weight_vector > 0
        evidenced = self._evidenced(kept[0], sims, usable, query_tokens) if kept and both else True
        shown = _Shown(set(query_tokens), vector is not None and weight_vector > 0, best, evidenced)
        return [self._ranked(i, sims, text, scores, shown) for i in kept]

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

    def _df(self, term: str) -> int:
        return len(self.postings.get(term, {}))

    def _best(self, scores: npt.NDArray[np.float64]) -> int:
        """The row with the highest score (ties by id, as the ranking breaks them)."""
        top = float(np.max(scores))
        return min(np.flatnonzero(scores == top).tolist(), key=lambda i: self.rows[i].id)

    def _posting_arrays(
        self, term: str, posting: dict[int, int]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The posting's rows and term frequencies as arrays (in the posting's order), kept until
        a memory holding the term changes."""
        held = self._arrays.get(term)
        if held is None:
            df = len(posting)
            held = (
                np.fromiter(posting.keys(), dtype=np.int64, count=df),
                np.fromiter(posting.values(), dtype=np.float64, count=df),
            )
            self._arrays[term] = held
            self._array_bytes += held[0].nbytes + held[1].nbytes
        return held

    def _drop_arrays(self, term: str) -> None:
        held = self._arrays.pop(term, None)
        if held is not None:
            self._array_bytes -= held[0].nbytes + held[1].nbytes

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
