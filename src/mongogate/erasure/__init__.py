"""Erasure with a receipt: every document of a tenant, or of one subject within it, removed in
batches (audit events kept and redacted), resumable, with a receipt naming each collection.

What each package stores is declared in that package (`erase.py`, a `Declared`); this package
holds the declaration's types and the run (`Sweep`); `assembly.erase` composes the packages.
"""

from __future__ import annotations

from mongogate.erasure.declare import (
    MAX_NAME_CHARS,
    TENANT_WIDE,
    Declared,
    Kept,
    Part,
    Redacted,
    Removed,
    Sweeping,
    Target,
)
from mongogate.erasure.receipt import CollectionReceipt, ErasureReceipt, id_hash
from mongogate.erasure.sweep import BATCH, JOURNAL, LEASE, Sweep, journal_id

#: the journal's own collection, declared like every other
JOURNAL_KEPT = Kept(
    JOURNAL,
    "one document per unfinished erasure, named by a digest of its target (no name): "
    "deleted when it finishes",
)

__all__ = [
    "BATCH",
    "JOURNAL",
    "JOURNAL_KEPT",
    "LEASE",
    "MAX_NAME_CHARS",
    "TENANT_WIDE",
    "CollectionReceipt",
    "Declared",
    "ErasureReceipt",
    "Kept",
    "Part",
    "Redacted",
    "Removed",
    "Sweep",
    "Sweeping",
    "Target",
    "id_hash",
    "journal_id",
]
