"""The revision protocol: `indexing/coherence.py` (shared with message search since issue 36);
these names stay importable from here for recall's modules."""

from __future__ import annotations

from mongogate.indexing import (
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

__all__ = [
    "CHANGES",
    "LEASE",
    "Coherence",
    "Head",
    "Held",
    "Outcome",
    "Refreshed",
    "born",
    "read_by_id",
]
