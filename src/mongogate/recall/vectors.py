"""A memory's vector as stored: `indexing/vectors.py` (shared with message search since issue 36);
these names stay importable from here for recall's writers."""

from __future__ import annotations

from mongogate.indexing import FIELD, FLOAT32_HEADER, pack, unpack

__all__ = ["FIELD", "FLOAT32_HEADER", "pack", "unpack"]
