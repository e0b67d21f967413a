"""In-process per-scope indexes kept coherent across server processes by the database, shared by
long-term memory (`recall/inprocess/`) and conversation messages (`memory/message_index.py`):

- `coherence.py`: the revision protocol (every writer brackets its writes, every reader refreshes
  its copy by the scope's revision, and, on the embedded engine, by its write signal);
- `scope_index.py` (its parts in `rows.py`): one scope's documents as a vector matrix and a BM25
  term index, ranked by the fused score of `fusion.py` (`Entry` in, `Ranked` out);
- `compare.py`: metadata values as a filter matches them, alike in a query and in the process;
- `budget.py`: one byte budget for every index of the process, least recently used out first;
- `vectors.py`: a vector as stored (a BSON binary vector); `memo.py`: the questions' memo.

Below `memory` and `recall` (pyproject's import-linter layers), which both build on it and never
import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mongogate.indexing.budget import IndexBudget, Indexed, Shelf
from mongogate.indexing.coherence import (
    CHANGES,
    LEASE,
    Coherence,
    Head,
    Held,
    Outcome,
    Refreshed,
    born,
    read_by_id,
)
from mongogate.indexing.compare import OPERATORS, RANGES, Compared, condition, is_number, matches
from mongogate.indexing.memo import QUERIES, Memo
from mongogate.indexing.vectors import FIELD, FLOAT32_HEADER, pack, unpack
from mongogate.lazy import lazy_exports

#: what a call ranks with, never a start (building the services holds no index yet): imported at
#: the first read (tests/test_lazy.py)
_LAZY = {
    **dict.fromkeys(("Entry", "Ranked", "above_floor", "matches_all"), "mongogate.indexing.entries"),
    **dict.fromkeys(("K1", "B", "ScopeIndex"), "mongogate.indexing.scope_index"),
}
if TYPE_CHECKING:
    from mongogate.indexing.entries import Entry, Ranked, above_floor, matches_all
    from mongogate.indexing.scope_index import K1, B, ScopeIndex
else:
    __getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "CHANGES",
    "FIELD",
    "FLOAT32_HEADER",
    "K1",
    "LEASE",
    "OPERATORS",
    "QUERIES",
    "RANGES",
    "B",
    "Coherence",
    "Compared",
    "Entry",
    "Head",
    "Held",
    "IndexBudget",
    "Indexed",
    "Memo",
    "Outcome",
    "Ranked",
    "Refreshed",
    "ScopeIndex",
    "Shelf",
    "above_floor",
    "born",
    "condition",
    "is_number",
    "matches",
    "matches_all",
    "pack",
    "read_by_id",
    "unpack",
]
