"""What the scope index (`scope_index.py`) is made of: a term's postings and a row held compactly
(C arrays, one copy of each term's string), and what one ranking returns (`Ranking`) and shares
among its documents (`Shown`)."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mongogate.indexing.entries import Ranked
from mongogate.lazy import lazy
from mongogate.values import Doc

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")


@dataclass(frozen=True)
class Ranking:
    """One ranking: the rows kept (best first), every row's cosine with the question, and the
    kept rows as ranked."""

    kept: list[int]
    sims: npt.NDArray[np.float32]
    ranked: list[Ranked]


@dataclass(frozen=True)
class Shown:
    """What every document of one ranking shares: the query's tokens, whether meaning ranked, the
    best fused score and whether the best match is evidence."""

    asked: set[str]
    by_meaning: bool
    best: float
    evidenced: bool


class Posting:
    """One term's postings: the rows holding it and how often, in two C arrays."""

    __slots__ = ("name", "rows", "tfs")

    def __init__(self, name: str) -> None:
        #: the index's one copy of the term's string (every row holding it refers to this one)
        self.name = name
        self.rows = array("i")
        self.tfs = array("i")


@dataclass(eq=False)
class Row:
    id: str
    #: its distinct terms (the index's copies of their strings) and their counts, in the same order
    names: tuple[str, ...]
    counts: array[int]
    length: int
    ns_path: frozenset[str]
    metadata: Mapping[str, Any]
    expires_at: datetime | None
    has_vector: bool
    #: the document as a result shows it
    item: Doc
    text_bytes: int
    order: float
    #: its terms as a set, for membership in O(1): built at the first ranking that asks, only
    #: for a row of more than SCAN terms (`ScopeIndex.lookup`, which counts its bytes)
    lookup: frozenset[str] | None = None

    @property
    def terms(self) -> dict[str, int]:
        """Its terms and their counts (made on demand: a hop reads one row's)."""
        return dict(zip(self.names, self.counts, strict=True))

    def holds(self, term: str) -> bool:
        """Whether it holds `term`: O(1) once its set is built (`ScopeIndex.lookup`)."""
        return term in (self.names if self.lookup is None else self.lookup)

    def key(self) -> frozenset[tuple[str, int]]:
        """Its tokens with their counts: two rows with the same key say the same words."""
        return frozenset(zip(self.names, self.counts, strict=True))


class PostingView(Mapping[str, "array[int]"]):
    """term -> the rows holding it (read-only; tests and benchmarks read postings this way)."""

    def __init__(self, postings: dict[str, Posting]) -> None:
        self._postings = postings

    def __getitem__(self, term: str) -> array[int]:
        return self._postings[term].rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._postings)

    def __len__(self) -> int:
        return len(self._postings)
