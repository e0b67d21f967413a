"""One scope's memories held in the server process, ranked for a question: the generic index of
`indexing/scope_index.py` (vectors as one matrix, terms scored with BM25, the fused ranking of
`indexing/fusion.py`), held as `rows.Rows`, with recall's own rules on top: replaced memories
(`recall/chain.py`) left out unless asked for, a recall's time window, and each result's newer
very similar sibling (`chains.py`).

The database stays the only truth: the index is a copy labelled with the scope's revision
(`indexing/coherence.py` keeps it fresh, and says when a write is in flight). It holds what a
result shows (text, namespace, key, version, author, dates, supersession, source, event time), so
a recall of a settled scope answers from it; while a write is in flight, `recall` reads the ranked
memories back from the database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mongogate.indexing import K1, B
from mongogate.indexing import Ranked as _Ranked
from mongogate.lazy import lazy
from mongogate.recall.inprocess import chains
from mongogate.recall.inprocess.rows import INDEX_FIELDS, ITEM_KEYS, Rows, entry_of
from mongogate.recall.model import Link, Similar
from mongogate.recall.scope_filter import RecallFilter

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

__all__ = ["INDEX_FIELDS", "ITEM_KEYS", "K1", "B", "Ranked", "ScopeIndex", "entry_of"]


@dataclass(frozen=True)
class Ranked(_Ranked):
    """A ranked memory (`indexing.Ranked`) and its supersession marks."""

    #: the newer memories that replace this one (`recall/chain.py`; shown with include_superseded)
    superseded_by: tuple[Link, ...] = ()
    #: a newer memory very close in meaning (`chains.newer_similar`)
    newer_similar: Similar | None = None


class ScopeIndex(Rows):
    """The memories of one scope for one embedding model, ranked for a question."""

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
        filt: RecallFilter | None = None,
        siblings: float | None = None,
    ) -> list[Ranked]:
        """The `depth` best live memories matching the filters, best first (ties by id), by the
        generic index's fused score; memories holding the same tokens as a better one left out.
        Replaced memories (`recall/chain.py`) are left out unless `filt` includes them, and
        marked; with `siblings` (a cosine), each result names a newer memory that close to it."""
        if not self.rows:
            return []
        chained = chains.replaced(self, now, None if filt is None else filt.as_of)
        usable = self._admitted(now, ns_path, metadata, filt, chained)
        got = self.rank_rows(
            vector, query_tokens, usable, depth=depth, weight_text=weight_text, weight_vector=weight_vector
        )
        near = {} if siblings is None or vector is None else self._siblings(got.kept, got.sims, now, siblings)
        pairs = zip(got.kept, got.ranked, strict=True)
        return [_marked(r, chained.get(i, ()), near.get(i)) for i, r in pairs]

    def _admitted(
        self,
        now: datetime,
        ns_path: str | None,
        metadata: Mapping[str, Any],
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


def _marked(r: _Ranked, superseded_by: tuple[Link, ...], near: Similar | None) -> Ranked:
    """`r` as recall's `Ranked`, with what replaces it and its newer very similar sibling."""
    fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}
    return Ranked(**fields, superseded_by=superseded_by, newer_similar=near)
