"""What an index holds and returns: `Entry` (one document, made by its domain's adapter), `Ranked`
(one ranked document and the score it shows) and the filters both readers apply
(`matches_all`, `above_floor`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from mongogate import scoring
from mongogate.indexing.compare import matches
from mongogate.lazy import lazy
from mongogate.values import Doc

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")


def matches_all(held: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Every wanted top-level value is held, as a query matches it (`compare.matches`)."""
    return all(matches(held.get(k), v) for k, v in wanted.items())


@dataclass(frozen=True)
class Entry:
    """One document as an index holds it (its domain's adapter makes it)."""

    id: str
    #: each token of its text and how often it occurs (`textrank.tokens`, counted)
    terms: Mapping[str, int]
    #: its vector of the index's model, unit length; None: none (a term match only)
    vector: npt.NDArray[np.float32] | None
    #: what a result shows of it (its domain's fields, and `_id`)
    item: Doc
    #: when it stops being returned (None: never)
    expires_at: datetime | None = None
    #: what `rank`'s `ns_path` filter asks for: a memory's namespace paths, a message's session
    ns_path: frozenset[str] = frozenset()
    #: top-level values `rank`'s `metadata` filter compares
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: bytes of text `item` holds (counted in `ScopeIndex.nbytes`)
    text_bytes: int = 0
    #: how old it is, for `oldest` (a message's creation as a POSIX timestamp); 0 where unused
    order: float = 0.0
    #: its values of the index's `ScopeIndex.COLUMNS` (a domain's arrays beside the matrix)
    columns: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Ranked:
    id: str
    similarity: float
    text: float
    matched: frozenset[str]
    #: the document has a vector of the query's model (a meaning match, however weak)
    has_vector: bool = False
    #: what `rank` ordered by, in [0, 1] (`fusion.py`): the document's own evidence
    fused: float = 0.0
    #: the best fused score of the same ranking (its first document's `fused`)
    best: float = 0.0
    #: the ranking's best match has evidence on one side (`scoring.evidenced`)
    evidenced: bool = True

    @property
    def score(self) -> float:
        """The score a result shows and `min_score` compares, in [0, 1], in `rank`'s order:
        mostly the ranking's best fused score, a tenth the document's own (`scoring.shown`); only
        the tenth when the best match has no evidence on either side."""
        return scoring.shown(self.fused, max(self.best, self.fused), self.evidenced)


R = TypeVar("R", bound="Ranked")


def above_floor(ranked: Sequence[R], min_score: float) -> list[R]:
    """The ranked documents a reader returns: a match by terms, by a hop or by meaning (however
    weak, when the floor is 0), scoring at least `min_score`; nothing else."""
    return [r for r in ranked if (r.fused > 0 or r.has_vector) and r.score >= min_score]
