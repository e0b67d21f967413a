"""A small least-recently-used memo: a question asked again (as agents do) skips the model and the
tokenizer. Recall keeps its questions' embeddings and terms in two (`recall/inprocess/cache.py`),
message search its questions' embeddings in one (`memory/message_index.py`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["QUERIES", "Memo"]

#: questions kept per memo: a question embedding is 256 floats, about 10 KiB as a list
QUERIES = 256

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """key -> value, the last `size` kept (the least recently used out first)."""

    def __init__(self, size: int = QUERIES) -> None:
        self.size = size
        self._held: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._held.get(key)
        if value is not None:
            self._held.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._held[key] = value
        self._held.move_to_end(key)
        while len(self._held) > self.size:
            self._held.popitem(last=False)

    def __len__(self) -> int:
        return len(self._held)
