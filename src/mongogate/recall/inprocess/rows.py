"""One scope's memories as the in-process index holds them: the rows (what a result shows, what
a recall filters on), the vectors as one matrix with each row's lengths, times and expiry beside
it as arrays, the terms as postings, and supersession's links by the memory they replace
(`recall/chain.py`). `put` and `remove` keep them all in step; `scope_index.ScopeIndex` ranks them.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from mongogate.clock import as_utc, utc_or_none
from mongogate.recall import documents as rd
from mongogate.recall.model import Link, links_of
from mongogate.recall.vectors import unpack
from mongogate.textrank import tokens
from mongogate.values import Doc

#: what a result shows of a memory (`pages.item_of` reads these), kept per row
ITEM_KEYS = (
    *("namespace", "key", "text", "metadata", rd.VERSION, "author", rd.CREATED_AT, rd.UPDATED_AT),
    *(rd.SUPERSEDES, rd.SOURCE, rd.OCCURRED_AT),
)
#: fields the index keeps of a memory: what a recall filters or ranks on, and what it shows
INDEX_FIELDS = {
    "embedding": 1,
    rd.EMBEDDING_MODEL: 1,
    rd.NS_PATH: 1,
    rd.EXPIRES_AT: 1,
    rd.SUPERSEDED_BY: 1,
    rd.STATED_AT: 1,
    **dict.fromkeys(ITEM_KEYS, 1),
}
#: a rough byte cost per posting (dict slot, int key and value) and per memory (id, row state)
_POSTING_BYTES = 100
_ROW_BYTES = 1100  # the row, and its item: a dict of 9 fields, two datetimes


@dataclass
class Row:
    id: str
    terms: Counter[str]
    length: int
    ns_path: frozenset[str]
    metadata: dict[str, Any]
    expires_at: datetime | None
    has_vector: bool
    #: the memory as a result shows it (`ITEM_KEYS` and `_id`)
    item: Doc
    #: its supersession (`recall/chain.py`): what it replaces (id -> when), the ids of the newer
    #: memories stated to replace it (the other half), when it was last stated current
    links: dict[str, datetime] = field(default_factory=dict)
    hints: frozenset[str] = frozenset()
    stated_at: datetime | None = None
    created: datetime | None = None


def _row(mid: str, doc: Doc, terms: Counter[str], has_vector: bool) -> Row:
    """Memory `doc` as the index keeps it (its vector goes to the matrix)."""
    ns = doc.get(rd.NS_PATH) or []
    expires = doc.get(rd.EXPIRES_AT)
    return Row(
        mid,
        terms,
        sum(terms.values()),
        frozenset(ns if isinstance(ns, list) else [ns]),
        dict(doc.get("metadata") or {}),
        None if expires is None else as_utc(expires),
        has_vector,
        {"_id": mid, **{k: doc.get(k) for k in ITEM_KEYS}},
        {link.id: link.at for link in links_of(doc.get(rd.SUPERSEDES))},
        frozenset(link.id for link in links_of(doc.get(rd.SUPERSEDED_BY))),
        utc_or_none(doc.get(rd.STATED_AT)),
        utc_or_none(doc.get(rd.CREATED_AT)),
    )


class Rows:
    """The memories of one scope for one embedding model, as rows and arrays."""

    def __init__(self, model: str, dims: int, rev: int) -> None:
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
        #: each row's created_at, updated_at and occurred_at (nan: none) as POSIX timestamps
        self.created: npt.NDArray[np.float64] = np.zeros(16, dtype=np.float64)
        self.updated: npt.NDArray[np.float64] = np.zeros(16, dtype=np.float64)
        self.occurred: npt.NDArray[np.float64] = np.full(16, np.nan, dtype=np.float64)
        #: supersession, older memory id -> {newer memory id: when stated}, from the newer rows'
        #: `supersedes` (the truth of each link: `recall/chain.py`), and what changed it last
        self.replacers: dict[str, dict[str, datetime]] = {}
        #: +1 at every put and remove (cached results of the rows are of one mutation)
        self.mutations = 0
        self.chain_cache: tuple[int, float, dict[int, tuple[Link, ...]]] | None = None
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

    def put(self, doc: Doc) -> None:
        mid = str(doc["_id"])
        self.remove(mid)
        terms = Counter(tokens(str(doc.get("text") or "")))
        vec = self._vector(doc)
        at = len(self.rows)
        if at == self.matrix.shape[0]:
            self._grow(max(16, at * 2))
        self.matrix[at] = 0.0 if vec is None else vec
        row = _row(mid, doc, terms, vec is not None)
        self.rows.append(row)
        self.where[mid] = at
        if self._ids is not None:
            bisect.insort(self._ids, mid)
        self.lengths[at] = row.length
        self.expiries[at] = np.inf if row.expires_at is None else row.expires_at.timestamp()
        self._times(at, doc)
        for older, when in row.links.items():
            self.replacers.setdefault(older, {})[mid] = when
        self.mutations += 1
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
        self.mutations += 1
        for older in row.links:
            by = self.replacers.get(older, {})
            by.pop(mid, None)
            if not by:
                self.replacers.pop(older, None)
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
            for times in (self.created, self.updated, self.occurred):
                times[at] = times[last]
            self.where[moved.id] = at
            for term in moved.terms:
                self._drop_arrays(term)
                posting = self.postings[term]
                posting[at] = posting.pop(last)
        self.expiries[last] = np.inf
        self.rows.pop()

    def _grow(self, size: int) -> None:
        """Room for `size` rows in the matrix and the arrays beside it."""
        at = len(self.rows)
        grown = np.zeros((size, self.dims), dtype=np.float32)
        grown[:at] = self.matrix[:at]
        self.matrix = grown
        for name, fill in (("lengths", 0.0), ("expiries", np.inf), ("created", 0.0), ("updated", 0.0)):
            longer = np.full(size, fill, dtype=np.float64)
            longer[:at] = getattr(self, name)[:at]
            setattr(self, name, longer)
        occurred = np.full(size, np.nan, dtype=np.float64)
        occurred[:at] = self.occurred[:at]
        self.occurred = occurred

    def _times(self, at: int, doc: Doc) -> None:
        """Row `at`'s created_at, updated_at and occurred_at, as timestamps beside the matrix."""
        for times, name in ((self.created, rd.CREATED_AT), (self.updated, rd.UPDATED_AT)):
            when = utc_or_none(doc.get(name))
            times[at] = 0.0 if when is None else when.timestamp()
        occurred = utc_or_none(doc.get(rd.OCCURRED_AT))
        self.occurred[at] = np.nan if occurred is None else occurred.timestamp()

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

    def nbytes(self) -> int:
        """An estimate of what the index holds: the matrix exactly, postings and rows roughly."""
        rows = len(self.rows) * _ROW_BYTES + self.text_bytes
        arrays = self.lengths.nbytes + self.expiries.nbytes + self._array_bytes + 8 * len(self._ids or ())
        arrays += self.created.nbytes + self.updated.nbytes + self.occurred.nbytes
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

    def _df(self, term: str) -> int:
        return len(self.postings.get(term, {}))

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
