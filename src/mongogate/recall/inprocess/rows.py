"""One scope's memories as the in-process index holds them: the generic index of
`indexing/scope_index.py` (rows, the vector matrix, the postings, the expiries), fed with memories
as they are stored (`entry_of`), and what recall keeps beside it: each row's created_at, updated_at
and occurred_at as arrays (`COLUMNS`), supersession's links by the memory they replace
(`recall/chain.py`), and the ids in order for completions. `put` and `remove` keep them all in step;
`scope_index.ScopeIndex` ranks them.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from mongogate.clock import utc_or_none
from mongogate.indexing import Entry, unpack
from mongogate.indexing import ScopeIndex as _Index
from mongogate.lazy import lazy
from mongogate.recall import documents as rd
from mongogate.recall.model import Link, links_of
from mongogate.textrank import tokens
from mongogate.values import Doc

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

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
#: a rough byte cost per supersession entry (its dict, links and times)
_CHAIN_BYTES = 400


@dataclass(frozen=True)
class Chain:
    """A memory's supersession (`recall/chain.py`): what it replaces (id -> when), the ids of the
    newer memories stated to replace it (the other half), when it was last stated current, when
    it was created."""

    links: dict[str, datetime] = field(default_factory=dict)
    hints: frozenset[str] = frozenset()
    stated_at: datetime | None = None
    created: datetime | None = None


def _stamp(value: object, empty: float) -> float:
    when = utc_or_none(value)
    return empty if when is None else when.timestamp()


def entry_of(doc: Doc, model: str, dims: int) -> Entry:
    """A memory as read with `INDEX_FIELDS`, as the index holds it: its vector only when of `model`."""
    mid = str(doc["_id"])
    text = str(doc.get("text") or "")
    ns = doc.get(rd.NS_PATH) or []
    return Entry(
        mid,
        Counter(tokens(text)),
        _vector(doc, model, dims),
        {"_id": mid, **{k: doc.get(k) for k in ITEM_KEYS}},
        expires_at=doc.get(rd.EXPIRES_AT),
        ns_path=frozenset(ns if isinstance(ns, list) else [ns]),
        metadata=dict(doc.get("metadata") or {}),
        text_bytes=len(text),
        columns={
            "created": _stamp(doc.get(rd.CREATED_AT), 0.0),
            "updated": _stamp(doc.get(rd.UPDATED_AT), 0.0),
            "occurred": _stamp(doc.get(rd.OCCURRED_AT), math.nan),
        },
    )


def _vector(doc: Doc, model: str, dims: int) -> npt.NDArray[np.float32] | None:
    raw = doc.get("embedding")
    if raw is None or doc.get(rd.EMBEDDING_MODEL) != model:
        return None
    try:
        vec = np.array(unpack(raw), dtype=np.float32)
    except ValueError:
        return None
    norm = float(np.linalg.norm(vec))
    if vec.shape != (dims,) or not math.isfinite(norm) or norm == 0.0:
        return None
    return vec / norm


class Rows(_Index):
    """The memories of one scope for one embedding model, as rows and arrays."""

    #: each row's created_at, updated_at and occurred_at (nan: none) as POSIX timestamps
    COLUMNS: ClassVar[dict[str, float]] = {"created": 0.0, "updated": 0.0, "occurred": math.nan}
    created: npt.NDArray[np.float64]
    updated: npt.NDArray[np.float64]
    occurred: npt.NDArray[np.float64]

    def __init__(self, model: str, dims: int, rev: int) -> None:
        super().__init__(model, dims, rev)
        #: each held memory's supersession, by id
        self.chain: dict[str, Chain] = {}
        #: supersession, older memory id -> {newer memory id: when stated}, from the newer rows'
        #: `supersedes` (the truth of each link: `recall/chain.py`)
        self.replacers: dict[str, dict[str, datetime]] = {}
        #: +1 at every put and remove (cached results of the rows are of one mutation)
        self.mutations = 0
        self.chain_cache: tuple[int, float, dict[int, tuple[Link, ...]]] | None = None
        #: the ids in order, made at the first `ids_from` and kept in order by `put` and `remove`
        self._ids: list[str] | None = None

    def put(self, doc: Doc) -> None:
        """Hold the memory `doc` (read with `INDEX_FIELDS`), replacing its previous version."""
        mid = str(doc["_id"])
        self.remove(mid)
        self.add(entry_of(doc, self.model, self.dims))
        chain = Chain(
            {link.id: link.at for link in links_of(doc.get(rd.SUPERSEDES))},
            frozenset(link.id for link in links_of(doc.get(rd.SUPERSEDED_BY))),
            utc_or_none(doc.get(rd.STATED_AT)),
            utc_or_none(doc.get(rd.CREATED_AT)),
        )
        self.chain[mid] = chain
        for older, when in chain.links.items():
            self.replacers.setdefault(older, {})[mid] = when
        if self._ids is not None:
            bisect.insort(self._ids, mid)
        self.mutations += 1

    def remove(self, mid: str) -> None:
        if mid not in self.where:
            return
        super().remove(mid)
        self.mutations += 1
        if self._ids is not None:
            del self._ids[bisect.bisect_left(self._ids, mid)]
        chain = self.chain.pop(mid, Chain())
        for older in chain.links:
            by = self.replacers.get(older, {})
            by.pop(mid, None)
            if not by:
                self.replacers.pop(older, None)

    def nbytes(self) -> int:
        held = len(self.chain) * _CHAIN_BYTES + 8 * len(self._ids or ())
        return super().nbytes() + held

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
