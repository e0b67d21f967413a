"""Long-term memory: remember, recall and forget across sessions (no MCP; tools sit on top).

Memories are scoped by `Scope` (tenant, and subject under scope "subject"), found again by
exact term (a `$text` index) and by meaning (embeddings), the two rankings fused.
"""

from __future__ import annotations

from mongogate.recall.embedding import Embedder, LocalEmbedder, make_embedder
from mongogate.recall.model import (
    History,
    MemoryItem,
    MemoryPage,
    Recalled,
    RecallMethod,
    Remembered,
    Scope,
    Version,
)

__all__ = [
    "Embedder",
    "History",
    "LocalEmbedder",
    "MemoryItem",
    "MemoryPage",
    "RecallMethod",
    "Recalled",
    "Remembered",
    "Scope",
    "Version",
    "make_embedder",
]
