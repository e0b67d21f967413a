"""One scope's documents held in the server process: vectors as one matrix, terms as an inverted
index scored with BM25 (Okapi, k1 = 1.2, b = 0.75). Generic over what it holds: each document
arrives as an `Entry` (its terms, its vector, what a result shows of it), made by its domain's
adapter (long-term memory: `recall/inprocess/scope_index.py`; conversation messages:
`memory/message_index.py`).

The database stays the only truth: the index is a copy labelled with the scope's revision
(`indexing/coherence.py` keeps it fresh, and says when a write is in flight).

Scores (`Ranked`; `fusion.py`): `similarity` is the cosine of the query and the document; `text`
is the document's BM25 over the query divided by the BM25 a document of average length holding
each query token once would earn (the sum of the tokens' idf), capped at 1: 1.0 means "holds every
query word", and it means the same for every query. Query words the scope never saw count in the
denominator (at the idf of a word no document holds), so a question about something never stored
scores low.

Held compactly, so that a scope of long texts (a conversation of 66 KB messages) fits: each
posting is a pair of C ints in its term's arrays (rows, term frequencies), and each row keeps its
terms as a tuple of the index's one copy of each term's string with their counts in a C array
(about 20 bytes a posting, where dicts of ints took about 200). A row of more than SCAN terms gets
a set of them at its first ranking (`lookup`, O(1) a query word), counted in `nbytes`.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Container, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from mongogate import scoring
from mongogate.clock import as_utc
from mongogate.indexing import fusion
from mongogate.indexing.entries import Entry, Ranked, matches_all
from mongogate.indexing.rows import Posting, PostingView, Ranking, Row, Shown
from mongogate.lazy import lazy
from mongogate.values import Doc

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

K1 = 1.2
B = 0.75
#: a rough byte cost per posting (two C ints in the term's arrays, a reference and a C int in the row)
_POSTING_BYTES = 20
#: per distinct term: its string, its dict slot, its two arrays
_TERM_BYTES = 300
#: per row: the row, its item (a dict of about 9 fields, two datetimes), its arrays' headers
_ROW_BYTES = 1300
#: a row of at most this many terms is searched in its tuple (as fast as a set's hash); a longer one
#: gets a set (`lookup`): scanning a 256 KiB message's ~30,000 random words took ~20 ms a search
SCAN = 64


class ScopeIndex:
    """The documents of one scope for one embedding model."""

    #: arrays a domain keeps beside the matrix, one value per row (name -> the value of no row);
    #: each `Entry.columns` sets its row's, `_grow` and `remove` keep them in step
    COLUMNS: ClassVar[dict[str, float]] = {}

    def __init__(self, model: str, dims: int, rev: int, *, distinct_words: bool = True) -> None:
        #: leave out a document saying exactly the words of a better one (`fusion.distinct`):
        #: recall's memories; not messages (the same words said twice are two messages)
        self.distinct_words = distinct_words
        self.model = model
        self.dims = dims
        self.rev = rev
        #: the write signal's stamp taken before the revision read that last found no write in
        #: flight (`coherence.Coherence.refresh`): while the stamp is the same, no read is needed
        self.verified: tuple[int, int] | None = None
        #: the incarnation of the scope's revision document the index was read at (`coherence.born`)
        self.born: object = None
        self.rows: list[Row] = []
        self.where: dict[str, int] = {}
        self.matrix: npt.NDArray[np.float32] = np.zeros((16, dims), dtype=np.float32)
        #: each row's token count, beside the matrix (BM25's length norm, vectorised)
        self.lengths: npt.NDArray[np.float64] = np.zeros(16, dtype=np.float64)
        #: each row's expiry as a POSIX timestamp (inf: none), beside the matrix
        self.expiries: npt.NDArray[np.float64] = np.full(16, np.inf, dtype=np.float64)
        #: a term's posting as numpy arrays (rows, tfs), built at a ranking, dropped when it changes
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        self._array_bytes = 0
        self._postings: dict[str, Posting] = {}
        self.total_length = 0
        self.n_postings = 0
        #: the items' texts (a result shows them), counted in `nbytes`
        self.text_bytes = 0
        #: the bytes of the rows' sets (`lookup`), counted in `nbytes`
        self.lookup_bytes = 0
        #: rows added or removed so far: the last hop's start (`_linking`) is kept while unchanged
        self._changes = 0
        self._hop: tuple[int, int, list[str]] | None = None
        for name, fill in self.COLUMNS.items():
            setattr(self, name, np.full(16, fill, dtype=np.float64))

    @property
    def postings(self) -> Mapping[str, array[int]]:
        """term -> the rows holding it."""
        return PostingView(self._postings)

    # -- changes ------------------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        """Hold `entry` (replacing the document of the same id)."""
        self.remove(entry.id)
        self._changes += 1
        at = len(self.rows)
        if at == self.matrix.shape[0]:
            self._grow(at)
        vec = entry.vector
        self.matrix[at] = 0.0 if vec is None else vec
        names: list[str] = []
        counts = array("i")
        for term, tf in entry.terms.items():
            posting = self._postings.get(term)
            if posting is None:
                posting = self._postings[term] = Posting(term)
            posting.rows.append(at)
            posting.tfs.append(tf)
            self._drop_arrays(term)
            names.append(posting.name)
            counts.append(tf)
        length = sum(counts)
        expires = None if entry.expires_at is None else as_utc(entry.expires_at)
        row = Row(
            entry.id,
            tuple(names),
            counts,
            length,
            entry.ns_path,
            entry.metadata,
            expires,
            vec is not None,
            entry.item,
            entry.text_bytes,
            entry.order,
        )
        self.rows.append(row)
        self.where[entry.id] = at
        self.lengths[at] = length
        self.expiries[at] = np.inf if expires is None else expires.timestamp()
        for name, value in entry.columns.items():
            getattr(self, name)[at] = value
        self.total_length += length
        self.n_postings += len(names)
        self.text_bytes += entry.text_bytes

    def _grow(self, at: int) -> None:
        grown = np.zeros((max(16, at * 2), self.dims), dtype=np.float32)
        grown[:at] = self.matrix[:at]
        self.matrix = grown
        longer = np.zeros(grown.shape[0], dtype=np.float64)
        longer[:at] = self.lengths[:at]
        self.lengths = longer
        later = np.full(grown.shape[0], np.inf, dtype=np.float64)
        later[:at] = self.expiries[:at]
        self.expiries = later
        for name, fill in self.COLUMNS.items():
            column = np.full(grown.shape[0], fill, dtype=np.float64)
            column[:at] = getattr(self, name)[:at]
            setattr(self, name, column)

    def remove(self, mid: str) -> None:
        at = self.where.pop(mid, None)
        if at is None:
            return
        self._changes += 1
        row = self.rows[at]
        for term in row.names:
            self._drop_arrays(term)
            posting = self._postings[term]
            i = posting.rows.index(at)
            del posting.rows[i]
            del posting.tfs[i]
            if not posting.rows:
                del self._postings[term]
        self.total_length -= row.length
        self.n_postings -= len(row.names)
        self.text_bytes -= row.text_bytes
        if row.lookup is not None:
            self.lookup_bytes -= sys.getsizeof(row.lookup)
        last = len(self.rows) - 1
        if at != last:  # the last row moves into the hole
            moved = self.rows[last]
            self.rows[at] = moved
            self.matrix[at] = self.matrix[last]
            self.lengths[at] = self.lengths[last]
            self.expiries[at] = self.expiries[last]
            for name in self.COLUMNS:
                column = getattr(self, name)
                column[at] = column[last]
            self.where[moved.id] = at
            for term in moved.names:
                self._drop_arrays(term)
                rows = self._postings[term].rows
                rows[rows.index(last)] = at
        self.expiries[last] = np.inf
        self.rows.pop()

    def vector(self, mid: str) -> npt.NDArray[np.float32] | None:
        """The vector held for `mid` (a copy), None when it has none or is not held."""
        at = self.where.get(mid)
        if at is None or not self.rows[at].has_vector:
            return None
        out: npt.NDArray[np.float32] = self.matrix[at].copy()
        return out

    def oldest(self, count: int) -> list[str]:
        """The ids of the `count` rows of the smallest `order` (the oldest), oldest first."""
        ranked = sorted(range(len(self.rows)), key=lambda i: (self.rows[i].order, self.rows[i].id))
        return [self.rows[i].id for i in ranked[:count]]

    # -- reading ------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """An estimate of what the index holds: the matrix exactly, postings and rows roughly."""
        rows = len(self.rows) * _ROW_BYTES + self.text_bytes + self.lookup_bytes
        rows += 8 * len(self._hop[2]) if self._hop is not None else 0
        arrays = self.lengths.nbytes + self.expiries.nbytes + self._array_bytes
        arrays += sum(int(getattr(self, name).nbytes) for name in self.COLUMNS)
        terms = len(self._postings) * _TERM_BYTES + self.n_postings * _POSTING_BYTES
        return int(self.matrix.nbytes) + terms + rows + arrays

    def __len__(self) -> int:
        return len(self.rows)

    def item(self, mid: str) -> Doc | None:
        """The document `mid` as a result shows it, as of the index's revision; None if not held."""
        at = self.where.get(mid)
        return None if at is None else self.rows[at].item

    def rank(
        self,
        vector: list[float] | None,
        query_tokens: list[str],
        *,
        now: datetime,
        ns_path: str | None,
        metadata: Mapping[str, Any],
        depth: int,
        weight_text: float,
        weight_vector: float,
    ) -> Sequence[Ranked]:
        """The `depth` best live documents matching the filters, best first (ties by id), by the
        fused score of `fusion.py`: the direct score, or a hop from the best direct match when that
        is higher; documents holding the same tokens as a better one left out."""
        if not self.rows:
            return []
        usable = self._usable(now, ns_path, metadata)
        return self.rank_rows(
            vector, query_tokens, usable, depth=depth, weight_text=weight_text, weight_vector=weight_vector
        ).ranked

    def rank_rows(
        self,
        vector: list[float] | None,
        query_tokens: list[str],
        usable: npt.NDArray[np.bool_],
        *,
        depth: int,
        weight_text: float,
        weight_vector: float,
    ) -> Ranking:
        """`rank` among the rows `usable` says (a domain's own filters applied to them)."""
        sims = self._similarities(vector, len(self.rows))
        if not usable.any():
            return Ranking([], sims, [])
        text = self.text_scores(query_tokens)
        direct = fusion.direct(text, sims, weight_text, weight_vector)
        scores = np.where(usable, direct, -np.inf)
        if weight_text > 0 and query_tokens:
            scores = self._hopped(scores, usable, query_tokens)
        kept = self._top(scores, usable, depth)
        best = float(scores[kept[0]]) if kept else 0.0
        both = vector is not None and weight_text > 0 and weight_vector > 0
        evidenced = self._evidenced(kept[0], sims, usable, query_tokens) if kept and both else True
        shown = Shown(set(query_tokens), vector is not None and weight_vector > 0, best, evidenced)
        return Ranking(kept, sims, [self._ranked(i, sims, text, scores, shown) for i in kept])

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
        words that link it to other documents."""
        start = self._best(scores)
        if not scores[start] > 0:
            return scores
        words = fusion.hop_terms(self._linking(start), query_tokens)
        if not words:
            return scores
        hopped = fusion.second_hop(scores, start, self.text_scores(words))
        return np.where(usable, hopped, -np.inf)

    def _linking(self, start: int) -> list[str]:
        """`fusion.linking` of row `start`, kept for the next question while no row changes (a row
        of 30,000 terms took 15 ms to go through at each search)."""
        if self._hop is not None and self._hop[:2] == (self._changes, start):
            return self._hop[2]
        linked = fusion.linking(self.rows[start].names, self._df)
        self._hop = (self._changes, start, linked)
        return linked

    def _top(self, scores: npt.NDArray[np.float64], usable: npt.NDArray[np.bool_], depth: int) -> list[int]:
        """The rows of the `depth` best scores, best first (ties by id), distinct by tokens."""
        n = len(self.rows)
        k = min(depth * 4 + 16, int(usable.sum()))  # room for the documents `distinct` leaves out
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), self.rows[i].id))
        order = [i for i in order if scores[i] > -np.inf]
        if not self.distinct_words:
            return order[:depth]
        return fusion.distinct(order, lambda i: self.rows[i].key(), depth)

    def _evidenced(
        self,
        first: int,
        sims: npt.NDArray[np.float32],
        usable: npt.NDArray[np.bool_],
        query_tokens: list[str],
    ) -> bool:
        """Whether the ranking is evidence on one side (`scoring.evidenced`, this model's gate): the
        highest cosine of the documents it ranks among (rows without a vector have 0), the best
        match's share of the query. Not the best match's own cosine: a paraphrased answer is often
        ranked first by its words and found by meaning in another document of the scope."""
        cos = float(np.max(sims, where=usable, initial=0.0))
        share = self.share(self.lookup(self.rows[first]), query_tokens)
        return scoring.evidenced(cos, share, scoring.calibration(self.model))

    def _ranked(
        self,
        i: int,
        sims: npt.NDArray[np.float32],
        text: npt.NDArray[np.float64],
        scores: npt.NDArray[np.float64],
        shown: Shown,
    ) -> Ranked:
        row = self.rows[i]
        held = self.lookup(row)
        return Ranked(
            row.id,
            float(sims[i]) if row.has_vector else 0.0,
            float(text[i]),
            frozenset(t for t in shown.asked if t in held),
            row.has_vector and shown.by_meaning,
            fused=float(scores[i]),
            best=shown.best,
            evidenced=shown.evidenced,
        )

    def text_scores(self, query_tokens: list[str]) -> npt.NDArray[np.float64]:
        """Each row's BM25 over the query's tokens divided by the sum of their idf (what a document
        of average length holding each once would earn), capped at 1."""
        n = len(self.rows)
        text = np.zeros(n, dtype=np.float64)
        # the average over rows holding terms: a row whose terms are not derived yet (message
        # search's, `memory/message_index.py`) must not make every long one look longer
        avg = (self.total_length / max(1, int(np.count_nonzero(self.lengths[:n])))) or 1.0
        norms = K1 * (1.0 - B + B * self.lengths[:n] / avg)
        upper = 0.0
        for term in query_tokens:
            posting = self._postings.get(term)
            df = 0 if posting is None else len(posting.rows)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            upper += idf  # one occurrence in a document of average length earns idf
            if posting is not None:
                at, tf = self._posting_arrays(term, posting)
                text[at] += idf * tf * (K1 + 1.0) / (tf + norms[at])
        if upper > 0:
            text = np.minimum(text / upper, 1.0)
        return text

    def idf(self, term: str) -> float:
        """BM25's idf of `term` in this scope (a term no document holds: the highest)."""
        n, df = len(self.rows), self._df(term)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def lookup(self, row: Row) -> Container[str]:
        """The row's terms for membership tests: its tuple when short (SCAN), else its set, built
        once and counted in `nbytes`."""
        if len(row.names) <= SCAN:
            return row.names
        if row.lookup is None:
            row.lookup = frozenset(row.names)
            self.lookup_bytes += sys.getsizeof(row.lookup)
        return row.lookup

    def share(self, held: Container[str], query_tokens: list[str]) -> float:
        """The share of the query's idf mass (its distinct tokens) that the tokens `held` cover."""
        asked = set(query_tokens)
        total = sum(self.idf(t) for t in asked)
        return sum(self.idf(t) for t in asked if t in held) / total if total > 0 else 0.0

    def _df(self, term: str) -> int:
        posting = self._postings.get(term)
        return 0 if posting is None else len(posting.rows)

    def _best(self, scores: npt.NDArray[np.float64]) -> int:
        """The row with the highest score (ties by id, as the ranking breaks them)."""
        top = float(np.max(scores))
        return min(np.flatnonzero(scores == top).tolist(), key=lambda i: self.rows[i].id)

    def _posting_arrays(
        self, term: str, posting: Posting
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The posting's rows and term frequencies as numpy arrays (in the posting's order), kept
        until a document holding the term changes."""
        held = self._arrays.get(term)
        if held is None:
            held = (
                np.asarray(posting.rows, dtype=np.int64),
                np.asarray(posting.tfs, dtype=np.float64),
            )
            self._arrays[term] = held
            self._array_bytes += held[0].nbytes + held[1].nbytes
        return held

    def _drop_arrays(self, term: str) -> None:
        held = self._arrays.pop(term, None)
        if held is not None:
            self._array_bytes -= held[0].nbytes + held[1].nbytes

    def _usable(
        self, now: datetime, ns_path: str | None, metadata: Mapping[str, Any]
    ) -> npt.NDArray[np.bool_]:
        """Live (expiry after `now`, from the expiry array) and matching the filters."""
        out: npt.NDArray[np.bool_] = self.expiries[: len(self.rows)] > as_utc(now).timestamp()
        if ns_path is None and not metadata:
            return out
        for i, row in enumerate(self.rows):
            elsewhere = ns_path is not None and ns_path not in row.ns_path
            if elsewhere or (metadata and not matches_all(row.metadata, metadata)):
                out[i] = False
        return out
