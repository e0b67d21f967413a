"""Embedders: text in, unit vectors out. The local one runs offline from its own wheel."""

from __future__ import annotations

import logging
import pathlib
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import anyio

from mongogate.config import EmbeddingSettings
from mongogate.errors import EmbeddingUnavailable

log = logging.getLogger(__name__)

#: the model name stored on each memory embedded by the local model
LOCAL_MODEL = "wordllama/l2_supercat-256"
LOCAL_DIMENSIONS = 256


class Embedder(Protocol):
    """Turns texts into unit-length vectors; raises `EmbeddingUnavailable` when it cannot."""

    #: stored on each memory; `recall` never compares vectors of two models
    model: str
    dimensions: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector of `dimensions` floats per text, in order."""
        ...


class LocalEmbedder:
    """wordllama's 256-dimension model, loaded from the package's own folder (no network).

    Its default loader looks for the tokenizer elsewhere and then tries to download it;
    `cache_dir=<package folder>, disable_download=True` keeps it offline. Loaded once, lazily,
    and shared: the model is read-only after loading.
    """

    model = LOCAL_MODEL
    dimensions = LOCAL_DIMENSIONS
    _lock = threading.Lock()
    _shared: Any = None

    @classmethod
    def _load(cls) -> Any:
        with cls._lock:
            if cls._shared is None:
                import wordllama

                cls._shared = wordllama.WordLlama.load(
                    cache_dir=pathlib.Path(wordllama.__file__).parent, disable_download=True
                )
            return cls._shared

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            vectors = self._load().embed(list(texts), norm=True)
        except Exception as e:  # the model is code we do not own: any failure is "unavailable"
            log.warning("local embedding failed: %r", e)
            raise EmbeddingUnavailable("the local embedding model failed; retry later") from e
        return [[float(x) for x in row] for row in vectors]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await anyio.to_thread.run_sync(self.embed_sync, texts)


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder `[memory.embedding]` selects."""
    if settings.provider == "local":
        return LocalEmbedder()
    if settings.provider == "onnx":
        from mongogate.recall.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(settings)
    from mongogate.recall.openai_embedder import OpenAIEmbedder

    return OpenAIEmbedder(settings)
