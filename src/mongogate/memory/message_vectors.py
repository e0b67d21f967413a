"""Message embeddings for `search_messages`, computed when a search first reads a message and kept
in the server process (`MessageVectors`), never written to the database.

Computed at search time rather than at append time: the write path stays exactly as it was (an
append costs no embedding, and a failing embedder can never fail a turn), and one search embeds
every message it has not seen in one batch, which costs far less per message than one call per
append (docs/decisions/message-search.md has the figures). Each vector is kept under the message's
`_id` with a digest of its content, so a message whose content changed is embedded again; the
cache holds at most `max_entries` vectors, the least recently searched dropped first.

The embedder is any object with `model`, `dimensions` and `async embed(texts)` (long-term memory's
`recall.embedding.Embedder` is one): `memory` may not import `recall` (import-linter layers).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from mongogate.errors import EmbeddingUnavailable


class TextEmbedder(Protocol):
    model: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()


class MessageVectors:
    """The embedder and the in-process cache of message vectors (unit length, float32)."""

    def __init__(self, embedder: TextEmbedder, max_entries: int = 50_000) -> None:
        self.embedder = embedder
        self.max_entries = max_entries
        self._cache: OrderedDict[Hashable, tuple[bytes, npt.NDArray[np.float32]]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._cache)

    async def similarities(
        self, query: str, messages: Sequence[tuple[Hashable, str]]
    ) -> npt.NDArray[np.float32]:
        """The cosine of the query with each message, in order. The query and every message not
        cached (or whose content changed) are embedded in one call; raises `EmbeddingUnavailable`."""
        dims = self.embedder.dimensions
        matrix = np.zeros((len(messages), dims), dtype=np.float32)
        missing: list[tuple[int, Hashable, bytes, str]] = []
        with self._lock:
            for i, (key, content) in enumerate(messages):
                digest = _digest(content)
                held = self._cache.get(key)
                if held is not None and held[0] == digest:
                    self._cache.move_to_end(key)
                    matrix[i] = held[1]
                else:
                    missing.append((i, key, digest, content))
        vectors = await self.embedder.embed([query, *(m[3] for m in missing)])
        if len(vectors) != len(missing) + 1 or any(len(v) != dims for v in vectors):
            raise EmbeddingUnavailable("the embedder answered with the wrong number or size of vectors")
        got = _unit(np.asarray(vectors, dtype=np.float32))
        with self._lock:
            for (i, key, digest, _), row in zip(missing, got[1:], strict=True):
                matrix[i] = row
                if self.max_entries > 0:
                    self._cache[key] = (digest, row.copy())
                    self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        sims: npt.NDArray[np.float32] = matrix @ got[0]
        return sims


def _unit(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[~np.isfinite(norms) | (norms == 0)] = 1.0
    out: npt.NDArray[np.float32] = np.nan_to_num(rows / norms).astype(np.float32)
    return out
