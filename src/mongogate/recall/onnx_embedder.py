"""A sentence embedding model in ONNX form, read from a local folder (`[memory.embedding] provider =
"onnx"`): the optional stronger embedder (issue 39 item 5; docs/long-term-memory.md, "A stronger
embedder"). Nothing is downloaded, at start or ever: the folder holds `model.onnx` (or
`onnx/model.onnx`, the layout of an export to ONNX) and the model's `tokenizer.json`.

The model is a transformer encoder (BERT-like: all-MiniLM-L6-v2, bge-small, e5-small) taking
`input_ids`, `attention_mask` and, if it asks, `token_type_ids` (zeros). Its first output is either
the tokens' hidden states (batch x tokens x dimensions: averaged over the attention mask, as
sentence-transformers pools these models) or one vector per text (batch x dimensions). Every vector
is scaled to unit length and its size checked against `dimensions`.

Needs the `onnx` extra (`pip install 'mongogate[onnx]'`: onnxruntime); `tokenizers` comes with the
default embedder (wordllama). Loaded once, at construction, so a wrong folder, a missing file or a
model of another shape fails `serve` and `check` at start with a `ConfigError` saying what to fix.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mongogate.config import EmbeddingSettings
from mongogate.errors import ConfigError, EmbeddingUnavailable
from mongogate.lazy import lazy

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    np = lazy("numpy")

log = logging.getLogger(__name__)

__all__ = ["MAX_TOKENS", "OnnxEmbedder", "model_file"]

#: tokens per text (longer texts are truncated): sentence-transformers' limit for MiniLM
MAX_TOKENS = 256
_TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_file(folder: Path) -> Path:
    """The folder's ONNX model: `model.onnx`, or `onnx/model.onnx` (an export's layout)."""
    for candidate in (folder / "model.onnx", folder / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"memory.embedding.path {str(folder)!r}: no model.onnx (nor onnx/model.onnx) in it; give the "
        "folder of a sentence embedding model exported to ONNX, holding model.onnx and tokenizer.json"
    )


class OnnxEmbedder:
    """Texts to unit vectors with an ONNX sentence embedding model from a local folder."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        if settings.provider != "onnx" or settings.path is None or settings.dimensions is None:
            raise ConfigError("memory.embedding: provider 'onnx' needs path and dimensions")
        folder = Path(settings.path).expanduser()
        self.model: str = settings.model or f"onnx/{folder.resolve().name}"
        self.dimensions: int = settings.dimensions
        self.batch_size = settings.batch_size
        self._lock = threading.Lock()  # one run at a time per session: predictable CPU use
        self._session, self._inputs = _session(model_file(folder), settings.threads)
        self._tokenizer = _tokenizer(folder / "tokenizer.json")

    def __repr__(self) -> str:
        return f"OnnxEmbedder(model={self.model!r}, dimensions={self.dimensions})"

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._batch(list(texts[start : start + self.batch_size])))
        return out

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await anyio.to_thread.run_sync(self.embed_sync, texts)

    def _batch(self, texts: list[str]) -> list[list[float]]:
        try:
            encoded = self._tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            with self._lock:
                first = self._session.run(None, {k: feed[k] for k in self._inputs})[0]
        except Exception as e:  # the runtime is code we do not own: any failure is "unavailable"
            log.warning("onnx embedding failed: %r", e)
            raise EmbeddingUnavailable(f"the ONNX embedding model {self.model!r} failed; retry later") from e
        return _unit_rows(_pooled(np.asarray(first, dtype=np.float32), mask), self.dimensions, self.model)


def _session(path: Path, threads: int) -> tuple[Any, tuple[str, ...]]:
    """The inference session and the text inputs it takes (in `_TEXT_INPUTS`' names)."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ConfigError(
            "memory.embedding provider 'onnx' needs onnxruntime: pip install 'mongogate[onnx]'"
        ) from e
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # warnings from the runtime go nowhere near stdout
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # a corrupt or foreign file: the runtime's own error, named
        raise ConfigError(f"memory.embedding.path: {path} is not a model onnxruntime can load ({e})") from e
    names = tuple(i.name for i in session.get_inputs())
    unknown = [n for n in names if n not in _TEXT_INPUTS]
    if unknown or "input_ids" not in names or "attention_mask" not in names:
        raise ConfigError(
            f"memory.embedding.path: {path} takes inputs {list(names)}; a text encoder taking "
            "input_ids and attention_mask (and optionally token_type_ids) is needed"
        )
    return session, names


def _tokenizer(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(
            f"memory.embedding.path: no tokenizer.json beside the model ({path}); copy the model's "
            "tokenizer.json (the Hugging Face tokenizers format) into the folder"
        )
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:
        raise ConfigError(f"memory.embedding.path: {path} is not a tokenizers JSON file ({e})") from e
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding()
    return tok


def _pooled(first: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """One vector per text: the output itself (batch x dims), or the mean of the hidden states
    of the tokens the attention mask keeps (batch x tokens x dims)."""
    if first.ndim == 2:
        return first
    if first.ndim != 3:
        raise EmbeddingUnavailable(
            f"the ONNX model's first output has shape {first.shape}; expected 2 or 3 axes"
        )
    weights = mask[:, :, None].astype(np.float32)
    pooled = (first * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), np.float32(1e-9))
    return np.asarray(pooled, dtype=np.float32)


def _unit_rows(rows: npt.NDArray[np.float32], dims: int, model: str) -> list[list[float]]:
    if rows.shape[1] != dims:
        raise EmbeddingUnavailable(
            f"the ONNX model {model!r} returns {rows.shape[1]} dimensions; memory.embedding.dimensions "
            f"says {dims}"
        )
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise EmbeddingUnavailable(f"the ONNX model {model!r} returned a zero or non-finite vector")
    return (rows / norms).astype(np.float64).tolist()  # type: ignore[no-any-return]
