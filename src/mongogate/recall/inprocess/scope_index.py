"""One scope's memories held in the server process: the generic index of
`indexing/scope_index.py` (vectors as one matrix, terms scored with BM25, the fused ranking), fed
with memories as they are stored (`entry_of`).

The database stays the only truth: the index is a copy labelled with the scope's revision
(`indexing/coherence.py` keeps it fresh, and says when a write is in flight). It holds what a
result shows (text, namespace, key, version, author, dates), so a recall of a settled scope answers
from it; while a write is in flight, `recall` reads the ranked memories back from the database.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import numpy.typing as npt

from mongogate.indexing import K1, B, Entry, Ranked, unpack
from mongogate.indexing import ScopeIndex as _Index
from mongogate.recall import documents as rd
from mongogate.textrank import tokens
from mongogate.values import Doc

__all__ = ["INDEX_FIELDS", "ITEM_KEYS", "K1", "B", "Ranked", "ScopeIndex", "entry_of"]

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


class ScopeIndex(_Index):
    """The memories of one scope for one embedding model."""

    def put(self, doc: Doc) -> None:
        """Hold the memory `doc` (read with `INDEX_FIELDS`), replacing its previous version."""
        self.add(entry_of(doc, self.model, self.dims))
